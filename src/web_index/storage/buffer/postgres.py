"""A shared insert buffer on PostgreSQL, for writers on many machines.

Same semantics as :class:`~web_index.storage.buffer.SqliteBuffer`: an insert
is one committed transaction (durable and visible to every reader when it
returns), flushes claim rows with a flush id, write part files, then complete
(delete) them. Claims are one ``UPDATE ... WHERE flush_id IS NULL`` over rows
picked ``FOR UPDATE SKIP LOCKED``, so two flushers never claim the same row.

Flush locks are session-level advisory locks (``pg_advisory_lock``) on a
dedicated connection: the server releases them when the holder's connection
dies, so a killed flusher never blocks a partition, and the next flusher redoes
its claim (part names come from the flush id: a redo overwrites, never doubles).

Only parameterised SQL is used.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from web_index._dsn import mask_dsn
from web_index._retry import retrying
from web_index.errors import StoreError
from web_index.models import AttemptRows, RecordType
from web_index.storage._clock import SYSTEM_CLOCK, Clock, now_us
from web_index.storage.buffer._pg_locks import LOCK_SPACE, PgAdvisoryLocks
from web_index.storage.buffer._pg_schema import INSERT_LINE, SCHEMA, add_lines, bump, schema_in_place
from web_index.storage.buffer.base import (
    BufferedAttempt,
    BufferedKey,
    MethodPartition,
    _decode,
    _lines_of,
    attempt_lines,
    buffer_rows,
    decode_rows,
    line_key,
    metadata_row,
    prefix_range,
)

__all__ = ["PostgresBuffer"]

_F = TypeVar("_F", bound=Callable[..., Any])


class _DroppedError(StoreError):
    """The buffer's connection failed (the operation did not happen, or its outcome is unknown)."""


