"""Where records live: the Parquet layout, the insert buffer, flushing, compaction.

``__all__`` is the public API; names imported ``as`` themselves are the
internal one, for the other packages of web_index (never from a private module).
``PostgresBuffer`` (the ``postgres`` extra) is imported on first use.
"""

from typing import TYPE_CHECKING

from web_index._extras import lazy_names
from web_index.storage._chunks import Chunks as Chunks
from web_index.storage._clock import SYSTEM_CLOCK as SYSTEM_CLOCK
from web_index.storage._clock import Clock
from web_index.storage._compaction import PartitionFiles as PartitionFiles
from web_index.storage._digests import find_payloads as find_payloads
from web_index.storage._files import WriteOptions
from web_index.storage._files import read_small_files as read_small_files
from web_index.storage._files import visible_files as visible_files
from web_index.storage._layout import STORE_MARKER as STORE_MARKER
from web_index.storage._layout import Partition
from web_index.storage._layout import StoredFile as StoredFile
from web_index.storage._load import method_partition as method_partition
from web_index.storage._memory import gc_paused as gc_paused
from web_index.storage._memory import release_freed_memory as release_freed_memory
from web_index.storage._open import open_store as open_store
from web_index.storage._scan import ScanFilter as ScanFilter
from web_index.storage._scan import scan as scan
from web_index.storage._schema import BODY_COLUMN as BODY_COLUMN
from web_index.storage._schema import KEY_COLUMNS as KEY_COLUMNS
from web_index.storage._schema import REF_COLUMN as REF_COLUMN
from web_index.storage._schema import TS_COLUMN as TS_COLUMN
from web_index.storage._staging import Piece as Piece
from web_index.storage._stats import AttemptCount as AttemptCount
from web_index.storage._stats import attempt_counts as attempt_counts
from web_index.storage._stats import stats as stats
from web_index.storage._store import FlushPolicy, Store
from web_index.storage._verify import verify as verify
from web_index.storage._workers import DEATH_CAUSES as DEATH_CAUSES
from web_index.storage._workers import worker_processes as worker_processes
from web_index.storage.backends import Backend, CacheConfig, LocalBackend, open_backend
from web_index.storage.backends import CachingBackend as CachingBackend
from web_index.storage.buffer import Buffer, MethodPartition
from web_index.storage.indexes import CaptureFields as CaptureFields
from web_index.storage.indexes import IndexHit as IndexHit
from web_index.storage.indexes import MonthIndex as MonthIndex
from web_index.storage.indexes import StoredCapture as StoredCapture
from web_index.storage.indexes import capture_mime as capture_mime
from web_index.storage.indexes import capture_response as capture_response
from web_index.storage.indexes import find_capture_lines as find_capture_lines
from web_index.storage.indexes import key_hash as key_hash
from web_index.storage.indexes import open_month_index as open_month_index
from web_index.storage.indexes import parse_capture_line as parse_capture_line
from web_index.storage.indexes import rid_text as rid_text
from web_index.storage.indexes import stored_response as stored_response
from web_index.storage.pages import append_parquet as append_parquet
from web_index.storage.pages import read_group as read_group
from web_index.storage.payloads import resolve_rows as resolve_rows

if TYPE_CHECKING:
    from web_index.storage.buffer import PostgresBuffer

__all__ = [
    "Backend",
    "Buffer",
    "CacheConfig",
    "Clock",
    "FlushPolicy",
    "LocalBackend",
    "MethodPartition",
    "Partition",
    "PostgresBuffer",
    "Store",
    "WriteOptions",
    "open_backend",
]

__getattr__ = lazy_names(__name__, {"PostgresBuffer": ("web_index.storage.buffer.postgres", "postgres")})
