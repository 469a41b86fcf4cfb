"""The month index's file: its columns, footer keys and covers list, and the one
writer and reader of them.

Kept apart from opening and building (``_month``, ``_month_build``)
so that what a build writes and what an open accepts are one definition: a
change here is a change of format, and then ``VERSION`` changes too.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import zlib
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._layout import INDEX_DIR
from web_index.storage.backends import Backend, LocalBackend
from web_index.storage.indexes._month_keys import encode_keys, keys_path

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = [
    "COVERS_KEY",
    "INDEX_ROW_GROUP",
    "LOOKUP_COLUMNS",
    "SCHEMA",
    "STAMP_KEY",
    "TALLY_COLUMNS",
    "VERSION",
    "VERSION_KEY",
    "Covered",
    "covers_from",
    "decode_covers",
    "encode_covers",
    "folder_stamp",
    "index_path",
    "key_hash",
    "read_covers",
    "rid_text",
    "row_group_ranges",
    "schema",
    "wants_keys",
    "write_index",
]

INDEX_ROW_GROUP = 4096
COVERS_KEY = b"web_index.index.covers"
VERSION_KEY = b"web_index.index.version"
# 4: covers carry each file's version. Format 3 trusted name and size, and a
# compaction can keep both while adding a record: such an index is never used.
# 5: the index file carries a checksum (older ones are rebuilt to gain one).
# 6: each covered file's row count, and each record's state and fetcher (metadata
# types): ``stats`` and the UI's overview count from the index, not from footers.
VERSION = b"6"
# The month folder's version (Backend.folder_version) when the index listed it,
# if it had one; absent on object stores and for a folder changed just before.
STAMP_KEY = b"web_index.index.listed"


def folder_stamp(version: object | None) -> str | None:
    """A folder's version (``Backend.folder_version``) as the footer keeps it."""
    return None if version is None else repr(version)


@functools.cache
def schema() -> pa.Schema:
    """The index file's columns (``SCHEMA``, built and pyarrow imported on first use:
    looking a capture up reads no month index)."""
    import pyarrow as pa

    fields: list[pa.Field[Any]] = [
        pa.field("key_hash", pa.binary(16), nullable=False),
        pa.field("ts_us", pa.int64(), nullable=False),
        pa.field("request_id", pa.binary(16), nullable=False),
        pa.field("calibre", pa.uint8(), nullable=False),
        pa.field("file_no", pa.uint32(), nullable=False),
        pa.field("row", pa.uint32(), nullable=False),
        pa.field("rows", pa.uint32(), nullable=False),
        # Metadata types only (null in the others): what an overview counts.
        pa.field("state", pa.string()),
        pa.field("fetcher", pa.string()),
    ]
    return pa.schema(fields)


if TYPE_CHECKING:
    SCHEMA: pa.Schema


def __getattr__(name: str) -> Any:
    if name == "SCHEMA":
        return schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# schema()'s first 7 columns
LOOKUP_COLUMNS = ["key_hash", "ts_us", "request_id", "calibre", "file_no", "row", "rows"]
TALLY_COLUMNS = ["file_no", "state", "calibre", "fetcher"]


def key_hash(url_key: str) -> bytes:
    """The index's key for a URL key: 16 bytes of BLAKE2b."""
    return hashlib.blake2b(url_key.encode(), digest_size=16).digest()


def rid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def index_path(type: RecordType, year: int, month: int) -> str:
    return f"{INDEX_DIR}/{type.value}/{year:04d}/{month:02d}.parquet"


class Covered(NamedTuple):  # a tuple: a month index covers tens of thousands of files
    name: str  # file name in the month folder
    size: int
    domain: str
    version: str  # Backend.FileInfo.version when the index was built
    rows: int  # rows of its visible records; -1 if a compacted file supersedes it


# The covers list is JSON ``[[name, size, domain, version, rows], ...]``: msgspec reads it
# straight into Covered tuples (the stdlib's json took 20 ms a month of 10,000 files).
decode_covers = msgspec.json.Decoder(list[Covered]).decode
encode_covers = msgspec.json.Encoder().encode


def row_group_ranges(meta: pq.FileMetaData) -> tuple[list[tuple[bytes, bytes]], list[int]]:
    """Each row group's ``key_hash`` range (all keys when its statistics say none), and
    each one's first row, the row count last: what a lookup by row group prunes with."""
    groups: list[tuple[bytes, bytes]] = []
    starts: list[int] = []
    start = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        stats = rg.column(0).statistics
        lo, hi = (stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None)
        groups.append((lo, hi) if isinstance(lo, bytes) and isinstance(hi, bytes) else (b"", b"\xff" * 17))
        starts.append(start)
        start += rg.num_rows
    starts.append(start)
    return groups, starts


def read_covers(handle: pq.ParquetFile) -> list[Covered]:
    meta = handle.metadata.metadata or {}
    if meta.get(VERSION_KEY) != VERSION or COVERS_KEY not in meta:
        raise CorruptFileError("index", "not a month index of this version")
    return covers_from(meta[COVERS_KEY])


def covers_from(blob: bytes | str) -> list[Covered]:
    """A covers list as a footer (or a keys file's header) holds it: zlib and base64."""
    try:
        return decode_covers(zlib.decompress(base64.b64decode(blob)))
    except (ValueError, TypeError, zlib.error, msgspec.DecodeError) as exc:
        raise CorruptFileError("index", f"unreadable covers list: {exc}") from None


def wants_keys(backend: Backend) -> bool:
    """Whether the month indexes of ``backend`` get keys files: those of a local store (a
    file mapped in place); an object store's would be read whole, as its Parquet index is."""
    return isinstance(backend, LocalBackend)


def write_index(
    backend: Backend,
    type: RecordType,
    year: int,
    month: int,
    table: pa.Table,
    covers: list[Covered],
    stamp: str | None,
) -> None:
    """Write ``table`` (rows sorted by ``key_hash``) as the month's index, with its covers list and stamp."""
    meta = {
        VERSION_KEY: VERSION,
        # One entry per file of the month (tens of thousands): compressed.
        COVERS_KEY: base64.b64encode(zlib.compress(encode_covers(covers))),
    }
    if stamp is not None:
        meta[STAMP_KEY] = stamp.encode()
    table = table.cast(schema())
    path = index_path(type, year, month)
    backend.write_parquet(
        path,
        table.replace_schema_metadata(meta),
        # LZ4, not zstd: a batch of thousands of queries reads whole indexes,
        # and LZ4 decodes them in half the time for ~1.15x the bytes (hashes
        # and request ids are random: neither codec shrinks them much).
        compression="lz4",
        row_group_size=INDEX_ROW_GROUP,
        write_statistics=["key_hash"],
        use_dictionary=["calibre", "state", "fetcher"],  # a handful of values each
        store_schema=False,
    )
    if wants_keys(backend):
        # After the Parquet index, naming it: a crash between the two leaves a keys file that
        # names another version of it, which is not used.
        info = backend.file_info(path)
        covered = meta[COVERS_KEY].decode()
        data = encode_keys(table, (info.size, info.version), covered, stamp)
        backend.write_bytes(keys_path(type, year, month), data)
