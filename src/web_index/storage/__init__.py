"""Where records live: the Parquet layout, the insert buffer, flushing, compaction."""

from web_index.storage._backend import Backend, LocalBackend, open_backend
from web_index.storage._buffer import Buffer, MethodPartition
from web_index.storage._cache import CacheConfig
from web_index.storage._clock import Clock
from web_index.storage._files import WriteOptions
from web_index.storage._layout import Partition
from web_index.storage._pgbuffer import PostgresBuffer
from web_index.storage._store import FlushPolicy, Store

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
