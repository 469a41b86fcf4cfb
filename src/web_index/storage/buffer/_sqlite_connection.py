"""The SQLite buffer's database, as a handle holds it: opened writable (created,
or converted from an older layout, in turn with the other writers) or read-only
(the file read as immutable where its -shm cannot be made, left out where it
cannot be read at all), closed, and written in transactions taken in turn, with
the checkpoints the WAL they write asks for. The base of
:class:`~web_index.storage.buffer.SqliteBuffer` (``sqlite.py``)."""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from web_index.errors import StoreError
from web_index.models import RecordType
from web_index.storage._clock import SYSTEM_CLOCK, Clock
from web_index.storage.buffer._sqlite import (
    _CACHE_KIB,
    _CHECKPOINT_BYTES,
    _LAYOUT,
    _PAGE_SIZE,
    _RECLAIM_BYTES,
    _Checkpointer,
    _create,
    _disk_note,
    _in_turn,
    _open_lock_file,
)
from web_index.storage.buffer.base import _warn_once

# Layouts a reader reads as they are (a writer converts to _LAYOUT): layout 2
# lacks only the capture lines, which a reader then makes from the rows.
_READABLE = (2, _LAYOUT)


class _SqliteConnection:
    """The database of a store's buffer as one handle holds it: the base of ``SqliteBuffer``."""

    def __init__(
        self, folder: Path, *, durable: bool = True, readonly: bool = False, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.path = folder / "buffer.sqlite3"
        self.readonly = readonly
        self.remote = False
        self.clock = clock  # the age of buffered rows (added_us) and due()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._durable = durable
        self._lock_fd = -1  # of buffer.lock, for writers
        self._unchecked = 0  # bytes written to the WAL since this writer last asked for a checkpoint
        self._checkpointer: _Checkpointer | None = None
        self._after_append: dict[tuple[RecordType, int, int, str], tuple[int, int]] = {}
        # Domains with nothing buffered, while no connection has committed since (see domain_attempts).
        self._unbuffered: set[tuple[str, str]] = set()
        self._unbuffered_as_of: tuple[object, ...] = ()
        self._transactions = 0  # this handle's: PRAGMA data_version counts the other connections' commits
        self._layout = _LAYOUT  # a reader's may be layout 2 (no capture lines kept: made on the spot)
        if not readonly:
            try:
                self._connect()
            except BaseException:
                self.close()  # and its lock file: nothing else would close it
                raise

    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        try:
            return self._connect_readonly() if self.readonly else self._connect_writable()
        except sqlite3.Error as exc:  # not a database, unreadable, locked for a minute
            raise StoreError(
                f"the insert buffer {self.path} could not be opened: {exc}{_disk_note(self.path)}"
            ) from exc

    def _connect_writable(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._lock_fd < 0:
                self._lock_fd = _open_lock_file(self.path)
        except OSError as exc:  # a read-only mount, no permission, a full disk
            raise StoreError(
                f"the insert buffer {self.path.parent} cannot be written ({exc.strerror or exc});"
                " to read the store only, open it read-only"
            ) from None
        # Set up in turn with the other writers: two processes turning a new
        # database to WAL at once deadlock inside SQLite, which then fails one of
        # them at once ("database is locked"), whatever the busy timeout.
        with _in_turn(self._lock_fd):
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=60, isolation_level=None)
            try:
                conn.execute("PRAGMA busy_timeout=60000")
                conn.execute(f"PRAGMA page_size={_PAGE_SIZE}")
                conn.execute("PRAGMA journal_mode=WAL")
                # FULL: the WAL is fsync'd at every commit, so an acknowledged insert
                # survives power loss too, not only a killed process.
                conn.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
                conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
                conn.execute("PRAGMA wal_autocheckpoint=0")  # see _CHECKPOINT_BYTES
                # A WAL that once took a big batch is cut back when it starts over.
                conn.execute(f"PRAGMA journal_size_limit={_RECLAIM_BYTES}")
                if conn.execute("PRAGMA user_version").fetchone()[0] != _LAYOUT:
                    _create(conn)
            except BaseException:
                conn.close()
                raise
        self._conn = conn
        return conn

    def _connect_readonly(self) -> sqlite3.Connection | None:
        """A read-only connection, or ``None`` while there is no buffer (nothing
        buffered) or it cannot be read here (said once, on stderr)."""
        if not self.path.exists():
            return None
        try:
            conn = self._open_readonly("mode=ro")
        except sqlite3.OperationalError as exc:
            # A reader of a WAL database needs its -shm file, and creates it if it
            # is missing, which it cannot on read-only media or without write
            # permission. No -wal file means every row is in the database file:
            # read it as immutable. Not kept: a writer may start a WAL after us.
            wal = self.path.with_name(self.path.name + "-wal")
            try:
                if wal.exists() and wal.stat().st_size > 0:
                    raise
                immutable = self._open_readonly("mode=ro&immutable=1")
            except sqlite3.OperationalError:
                _warn_once(
                    f"the insert buffer {self.path} cannot be read here ({exc}): answers leave out"
                    " inserts not yet flushed to Parquet"
                )
                return None
            layout = immutable.execute("PRAGMA user_version").fetchone()[0]
            if layout in _READABLE:
                self._layout = layout
                return immutable
            return None
        layout = conn.execute("PRAGMA user_version").fetchone()[0]
        if layout in _READABLE:
            self._layout = layout
            self._conn = conn
            return conn
        # Not created yet, or an older layout that a writable open converts:
        # readable here only if it holds nothing. Look again next time.
        try:
            old = conn.execute("SELECT 1 FROM attempts LIMIT 1").fetchone()
        except sqlite3.OperationalError:  # no such table: a buffer being created
            old = None
        finally:
            conn.close()
        if old is not None:
            raise StoreError(
                f"the insert buffer {self.path} is in an older layout:"
                " open the store writable once to convert it"
            )
        return None

    def _open_readonly(self, mode: str) -> sqlite3.Connection:
        conn = sqlite3.connect(f"{self.path.as_uri()}?{mode}", uri=True, check_same_thread=False, timeout=60)
        try:
            conn.execute("PRAGMA busy_timeout=60000")
            conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            conn.execute("PRAGMA user_version").fetchone()  # opens the files: fails here if it cannot
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        with self._lock:
            if self._checkpointer is not None:
                self._checkpointer.close()
                self._checkpointer = None
            if self._conn is not None:
                self._conn.close()  # the last connection checkpoints what is left
                self._conn = None
                self._unbuffered_as_of = ()
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    @property
    def _write(self) -> sqlite3.Connection:
        conn = self._connect()
        if conn is None or self.readonly:
            raise StoreError("the insert buffer is read-only in this handle")
        return conn

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, in turn with every other writer: committed, or
        rolled back on any error. Call with ``self._lock`` held."""
        conn = self._write
        self._transactions += 1
        with _in_turn(self._lock_fd):
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                    conn.execute("COMMIT")
                except BaseException:
                    # SQLite has rolled back by itself after some errors (a full
                    # disk): rolling back again would hide the cause under
                    # "cannot rollback - no transaction is active".
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreError(
                    f"the insert buffer {self.path} could not be written: {exc}{_disk_note(self.path)}"
                ) from exc

    def _wrote(self, nbytes: int) -> None:
        """Count about what a transaction wrote to the WAL; ask for a checkpoint
        when it is enough. Call with ``self._lock`` held, after the transaction."""
        self._unchecked += nbytes
        if self._unchecked >= _CHECKPOINT_BYTES:
            self._unchecked = 0
            ckpt = self._checkpointer
            if ckpt is None or not ckpt.alive():  # none yet, or not in this (forked) process
                ckpt = self._checkpointer = _Checkpointer(self.path, self._durable)
            ckpt.request()
