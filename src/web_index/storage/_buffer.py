"""The durable insert buffer: SQLite in WAL mode inside the store.

Fetchers insert one attempt at a time; writing each as a Parquet file would
bury the store in small files. Instead an insert commits to this buffer (one
fsync'd transaction, so it survives ``kill -9`` the instant ``insert``
returns), readers in any process consult it, and flushes move whole
partitions from it into Parquet part files.

Each buffered row is one attempt: key columns for lookups, and the metadata
row and response rows (with bodies) as msgpack blobs read only for results.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import msgspec

from web_index.errors import StoreError
from web_index.ingest import Attempt
from web_index.models import RecordType

__all__ = ["Buffer", "BufferedAttempt", "BufferedKey", "MethodPartition", "SqliteBuffer", "buffer_rows"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS attempts (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    method     TEXT    NOT NULL,
    year       INTEGER NOT NULL,
    month      INTEGER NOT NULL,
    domain     TEXT    NOT NULL,
    url_key    TEXT    NOT NULL,
    ts_us      INTEGER NOT NULL,
    request_id TEXT    NOT NULL UNIQUE,
    calibre    INTEGER NOT NULL,
    success    INTEGER NOT NULL,
    nbytes     INTEGER NOT NULL,
    added_us   INTEGER NOT NULL,
    flush_id   TEXT,
    metadata   BLOB    NOT NULL,
    responses  BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS attempts_lookup
    ON attempts (method, url_key, ts_us, request_id, calibre, success);
CREATE INDEX IF NOT EXISTS attempts_partition
    ON attempts (method, year, month, domain, flush_id);
CREATE INDEX IF NOT EXISTS attempts_flush ON attempts (flush_id);
-- Running totals per partition, so that the size check after every insert
-- costs one indexed read, not a scan of the partition's rows.
CREATE TABLE IF NOT EXISTS totals (
    method TEXT NOT NULL, year INTEGER NOT NULL, month INTEGER NOT NULL, domain TEXT NOT NULL,
    rows INTEGER NOT NULL, nbytes INTEGER NOT NULL,
    PRIMARY KEY (method, year, month, domain)
) WITHOUT ROWID;
-- Bumped by every completed flush of a month, so that read caches elsewhere
-- know a listing is stale; (method, 0, 0) is bumped by a month's first flush.
CREATE TABLE IF NOT EXISTS generations (
    method TEXT NOT NULL, year INTEGER NOT NULL, month INTEGER NOT NULL, gen INTEGER NOT NULL,
    PRIMARY KEY (method, year, month)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS totals_insert AFTER INSERT ON attempts BEGIN
    INSERT INTO totals VALUES (NEW.method, NEW.year, NEW.month, NEW.domain, 1, NEW.nbytes)
    ON CONFLICT DO UPDATE SET rows = rows + 1, nbytes = nbytes + NEW.nbytes;
END;
DROP TRIGGER IF EXISTS totals_delete;
CREATE TRIGGER totals_delete AFTER DELETE ON attempts BEGIN
    UPDATE totals SET rows = rows - 1, nbytes = nbytes - OLD.nbytes
    WHERE method = OLD.method AND year = OLD.year AND month = OLD.month AND domain = OLD.domain;
    -- Keyed on the partition (primary key), not a scan of every partition's total.
    DELETE FROM totals
    WHERE method = OLD.method AND year = OLD.year AND month = OLD.month AND domain = OLD.domain
      AND rows <= 0;
END;
"""

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()
# SQLite allows 999 host parameters per statement in old builds; stay below.
_CHUNK = 900


class MethodPartition(NamedTuple):
    """A partition of both a method's data and its metadata (flushed together)."""

    method: RecordType
    year: int
    month: int
    domain: str

    def __str__(self) -> str:
        return f"{self.method.value}/{self.year:04d}/{self.month:02d}/{self.domain}"


class BufferedKey(NamedTuple):
    url_key: str
    ts_us: int
    request_id: str
    calibre: int
    success: bool


class BufferedAttempt(NamedTuple):
    request_id: str
    metadata: dict[str, Any]
    responses: list[dict[str, Any]]


def buffer_rows(attempts: Sequence[Attempt]) -> list[tuple[object, ...]]:
    """One buffer row per attempt, in the column order every buffer's ``attempts`` table uses:
    method, year, month, domain, url_key, ts_us, request_id, calibre, success, nbytes,
    added_us, metadata (msgpack), responses (msgpack)."""
    now = time.time_ns() // 1000
    rows: list[tuple[object, ...]] = []
    for a in attempts:
        meta = _encoder.encode(a.metadata)
        resp = _encoder.encode(a.responses)
        rows.append(
            (
                a.method.value,
                a.year,
                a.month,
                a.domain,
                a.url_key,
                a.ts_us,
                a.request_id,
                a.calibre,
                a.success,
                len(meta) + len(resp),
                now,
                meta,
                resp,
            )
        )
    return rows


