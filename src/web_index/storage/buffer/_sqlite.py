"""The SQLite buffer's file: its schema and sizes, the conversion of older
layouts, and the writers' turn (an ``flock``) with the checkpointing thread."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from web_index.models import RecordType
from web_index.storage.buffer.base import _TYPES, _decode, _encode, _khash, _lines_of, line_key, log

# Layout 3 added the capture lines of buffered responses (``buffered_lines``) and
# ``buffered.lined``; a buffer of layout 2 is converted when a writer opens it.
_LAYOUT = 3
_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS parts (
        pid    INTEGER PRIMARY KEY,
        method TEXT    NOT NULL,
        year   INTEGER NOT NULL,
        month  INTEGER NOT NULL,
        domain TEXT    NOT NULL,
        rows   INTEGER NOT NULL,  -- buffered attempts (claimed or not)
        nbytes INTEGER NOT NULL,  -- and the size of their blobs
        UNIQUE (method, year, month, domain)
    )""",
    """CREATE TABLE IF NOT EXISTS buffered (
        seq        INTEGER PRIMARY KEY,
        pid        INTEGER NOT NULL,  -- parts.pid
        khash      INTEGER NOT NULL,  -- _khash(method, url_key)
        url_key    TEXT    NOT NULL,
        ts_us      INTEGER NOT NULL,
        request_id TEXT    NOT NULL UNIQUE,
        calibre    INTEGER NOT NULL,
        success    INTEGER NOT NULL,
        nbytes     INTEGER NOT NULL,
        added_us   INTEGER NOT NULL,
        flush_id   TEXT,
        body       BLOB    NOT NULL,  -- msgpack [metadata values, [response values]]
        -- 1: its capture lines are in buffered_lines
        lined      INTEGER NOT NULL DEFAULT 0
    )""",
    # The capture line (web_index.storage.indexes._capture_lines) of each buffered
    # response, made at insert: a CDX lookup finds its key's lines through
    # buffered_lines_key, never reading a body or another URL's rows. A line is
    # a function of the row and of the line format: a change to the format
    # changes _LAYOUT, whose conversion makes them again. Keyed by the row's seq
    # (appended in order, as rows are; keyed by request id, a random key, the
    # table and an index of whole lines cost 8.7 us of CPU an attempt in SQLite,
    # this 4.3); ``key`` is the line's SURT key and time, what lookups range over
    # (a seventh of the line: the randomly keyed index stays small).
    """CREATE TABLE IF NOT EXISTS buffered_lines (
        seq        INTEGER NOT NULL,  -- buffered.seq
        position   INTEGER NOT NULL,  -- the response's place in its chain
        pid        INTEGER NOT NULL,  -- parts.pid
        key        BLOB    NOT NULL,  -- the line up to its JSON: SURT key, space, 14-digit time
        line       BLOB    NOT NULL,
        PRIMARY KEY (seq, position)
    ) WITHOUT ROWID""",
    # Bumped by every completed flush of a month, so that read caches elsewhere
    # know a listing is stale; (method, 0, 0) is bumped by a month's first flush.
    """CREATE TABLE IF NOT EXISTS generations (
        method TEXT NOT NULL, year INTEGER NOT NULL, month INTEGER NOT NULL, gen INTEGER NOT NULL,
        PRIMARY KEY (method, year, month)
    ) WITHOUT ROWID""",
]
# After the tables (and the column a layout-2 table gets by ALTER TABLE).
_INDEXES = [
    "CREATE INDEX IF NOT EXISTS buffered_key ON buffered (khash)",
    # Claims take a partition's unclaimed rows oldest first; due() reads the
    # oldest unclaimed row of each partition from this index alone.
    "CREATE INDEX IF NOT EXISTS buffered_part ON buffered (pid, flush_id, added_us)",
    "CREATE INDEX IF NOT EXISTS buffered_flush ON buffered (flush_id) WHERE flush_id IS NOT NULL",
    # Rows whose lines are not in buffered_lines (inserted by a version before
    # layout 3 since the last conversion): a lookup makes theirs on the spot.
    "CREATE INDEX IF NOT EXISTS buffered_unlined ON buffered (pid) WHERE lined = 0",
    "CREATE INDEX IF NOT EXISTS buffered_lines_key ON buffered_lines (pid, key)",
    # A CDX lookup asks for one domain's partitions, of every month.
    "CREATE INDEX IF NOT EXISTS parts_domain ON parts (domain, method)",
]
# Measured (bench ingest, 60,000 GET records with 2 KB bodies, four rounds
# alternated): 16 KiB pages take batches of 1,000 from ~16,400 to ~20,500 GET
# records/s, and hold that rate as the buffer grows (4 KiB pages fell to
# ~14,000 att/s with 200,000 attempts buffered). A row of ~2.7 KB fills a 4 KiB
# page alone; in 16 KiB pages six share one. Single inserts stayed at
# 1,700-1,900/s either way. Only a new database takes it.
_PAGE_SIZE = 16384
_CACHE_KIB = 8192
# A writer asks for a checkpoint each time it has written about this much to
# the WAL (SQLite's automatic checkpoint, off, is every 1,000 pages: 4 MiB).
_CHECKPOINT_BYTES = 4 << 20
# Free pages a flush leaves before the buffer is compacted (see SqliteBuffer._reclaim).
_RECLAIM_BYTES = 32 << 20
_CHUNK = 900
_INSERT = (
    "INSERT INTO buffered (seq, pid, khash, url_key, ts_us, request_id, calibre, success, nbytes, added_us,"
    " body, lined) VALUES (?,?,?,?,?,?,?,?,?,?,?,1)"
)
_INSERT_LINE = "INSERT INTO buffered_lines (seq, position, pid, key, line) VALUES (?,?,?,?,?)"