def _retry_once(fn: _F) -> _F:
    """Retry a read once on a fresh connection (reads are idempotent)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return retrying(lambda: fn(*args, **kwargs), tries=2, on=(_DroppedError,), gave_up=None)

    return wrapper  # type: ignore[return-value]


class PostgresBuffer:
    """The :class:`~web_index.storage.buffer.Buffer` protocol on a PostgreSQL database."""

    def __init__(
        self,
        dsn: str,
        *,
        readonly: bool = False,
        connect_timeout_s: float = 10.0,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.dsn = dsn
        self.readonly = readonly
        self.remote = True
        self.clock = clock  # the age of buffered rows (added_us) and due()
        self._connect_timeout = connect_timeout_s
        self._lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        self._schema_ready = False
        self._lock_conns: list[psycopg.Connection[Any]] = []
        self._lock_conns_lock = threading.Lock()
        conn = self._connection()
        if not readonly:
            with conn.transaction():
                # Serialise schema creation between processes starting at once.
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_SPACE,))
                # Not again once in place: its DDL locks web_index_attempts (the trigger,
                # the column), and another writer's transaction on it would deadlock
                # against this one's lock upgrade.
                if not schema_in_place(conn):
                    conn.execute(SCHEMA)
                add_lines(conn)
        self._schema_ready = True

    def __repr__(self) -> str:
        return f"PostgresBuffer({mask_dsn(self.dsn)!r})"

    def _open(self) -> psycopg.Connection[Any]:
        try:
            return psycopg.connect(self.dsn, autocommit=True, connect_timeout=int(self._connect_timeout))
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the insert buffer {mask_dsn(self.dsn)}: {exc}") from None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = self._open()
        return self._conn

    @contextmanager
    def _cursor(self, *, write: bool = False) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor in a transaction; a dropped connection is reopened on the next call."""
        if write and self.readonly:
            raise StoreError("the insert buffer is read-only in this handle")
        with self._lock:
            conn = self._connection()
            try:
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            except psycopg.OperationalError as exc:
                if conn.broken or conn.closed:
                    self._conn = None
                raise _DroppedError(f"insert buffer {mask_dsn(self.dsn)}: {exc}") from None

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with self._lock_conns_lock:
            for c in self._lock_conns:
                c.close()
            self._lock_conns = []

    # -- writing ---------------------------------------------------------------

    def append(self, attempts: Sequence[AttemptRows]) -> None:
        rows = buffer_rows(attempts, now_us(self.clock))
        lines = [
            (a.request_id, position, a.method.value, a.year, a.month, a.domain, line_key(line), line)
            for a in attempts
            for position, line in attempt_lines(a.responses)
        ]
        # Sorted by partition, so that concurrent multi-partition inserts lock the
        # totals rows in one order (no deadlock).
        rows.sort(key=lambda r: (r[0], r[1], r[2], r[3]))
        # Not retried: a lost connection during COMMIT leaves the outcome unknown,
        # and the caller was not told the insert is durable.
        try:
            with self._cursor(write=True) as cur:
                cur.executemany(
                    "INSERT INTO web_index_attempts (method, year, month, domain, url_key, ts_us, request_id,"
                    " calibre, success, nbytes, added_us, metadata, responses, lined)"
                    " VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,true)",
                    rows,
                )
                if lines:
                    cur.executemany(INSERT_LINE, lines)
        except psycopg.errors.UniqueViolation:
            # As the SQLite buffer says it: a request id is one attempt, stored once.
            raise StoreError(
                f"the insert buffer {mask_dsn(self.dsn)} could not be written:"
                " an attempt with one of these request ids is buffered already"
            ) from None

    def oversized(
        self, parts: Iterable[MethodPartition], max_rows: int, max_bytes: int
    ) -> list[MethodPartition]:
        wanted = list(parts)
        if not wanted:
            return []
        # One round trip for every partition an insert touched.
        with self._cursor() as cur:
            cur.execute(
                "SELECT t.method, t.year, t.month, t.domain FROM web_index_totals t"
                " JOIN unnest(%s::text[], %s::smallint[], %s::smallint[], %s::text[])"
                " AS p(method, year, month, domain)"
                " ON t.method = p.method AND t.year = p.year AND t.month = p.month AND t.domain = p.domain"
                " WHERE t.rows >= %s OR t.nbytes >= %s",
                (
                    [mp.method.value for mp in wanted],
                    [mp.year for mp in wanted],
                    [mp.month for mp in wanted],
                    [mp.domain for mp in wanted],
                    max_rows,
                    max_bytes,
                ),
            )
            return [MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall()]

    @_retry_once
    def due(self, max_rows: int, max_bytes: int, max_age_s: float) -> list[MethodPartition]:
        oldest = now_us(self.clock) - int(max_age_s * 1_000_000)
        with self._cursor() as cur:
            cur.execute(
                "SELECT method, year, month, domain FROM web_index_attempts WHERE flush_id IS NULL"
                " GROUP BY method, year, month, domain"
                " HAVING COUNT(*) >= %s OR SUM(nbytes) >= %s OR MIN(added_us) <= %s",
                (max_rows, max_bytes, oldest),
            )
            return [MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall()]

    @_retry_once
    def partitions(self) -> list[MethodPartition]:
        with self._cursor() as cur:
            cur.execute("SELECT DISTINCT method, year, month, domain FROM web_index_attempts")
            return [MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall()]

    def claims(self, part: MethodPartition) -> list[str]:
        with self._cursor(write=True) as cur:
            cur.execute(
                "SELECT DISTINCT flush_id FROM web_index_attempts WHERE method=%s AND year=%s AND month=%s"
                " AND domain=%s AND flush_id IS NOT NULL",
                (part.method.value, part.year, part.month, part.domain),
            )
            return [row[0] for row in cur.fetchall()]

    def claim(self, part: MethodPartition, flush_id: str, limit: int) -> int:
        with self._cursor(write=True) as cur:
            # The rows are picked once (a MATERIALIZED CTE): as a subquery of the
            # UPDATE, the planner may rescan it, and each rescan skips the rows
            # this statement has just locked and takes the next ones: a claim of
            # 4 took all 10 rows of a partition.
            cur.execute(
                "WITH picked AS MATERIALIZED (SELECT seq FROM web_index_attempts"
                " WHERE method=%s AND year=%s AND month=%s AND domain=%s AND flush_id IS NULL"
                " ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED)"
                " UPDATE web_index_attempts SET flush_id=%s WHERE seq IN (SELECT seq FROM picked)"
                " AND flush_id IS NULL",
                (part.method.value, part.year, part.month, part.domain, limit, flush_id),
            )
            return cur.rowcount

    def claimed(self, flush_id: str) -> Iterator[BufferedAttempt]:
        with self._cursor(write=True) as cur:
            cur.execute(
                "SELECT request_id, metadata, responses FROM web_index_attempts"
                " WHERE flush_id=%s ORDER BY seq",
                (flush_id,),
            )
            rows = cur.fetchall()
        for rid, meta, resp in rows:
            yield BufferedAttempt(rid, *decode_rows(meta, resp))

    def complete(self, flush_id: str) -> None:
        with self._cursor(write=True) as cur:
            cur.execute(
                "DELETE FROM web_index_attempts WHERE flush_id=%s RETURNING method, year, month", (flush_id,)
            )
            months = {(m, y, mo) for m, y, mo in cur.fetchall()}
            for m, y, mo in months:
                bump(cur, m, y, mo)

    # -- reading ---------------------------------------------------------------

    @_retry_once
    def lookup(self, method: RecordType, url_keys: Iterable[str]) -> list[BufferedKey]:
        keys = list(url_keys)
        if not keys:
            return []
        with self._cursor() as cur:
            cur.execute(
                "SELECT url_key, ts_us, request_id, calibre, success FROM web_index_attempts"
                " WHERE method=%s AND url_key = ANY(%s)",
                (method.value, keys),
            )
            return [BufferedKey(k, t, r, c, bool(s)) for k, t, r, c, s in cur.fetchall()]

    @_retry_once
    def load(self, request_ids: Iterable[str]) -> dict[str, BufferedAttempt]:
        ids = list(request_ids)
        if not ids:
            return {}
        with self._cursor() as cur:
            cur.execute(
                "SELECT request_id, metadata, responses FROM web_index_attempts WHERE request_id = ANY(%s)",
                (ids,),
            )
            rows = cur.fetchall()
        return {rid: BufferedAttempt(rid, *decode_rows(m, r)) for rid, m, r in rows}

    def iter_all(self) -> Iterator[tuple[MethodPartition, str | None, BufferedAttempt]]:
        with self._cursor() as cur:
            cur.execute(
                "SELECT method, year, month, domain, flush_id, request_id, metadata, responses"
                " FROM web_index_attempts ORDER BY seq"
            )
            rows = cur.fetchall()
        for m, y, mo, d, fid, rid, meta, resp in rows:
            part = MethodPartition(RecordType(m), y, mo, d)
            yield part, fid, BufferedAttempt(rid, *decode_rows(meta, resp))

    def iter_metadata(self) -> Iterator[tuple[MethodPartition, str | None, dict[str, Any]]]:
        with self._cursor() as cur:
            cur.execute(
                "SELECT method, year, month, domain, flush_id, metadata FROM web_index_attempts ORDER BY seq"
            )
            rows = cur.fetchall()
        for m, y, mo, d, fid, meta in rows:
            yield MethodPartition(RecordType(m), y, mo, d), fid, metadata_row(meta, whole=False)

    @_retry_once
    def domain_attempts(
        self, method: RecordType, domain: str
    ) -> list[tuple[MethodPartition, BufferedAttempt]]:
        with self._cursor() as cur:
            cur.execute(
                "SELECT year, month, request_id, metadata, responses FROM web_index_attempts"
                " WHERE method=%s AND domain=%s ORDER BY seq",
                (method.value, domain),
            )
            rows = cur.fetchall()
        return [
            (MethodPartition(method, y, mo, domain), BufferedAttempt(rid, *decode_rows(meta, resp)))
            for y, mo, rid, meta, resp in rows
        ]

    @_retry_once
    def capture_lines(
        self, method: RecordType, domain: str, prefixes: Sequence[bytes]
    ) -> dict[tuple[int, int], list[bytes]]:
        out: dict[tuple[int, int], list[bytes]] = {}
        if not prefixes:
            return out
        ranges = [prefix_range(p) for p in prefixes]
        where = " OR ".join("(key >= %s AND key < %s)" if hi is not None else "key >= %s" for _, hi in ranges)
        values: list[object] = [v for lo, hi in ranges for v in ((lo,) if hi is None else (lo, hi))]
        try:
            found, unlined = self._lines(method, domain, where, values)
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
            # A buffer no writer of this version has opened yet (a reader opens none):
            # every attempt's lines made on the spot.
            found, unlined = (
                [],
                [(mp.year, mp.month, a.responses) for mp, a in self.domain_attempts(method, domain)],
            )
        for year, month, line in found:
            out.setdefault((year, month), []).append(bytes(line))
        wanted = tuple(prefixes)
        for year, month, responses in unlined:
            rows = _decode(responses) if isinstance(responses, bytes) else responses
            made = [line for _, line in _lines_of(rows) if line.startswith(wanted)]
            if made:
                out.setdefault((year, month), []).extend(made)
        return out

    def _lines(
        self, method: RecordType, domain: str, where: str, values: list[object]
    ) -> tuple[list[tuple[int, int, bytes]], list[tuple[int, int, Any]]]:
        with self._cursor() as cur:
            cur.execute(
                f"SELECT year, month, line FROM web_index_lines WHERE method=%s AND domain=%s AND ({where})",  # noqa: S608 - only %s marks
                (method.value, domain, *values),
            )
            found = cur.fetchall()
            cur.execute(
                "SELECT year, month, responses FROM web_index_attempts"
                " WHERE method=%s AND domain=%s AND NOT lined",
                (method.value, domain),
            )
            unlined = cur.fetchall()
        return found, unlined

    @_retry_once
    def counts(self) -> dict[MethodPartition, tuple[int, int, int]]:
        with self._cursor() as cur:
            cur.execute(
                "SELECT method, year, month, domain, COUNT(*), SUM(success::int), SUM(nbytes)"
                " FROM web_index_attempts GROUP BY method, year, month, domain"
            )
            rows = cur.fetchall()
        return {
            MethodPartition(RecordType(m), y, mo, d): (int(n), int(s), int(b))
            for m, y, mo, d, n, s, b in rows
        }

    @_retry_once
    def generation(self, method: RecordType, year: int, month: int) -> int:
        """Bumped by every completed flush of that month (``0, 0``: a month's first flush)."""
        with self._cursor() as cur:
            cur.execute(
                "SELECT gen FROM web_index_generations WHERE method=%s AND year=%s AND month=%s",
                (method.value, year, month),
            )
            row = cur.fetchone()
            return int(row[0]) if row else 0

    # -- locks -----------------------------------------------------------------

    def locks(self) -> PgAdvisoryLocks:
        return PgAdvisoryLocks(self)

    def _lock_conn(self) -> psycopg.Connection[Any]:
        with self._lock_conns_lock:
            while self._lock_conns:
                conn = self._lock_conns.pop()
                if not (conn.closed or conn.broken):
                    return conn
        return self._open()

    def _return_lock_conn(self, conn: psycopg.Connection[Any]) -> None:
        if conn.closed or conn.broken:
            return
        with self._lock_conns_lock:
            self._lock_conns.append(conn)
