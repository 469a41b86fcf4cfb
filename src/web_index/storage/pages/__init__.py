"""Where a record is read: a body from its place, the data page an index line
names (``_places``: one positioned read, one zstd frame, no footer), a row
group of a store file, a big file's bodies by their own data page through the
Parquet page index (``_reader``, the Thrift and PLAIN bytes both decode in
``_format``), and the checksums every read checks and
every write seals (``_checksum``: the footer's CRC, the whole file's, the pages'
CRCs as pyarrow reads them), and Parquet files written apart joined by their
bytes (``_append``, the footer written back in the same Thrift). Nothing here
is public (``__all__`` is empty): the names imported ``as`` themselves are the
internal API of the rest of storage, the backends included, so that this
package never imports them back.
``CheckedFile`` (``_checked_file``, a pyarrow ``ParquetFile``) is imported on
first use, when a store file is opened: reading a body by its place needs no
pyarrow, which a server worker that only looks captures up never imports.
"""

from typing import TYPE_CHECKING, Any

from web_index.storage.pages._append import append_parquet as append_parquet
from web_index.storage.pages._checksum import CHECKSUM_KEY as CHECKSUM_KEY
from web_index.storage.pages._checksum import PLACEHOLDER as PLACEHOLDER
from web_index.storage.pages._checksum import check_bytes as check_bytes
from web_index.storage.pages._checksum import check_footer as check_footer
from web_index.storage.pages._checksum import check_whole as check_whole
from web_index.storage.pages._checksum import pread_exact as pread_exact
from web_index.storage.pages._checksum import seal_buffer as seal_buffer
from web_index.storage.pages._checksum import seal_file as seal_file
from web_index.storage.pages._places import BodyPlace as BodyPlace
from web_index.storage.pages._places import PlaceError as PlaceError
from web_index.storage.pages._places import body_places as body_places
from web_index.storage.pages._places import page_values as page_values
from web_index.storage.pages._places import value_at as value_at
from web_index.storage.pages._reader import read_group as read_group

if TYPE_CHECKING:
    from web_index.storage.pages._checked_file import CheckedFile as CheckedFile

__all__: list[str] = []


def __getattr__(name: str) -> Any:
    if name == "CheckedFile":
        from web_index.storage.pages._checked_file import CheckedFile

        return CheckedFile
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
