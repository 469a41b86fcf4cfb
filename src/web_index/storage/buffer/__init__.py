"""The insert buffer, one contract (:class:`Buffer`, ``base.py``) kept by two
implementations: SQLite inside the store (``sqlite.py``) and a shared
PostgreSQL database (``postgres.py``)."""

from web_index.storage.buffer.base import (
    Buffer,
    BufferedAttempt,
    BufferedKey,
    MethodPartition,
    buffer_rows,
    decode_rows,
)
from web_index.storage.buffer.postgres import PostgresBuffer
from web_index.storage.buffer.sqlite import SqliteBuffer

__all__ = [
    "Buffer",
    "BufferedAttempt",
    "BufferedKey",
    "MethodPartition",
    "PostgresBuffer",
    "SqliteBuffer",
    "buffer_rows",
    "decode_rows",
]
