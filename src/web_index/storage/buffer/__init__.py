"""The insert buffer, one contract (:class:`Buffer`, ``base.py``) kept by two
implementations: SQLite inside the store (``sqlite.py``) and a shared
PostgreSQL database (``postgres.py``, the ``postgres`` extra: imported on
first use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from web_index._dsn import check_dsn
from web_index._extras import import_extra, lazy_names
from web_index.storage._clock import SYSTEM_CLOCK, Clock
from web_index.storage._layout import BUFFER_DIR
from web_index.storage._marker import unwritable
from web_index.storage.backends import Backend
from web_index.storage.buffer.base import (
    Buffer,
    BufferedAttempt,
    BufferedKey,
    MethodPartition,
    buffer_rows,
    decode_rows,
)
from web_index.storage.buffer.sqlite import SqliteBuffer

if TYPE_CHECKING:
    from web_index.storage.buffer.postgres import PostgresBuffer

__all__ = [
    "Buffer",
    "BufferedAttempt",
    "BufferedKey",
    "MethodPartition",
    "PostgresBuffer",
    "SqliteBuffer",
    "buffer_rows",
    "decode_rows",
    "open_buffer",
]


def open_buffer(
    spec: str | Buffer | None,
    backend: Backend,
    *,
    readonly: bool = False,
    durable: bool = True,
    clock: Clock = SYSTEM_CLOCK,
) -> Buffer:
    """The buffer a store's inserts go through: ``spec`` itself if it is a
    :class:`Buffer`; a PostgreSQL one for a ``postgresql://`` URL or libpq
    ``key=value`` string (anything else is refused without echoing a
    password); else SQLite in the store's private folder."""
    if isinstance(spec, str):
        check_dsn(spec)
        postgres = import_extra("web_index.storage.buffer.postgres", "postgres")
        return postgres.PostgresBuffer(spec, readonly=readonly, clock=clock)  # type: ignore[no-any-return]
    if spec is not None:
        return spec
    try:
        folder = backend.local_folder(BUFFER_DIR, create=not readonly)
    except OSError as exc:
        raise unwritable(backend, exc) from None
    return SqliteBuffer(folder, durable=durable, readonly=readonly, clock=clock)


__getattr__ = lazy_names(__name__, {"PostgresBuffer": ("web_index.storage.buffer.postgres", "postgres")})
