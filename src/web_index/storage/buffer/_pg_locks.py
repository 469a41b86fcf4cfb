"""The flush locks of a PostgreSQL buffer: session-level advisory locks, each on
a dedicated connection, so the server releases them when the holder dies."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING

import psycopg

from web_index.errors import StoreError

if TYPE_CHECKING:
    from web_index.storage.buffer.postgres import PostgresBuffer

__all__ = ["LOCK_SPACE", "PgAdvisoryLocks"]

# One lock-id namespace for web-index advisory locks (first 4 bytes of a hash).
LOCK_SPACE = int.from_bytes(hashlib.sha256(b"web-index").digest()[:4], "big", signed=True)


def _lock_key(kind: str, name: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(f"{kind} {name}".encode(), digest_size=4).digest(), "big", signed=True
    )


class PgAdvisoryLocks:
    """Session-level advisory locks: released by the server when the holder's connection dies."""

    def __init__(self, buffer: PostgresBuffer) -> None:
        self.buffer = buffer

    def hold(self, kind: str, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]:
        return self._hold(kind, name, blocking)

    @contextmanager
    def _hold(self, kind: str, name: str, blocking: bool) -> Iterator[bool]:
        conn = self.buffer._lock_conn()
        key = _lock_key(kind, name)
        try:
            if blocking:
                conn.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_SPACE, key))
            else:
                row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", (LOCK_SPACE, key)).fetchone()
                if not (row and row[0]):
                    self.buffer._return_lock_conn(conn)
                    yield False
                    return
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"cannot take the {kind} lock of {name}: {exc}") from None
        try:
            yield True
        finally:
            try:
                conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_SPACE, key))
                self.buffer._return_lock_conn(conn)
            except psycopg.Error:
                conn.close()  # the server releases the lock with the session