class Buffer(Protocol):
    """What the store needs from an insert buffer (SQLite by default; Postgres for many machines).

    Rows are whole attempts. A flush *claims* rows with a flush id, writes them
    to part files and then *completes* the flush (deletes them). Readers see
    claimed rows until they are completed.
    """

    readonly: bool

    def close(self) -> None: ...
    def append(self, attempts: Sequence[Attempt]) -> None:
        """Store attempts durably in one transaction (all or none)."""
        ...

    def oversized(
        self, parts: Iterable[MethodPartition], max_rows: int, max_bytes: int
    ) -> list[MethodPartition]: ...
    def due(self, max_rows: int, max_bytes: int, max_age_s: float) -> list[MethodPartition]: ...
    def partitions(self) -> list[MethodPartition]: ...
    def claims(self, part: MethodPartition) -> list[str]: ...
    def claim(self, part: MethodPartition, flush_id: str, limit: int) -> int: ...
    def claimed(self, flush_id: str) -> Iterator[BufferedAttempt]: ...
    def complete(self, flush_id: str) -> None: ...
    def lookup(self, method: RecordType, url_keys: Iterable[str]) -> list[BufferedKey]: ...
    def load(self, request_ids: Iterable[str]) -> dict[str, BufferedAttempt]: ...
    def iter_all(self) -> Iterator[tuple[MethodPartition, str | None, BufferedAttempt]]: ...
    def counts(self) -> dict[MethodPartition, tuple[int, int, int]]: ...
    def generation(self, method: RecordType, year: int, month: int) -> int:
        """A counter bumped by every completed flush of that month (``0, 0``: of a new month)."""
        ...