_PART_OF = "SELECT pid FROM parts WHERE method=? AND year=? AND month=? AND domain=?"


class _Checkpointer:
    """WAL checkpoints on a thread and connection of their own.

    A checkpoint holds the writer lock (its own file descriptor, so that it
    excludes this process's writers too): with no transaction appending
    meanwhile it can copy every frame, and the next writer starts the WAL
    over instead of growing it. It runs while the inserting thread validates
    its next batch. Passive: it never waits for readers. Requests made while
    one runs are folded into the next.
    """

    def __init__(self, path: Path, durable: bool) -> None:
        self._path = path
        self._durable = durable
        self._wake = threading.Event()
        self._stop = False
        self._pid = os.getpid()
        self._thread = threading.Thread(target=self._run, name="web-index-checkpoint", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._pid == os.getpid() and self._thread.is_alive()

    def request(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stop = True
        self._wake.set()
        if self.alive():
            self._thread.join()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        lock_fd = -1
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop:
                    return
                try:
                    if conn is None:
                        conn = sqlite3.connect(self._path, timeout=60, isolation_level=None)
                        conn.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
                    if lock_fd < 0:
                        lock_fd = _open_lock_file(self._path)
                    with _in_turn(lock_fd):
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except (sqlite3.Error, OSError) as exc:  # the next request tries again
                    log.warning("checkpoint of %s failed: %s", self._path, exc)
        finally:
            if conn is not None:
                conn.close()
            if lock_fd >= 0:
                os.close(lock_fd)


def _disk_note(database: Path) -> str:
    """Why SQLite failed, when its own words hide it: a full disk makes it say
    "disk I/O error" when it cannot map its shared-memory file."""
    try:
        st = os.statvfs(database.parent)
    except OSError:
        return ""
    return " (the disk is full)" if st.f_bavail * st.f_frsize < 64 * 1024 else ""


def _open_lock_file(database: Path) -> int:
    """The writers' lock file beside the database (see the module's docstring)."""
    return os.open(database.with_name("buffer.lock"), os.O_RDWR | os.O_CREAT, 0o644)


@contextmanager
def _in_turn(lock_fd: int) -> Iterator[None]:
    """Hold the writers' lock; released whatever fails, as a held lock would
    stop every other writer of the store."""
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(lock_fd, fcntl.LOCK_UN)


def _add_to_parts(
    conn: sqlite3.Connection, parts: dict[tuple[RecordType, int, int, str], list[int]]
) -> tuple[
    dict[tuple[RecordType, int, int, str], int], dict[tuple[RecordType, int, int, str], tuple[int, int]]
]:
    """Add rows and bytes to partitions' totals (creating them); return their ids
    and their totals after the addition."""
    pids: dict[tuple[RecordType, int, int, str], int] = {}
    after: dict[tuple[RecordType, int, int, str], tuple[int, int]] = {}
    items = list(parts.items())
    step = _CHUNK // 6
    for i in range(0, len(items), step):
        chunk = items[i : i + step]
        marks = ",".join(["(?,?,?,?,?,?)"] * len(chunk))
        cur = conn.execute(
            f"INSERT INTO parts (method, year, month, domain, rows, nbytes) VALUES {marks}"  # noqa: S608
            " ON CONFLICT DO UPDATE SET rows = rows + excluded.rows, nbytes = nbytes + excluded.nbytes"
            " RETURNING pid, method, year, month, domain, rows, nbytes",
            [v for (m, y, mo, d), (n, b) in chunk for v in (m.value, y, mo, d, n, b)],
        )
        for pid, m, y, mo, d, n, b in cur.fetchall():
            key = (_TYPES[m], y, mo, d)
            pids[key] = pid
            after[key] = (n, b)
    return pids, after


def _create(conn: sqlite3.Connection) -> None:
    """Create the current layout, converting a buffer of the older one (one transaction)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] != _LAYOUT:  # not done meanwhile
            for statement in _SCHEMA:
                conn.execute(statement)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(buffered)")}
            if "lined" not in columns:  # layout 2
                conn.execute("ALTER TABLE buffered ADD COLUMN lined INTEGER NOT NULL DEFAULT 0")
            for statement in _INDEXES:
                conn.execute(statement)
            old = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name='attempts'"
            ).fetchone()
            if old is not None:
                _convert(conn)
            _add_lines(conn)
            conn.execute(f"PRAGMA user_version={_LAYOUT}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _add_lines(conn: sqlite3.Connection) -> None:
    """Make the capture lines of the rows that have none (a buffer of layout 2, or
    rows a version before layout 3 inserted since), and drop the lines of rows such
    a version flushed (the same lines as their part files': harmless, but dead)."""
    conn.execute("DELETE FROM buffered_lines WHERE seq NOT IN (SELECT seq FROM buffered)")
    # The seqs first (a buffer may hold gigabytes of bodies), then their rows a chunk at a time.
    seqs = [
        seq for (seq,) in conn.execute("SELECT seq FROM buffered INDEXED BY buffered_unlined WHERE lined = 0")
    ]
    for start in range(0, len(seqs), _CHUNK):
        chunk = seqs[start : start + _CHUNK]
        marks = ",".join("?" * len(chunk))
        rows = conn.execute(f"SELECT seq, pid, body FROM buffered WHERE seq IN ({marks})", chunk).fetchall()  # noqa: S608
        for seq, pid, body in rows:
            _, responses = _decode(body)
            conn.execute("DELETE FROM buffered_lines WHERE seq = ?", (seq,))
            conn.executemany(
                _INSERT_LINE, [(seq, i, pid, line_key(line), line) for i, line in _lines_of(responses)]
            )
        conn.execute(f"UPDATE buffered SET lined = 1 WHERE seq IN ({marks})", chunk)  # noqa: S608


def _convert(conn: sqlite3.Connection) -> None:
    """Move the rows of layout 1 (``attempts``, ``totals``) into this layout."""
    conn.create_function("wi_khash", 2, lambda m, k: _khash(RecordType(m), k), deterministic=True)
    conn.create_function(
        "wi_body", 2, lambda meta, resp: _encode((_decode(meta), _decode(resp))), deterministic=True
    )
    conn.execute(
        "INSERT INTO buffered (seq, pid, khash, url_key, ts_us, request_id, calibre, success, nbytes,"
        " added_us, flush_id, body)"
        " SELECT a.seq, 0, wi_khash(a.method, a.url_key), a.url_key, a.ts_us, a.request_id, a.calibre,"
        " a.success, 0, a.added_us, a.flush_id, wi_body(a.metadata, a.responses)"
        " FROM attempts a ORDER BY a.seq"
    )
    conn.execute("UPDATE buffered SET nbytes = length(body)")
    conn.execute(
        "INSERT INTO parts (method, year, month, domain, rows, nbytes)"
        " SELECT method, year, month, domain, 0, 0 FROM attempts GROUP BY method, year, month, domain"
    )
    conn.execute(
        "UPDATE buffered SET pid = (SELECT p.pid FROM attempts a JOIN parts p ON p.method = a.method"
        " AND p.year = a.year AND p.month = a.month AND p.domain = a.domain WHERE a.seq = buffered.seq)"
    )
    conn.execute(
        "UPDATE parts SET rows = (SELECT COUNT(*) FROM buffered b WHERE b.pid = parts.pid),"
        " nbytes = (SELECT IFNULL(SUM(nbytes), 0) FROM buffered b WHERE b.pid = parts.pid)"
    )
    conn.execute("DROP TABLE attempts")  # with its indexes and triggers
    conn.execute("DROP TABLE IF EXISTS totals")
