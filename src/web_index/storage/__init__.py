"""Where records live: the Parquet layout, the insert buffer, flushing, compaction."""

from web_index.storage._backend import Backend, LocalBackend, open_backend
from web_index.storage._buffer import MethodPartition
from web_index.storage._files import WriteOptions
from web_index.storage._layout import Partition
from web_index.storage._store import FlushPolicy, Store

__all__ = [
    "Backend",
    "FlushPolicy",
    "LocalBackend",
    "MethodPartition",
    "Partition",
    "Store",
    "WriteOptions",
    "open_backend",
]