class SqliteBuffer:
    """One SQLite database per store; safe for many threads and processes on one machine."""

    def __init__(self, folder: Path, *, durable: bool = True, readonly: bool = False) -> None:
        self.path = folder / "buffer.sqlite3"
        self.readonly = readonly
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._durable = durable
        if not readonly:
            self._connect()

    def _connect(self) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if self.readonly:
            if not self.path.exists():
                return None
            uri = f"{self.path.as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False, timeout=60)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=60, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            # FULL: the WAL is fsync'd at every commit, so an acknowledged insert
            # survives power loss too, not only a killed process.
            conn.execute(f"PRAGMA synchronous={'FULL' if self._durable else 'NORMAL'}")
            conn.executescript(_SCHEMA)
        conn.execute("PRAGMA busy_timeout=60000")
        self._conn = conn
        return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    @property
    def _write(self) -> sqlite3.Connection:
        conn = self._connect()
        if conn is None or self.readonly:
            raise StoreError("the insert buffer is read-only in this handle")
        return conn

    # -- writing ---------------------------------------------------------------

    def append(self, attempts: Sequence[Attempt]) -> None:
        """Store attempts durably in one transaction (all or none)."""
        rows = buffer_rows(attempts)
        with self._lock:
            conn = self._write
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO attempts (method, year, month, domain, url_key, ts_us, request_id,"
                    " calibre, success, nbytes, added_us, metadata, responses)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def oversized(
        self, parts: Iterable[MethodPartition], max_rows: int, max_bytes: int
    ) -> list[MethodPartition]:
        """Which of ``parts`` hold at least ``max_rows`` rows or ``max_bytes`` bytes."""
        out: list[MethodPartition] = []
        with self._lock:
            conn = self._write
            for part in parts:
                row = conn.execute(
                    "SELECT rows, nbytes FROM totals WHERE method=? AND year=? AND month=? AND domain=?",
                    (part.method.value, part.year, part.month, part.domain),
                ).fetchone()
                if row is not None and (row[0] >= max_rows or row[1] >= max_bytes):
                    out.append(part)
        return out

    def due(self, max_rows: int, max_bytes: int, max_age_s: float) -> list[MethodPartition]:
        """Partitions whose unflushed rows exceed a size or age threshold."""
        oldest = time.time_ns() // 1000 - int(max_age_s * 1_000_000)
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            cur = conn.execute(
                "SELECT method, year, month, domain FROM attempts WHERE flush_id IS NULL"
                " GROUP BY method, year, month, domain"
                " HAVING COUNT(*) >= ? OR SUM(nbytes) >= ? OR MIN(added_us) <= ?",
                (max_rows, max_bytes, oldest),
            )
            return [MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall()]

    def partitions(self) -> list[MethodPartition]:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            cur = conn.execute("SELECT DISTINCT method, year, month, domain FROM attempts")
            return [MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall()]

    def claims(self, part: MethodPartition) -> list[str]:
        """Flush ids holding rows of ``part`` (stale if no flusher holds the lock)."""
        with self._lock:
            cur = self._write.execute(
                "SELECT DISTINCT flush_id FROM attempts WHERE method=? AND year=? AND month=?"
                " AND domain=? AND flush_id IS NOT NULL",
                (part.method.value, part.year, part.month, part.domain),
            )
            return [row[0] for row in cur.fetchall()]

    def claim(self, part: MethodPartition, flush_id: str, limit: int) -> int:
        """Mark up to ``limit`` unclaimed rows of ``part`` as being flushed; return how many."""
        with self._lock:
            cur = self._write.execute(
                "UPDATE attempts SET flush_id=? WHERE seq IN (SELECT seq FROM attempts"
                " WHERE method=? AND year=? AND month=? AND domain=? AND flush_id IS NULL"
                " ORDER BY seq LIMIT ?)",
                (flush_id, part.method.value, part.year, part.month, part.domain, limit),
            )
            return cur.rowcount

    def claimed(self, flush_id: str) -> Iterator[BufferedAttempt]:
        with self._lock:
            cur = self._write.execute(
                "SELECT request_id, metadata, responses FROM attempts WHERE flush_id=? ORDER BY seq",
                (flush_id,),
            )
            rows = cur.fetchall()
        for rid, meta, resp in rows:
            yield BufferedAttempt(rid, _decoder.decode(meta), _decoder.decode(resp))

    def complete(self, flush_id: str) -> None:
        """Forget the rows of a flush whose part files are in place."""
        with self._lock:
            conn = self._write
            conn.execute("BEGIN IMMEDIATE")
            try:
                months = conn.execute(
                    "SELECT DISTINCT method, year, month FROM attempts WHERE flush_id=?", (flush_id,)
                ).fetchall()
                conn.execute("DELETE FROM attempts WHERE flush_id=?", (flush_id,))
                for m, y, mo in months:
                    gen = conn.execute(
                        "INSERT INTO generations VALUES (?, ?, ?, 1) ON CONFLICT DO UPDATE"
                        " SET gen = gen + 1 RETURNING gen",
                        (m, y, mo),
                    ).fetchone()
                    if gen is not None and gen[0] == 1:
                        conn.execute(
                            "INSERT INTO generations VALUES (?, 0, 0, 1)"
                            " ON CONFLICT DO UPDATE SET gen = gen + 1",
                            (m,),
                        )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    # -- reading ---------------------------------------------------------------

    def lookup(self, method: RecordType, url_keys: Iterable[str]) -> list[BufferedKey]:
        """Key columns of every buffered attempt of ``method`` for these URL keys."""
        keys = list(url_keys)
        out: list[BufferedKey] = []
        with self._lock:
            conn = self._connect()
            if conn is None:
                return out
            for i in range(0, len(keys), _CHUNK):
                chunk = keys[i : i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    "SELECT url_key, ts_us, request_id, calibre, success FROM attempts"  # noqa: S608 - only "?" marks
                    f" INDEXED BY attempts_lookup WHERE method=? AND url_key IN ({marks})",
                    (method.value, *chunk),
                )
                out.extend(BufferedKey(k, t, r, c, bool(s)) for k, t, r, c, s in cur.fetchall())
        return out

    def load(self, request_ids: Iterable[str]) -> dict[str, BufferedAttempt]:
        """Full rows (with bodies) of these attempts."""
        ids = list(request_ids)
        out: dict[str, BufferedAttempt] = {}
        with self._lock:
            conn = self._connect()
            if conn is None:
                return out
            for i in range(0, len(ids), _CHUNK):
                chunk = ids[i : i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    f"SELECT request_id, metadata, responses FROM attempts WHERE request_id IN ({marks})",  # noqa: S608
                    chunk,
                )
                for rid, meta, resp in cur.fetchall():
                    out[rid] = BufferedAttempt(rid, _decoder.decode(meta), _decoder.decode(resp))
        return out

    def iter_all(self) -> Iterator[tuple[MethodPartition, str | None, BufferedAttempt]]:
        """Every buffered attempt (for verify and stats)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return
            rows = conn.execute(
                "SELECT method, year, month, domain, flush_id, request_id, metadata, responses"
                " FROM attempts ORDER BY seq"
            ).fetchall()
        for m, y, mo, d, fid, rid, meta, resp in rows:
            part = MethodPartition(RecordType(m), y, mo, d)
            yield part, fid, BufferedAttempt(rid, _decoder.decode(meta), _decoder.decode(resp))

    def generation(self, method: RecordType, year: int, month: int) -> int:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return 0
            try:
                row = conn.execute(
                    "SELECT gen FROM generations WHERE method=? AND year=? AND month=?",
                    (method.value, year, month),
                ).fetchone()
            except sqlite3.OperationalError:  # a buffer from before generations, opened read-only
                return 0
            return int(row[0]) if row else 0

    def counts(self) -> dict[MethodPartition, tuple[int, int, int]]:
        """Per partition: (attempts, successful attempts, bytes)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return {}
            rows = conn.execute(
                "SELECT method, year, month, domain, COUNT(*), SUM(success), SUM(nbytes)"
                " FROM attempts GROUP BY method, year, month, domain"
            ).fetchall()
        return {MethodPartition(RecordType(m), y, mo, d): (n, s, b) for m, y, mo, d, n, s, b in rows}
