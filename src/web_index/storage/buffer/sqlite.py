"""The durable insert buffer: SQLite in WAL mode inside the store.

(Over 400 lines: one class, :class:`SqliteBuffer`, the Buffer contract on
SQLite; its schema, sizes and the writers' turn live in ``_sqlite.py``.)

Fetchers insert one attempt at a time; writing each as a Parquet file would
bury the store in small files. Instead an insert commits to this buffer (one
fsync'd transaction, so it survives ``kill -9`` the instant ``insert``
returns), readers in any process consult it, and flushes move whole
partitions from it into Parquet part files.

Each buffered row is one attempt: the few key columns readers and flushes
select by, and one msgpack blob (the metadata row and the response rows, with
bodies, as values in a fixed column order) read only for results. The indexes
are narrow, because every insert pays for each of them: a 32-bit hash of the
URL key for lookups (the key itself is checked on the rows found), and the
partition as a small integer (``parts``, which also keeps each partition's
running totals). An insert of
many attempts updates each partition's totals once, not once per row. Each
response's capture line (what a CDX query answers with) is made at insert
into ``buffered_lines``, indexed by partition, SURT key and time, so that a
lookup reads its key range, never the domain's bodies (issue 38).

Writers take turns through an ``flock`` on ``buffer.lock`` (the kernel wakes
the next one the moment the lock is free, where SQLite's busy handler would
poll with growing sleeps). The WAL is checkpointed by a thread of the writer's
own: copying pages into the database and the fsyncs run without the GIL, beside
the next inserts, not inside COMMIT with every other writer waiting.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from web_index.errors import StoreError
from web_index.models import AttemptRows, RecordType
from web_index.storage._clock import SYSTEM_CLOCK, Clock, now_us
from web_index.storage.buffer._sqlite import (
    _CACHE_KIB,
    _CHECKPOINT_BYTES,
    _CHUNK,
    _INSERT,
    _INSERT_LINE,
    _LAYOUT,
    _PAGE_SIZE,
    _PART_OF,
    _RECLAIM_BYTES,
    _add_to_parts,
    _Checkpointer,
    _create,
    _disk_note,
    _in_turn,
    _open_lock_file,
)
from web_index.storage.buffer.base import (
    _SEEDS,
    BufferedAttempt,
    BufferedKey,
    MethodPartition,
    _attempt,
    _decode,
    _encode,
    _khash,
    _lines_of,
    _warn_once,
    attempt_lines,
    line_key,
    log,
    metadata_row,
    prefix_range,
)

__all__ = ["SqliteBuffer"]

# Layouts a reader reads as they are (a writer converts to _LAYOUT): layout 2
# lacks only the capture lines, which a reader then makes from the rows.
_READABLE = (2, _LAYOUT)


class SqliteBuffer:
    """One SQLite database per store; safe for many threads and processes on one machine."""

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

    # -- writing ---------------------------------------------------------------

    def append(self, attempts: Sequence[AttemptRows]) -> None:
        """Store attempts durably in one transaction (all or none)."""
        if not attempts:
            return
        now = now_us(self.clock)
        encode, crc32, seeds = _encode, zlib.crc32, _SEEDS
        # One pass: each row (its partition id filled in below) and each partition's totals.
        rows: list[list[Any]] = []
        lines: list[list[tuple[int, bytes]]] = []  # each attempt's capture lines
        keys: list[tuple[RecordType, int, int, str]] = []
        totals: dict[tuple[RecordType, int, int, str], list[int]] = {}
        nbytes = 0
        for a in attempts:
            body = encode((a.metadata, a.responses))
            size = len(body)
            nbytes += size
            part = (a.method, a.year, a.month, a.domain)
            keys.append(part)
            total = totals.get(part)
            if total is None:
                totals[part] = [1, size]
            else:
                total[0] += 1
                total[1] += size
            url_key = a.url_key
            khash = crc32(url_key.encode(), seeds[a.method])
            rows.append([0, 0, khash, url_key, a.ts_us, a.request_id, a.calibre, a.success, size, now, body])
            lines.append(attempt_lines(a.responses))
        with self._lock:
            self._after_append = {}
            with self._transaction() as conn:
                pids, after = _add_to_parts(conn, totals)
                # The seqs SQLite would give (max + 1 on), chosen here for the lines to name.
                seq = conn.execute("SELECT IFNULL(MAX(seq), 0) FROM buffered").fetchone()[0]
                for row, part in zip(rows, keys, strict=True):
                    seq += 1
                    row[0] = seq
                    row[1] = pids[part]
                conn.executemany(_INSERT, rows)
                conn.executemany(
                    _INSERT_LINE,
                    [
                        (row[0], position, row[1], line_key(line), line)
                        for row, made in zip(rows, lines, strict=True)
                        for position, line in made
                    ],
                )
            # The totals of the partitions just written, for the size check
            # that follows an insert (``oversized``), which need not ask again.
            self._after_append = after
            # Bodies, plus index and partition pages.
            self._wrote(nbytes + 200 * len(attempts) + 8 * _PAGE_SIZE)

    def oversized(
        self, parts: Iterable[MethodPartition], max_rows: int, max_bytes: int
    ) -> list[MethodPartition]:
        """Which of ``parts`` hold at least ``max_rows`` rows or ``max_bytes`` bytes.

        Right after :meth:`append`, the totals its transaction ended with answer
        for the partitions it wrote (rows added since by other writers are
        checked by their own inserts; a flush since only makes this one early).
        """
        wanted = list(parts)
        out: list[MethodPartition] = []
        step = _CHUNK // 4
        with self._lock:
            after, self._after_append = self._after_append, {}
            if after and all(mp in after for mp in wanted):
                for mp in wanted:
                    rows, nbytes = after[mp]
                    if rows >= max_rows or nbytes >= max_bytes:
                        out.append(mp)
                return out
            conn = self._write
            for i in range(0, len(wanted), step):
                chunk = wanted[i : i + step]
                marks = ",".join(["(?,?,?,?)"] * len(chunk))
                cur = conn.execute(
                    f"WITH t(method, year, month, domain) AS (VALUES {marks})"  # noqa: S608 - only "?" marks
                    " SELECT p.method, p.year, p.month, p.domain FROM t"
                    " JOIN parts p ON p.method = t.method AND p.year = t.year AND p.month = t.month"
                    " AND p.domain = t.domain WHERE p.rows >= ? OR p.nbytes >= ?",
                    [v for mp in chunk for v in (mp.method.value, mp.year, mp.month, mp.domain)]
                    + [max_rows, max_bytes],
                )
                out.extend(MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall())
        return out

    def due(self, max_rows: int, max_bytes: int, max_age_s: float) -> list[MethodPartition]:
        """Partitions whose unflushed rows exceed a size or age threshold."""
        oldest = now_us(self.clock) - int(max_age_s * 1_000_000)
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            # Totals count claimed rows too (a flush in progress): take those off.
            cur = conn.execute(
                "SELECT p.method, p.year, p.month, p.domain FROM parts p LEFT JOIN"
                " (SELECT pid, COUNT(*) AS n, SUM(nbytes) AS b FROM buffered INDEXED BY buffered_flush"
                "  WHERE flush_id IS NOT NULL GROUP BY pid) c ON c.pid = p.pid"
                " WHERE p.rows - IFNULL(c.n, 0) >= ? OR p.nbytes - IFNULL(c.b, 0) >= ?"
                " OR (SELECT MIN(added_us) FROM buffered b WHERE b.pid = p.pid AND b.flush_id IS NULL) <= ?",
                (max_rows, max_bytes, oldest),
            )
            return [MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall()]

    def partitions(self) -> list[MethodPartition]:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            cur = conn.execute("SELECT method, year, month, domain FROM parts")
            return [MethodPartition(RecordType(m), y, mo, d) for m, y, mo, d in cur.fetchall()]

    def claims(self, part: MethodPartition) -> list[str]:
        """Flush ids holding rows of ``part`` (stale if no flusher holds the lock)."""
        with self._lock:
            cur = self._write.execute(
                f"SELECT DISTINCT flush_id FROM buffered WHERE pid = ({_PART_OF}) AND flush_id IS NOT NULL",  # noqa: S608
                (part.method.value, part.year, part.month, part.domain),
            )
            return [row[0] for row in cur.fetchall()]

    def claim(self, part: MethodPartition, flush_id: str, limit: int) -> int:
        """Mark up to ``limit`` unclaimed rows of ``part`` as being flushed; return how many."""
        with self._lock:
            with self._transaction() as conn:
                cur = conn.execute(
                    "UPDATE buffered SET flush_id=? WHERE seq IN (SELECT seq FROM buffered"  # noqa: S608
                    f" WHERE pid = ({_PART_OF}) AND flush_id IS NULL ORDER BY added_us, seq LIMIT ?)",
                    (flush_id, part.method.value, part.year, part.month, part.domain, limit),
                )
                claimed = cur.rowcount
            self._wrote(100 * claimed + 4 * _PAGE_SIZE)  # index entries
            return claimed

    def claimed(self, flush_id: str) -> Iterator[BufferedAttempt]:
        with self._lock:
            cur = self._write.execute(
                "SELECT request_id, body FROM buffered WHERE flush_id=? ORDER BY seq", (flush_id,)
            )
            rows = cur.fetchall()
        for rid, body in rows:
            yield _attempt(rid, body)

    def complete(self, flush_id: str) -> None:
        """Forget the rows of a flush whose part files are in place."""
        with self._lock:
            with self._transaction() as conn:
                gone = conn.execute(
                    "SELECT pid, COUNT(*), SUM(nbytes) FROM buffered WHERE flush_id=? GROUP BY pid",
                    (flush_id,),
                ).fetchall()
                conn.execute(
                    "DELETE FROM buffered_lines WHERE seq IN (SELECT seq FROM buffered WHERE flush_id=?)",
                    (flush_id,),
                )
                conn.execute("DELETE FROM buffered WHERE flush_id=?", (flush_id,))
                months: set[tuple[str, int, int]] = set()
                for pid, n, nbytes in gone:
                    row = conn.execute(
                        "UPDATE parts SET rows = rows - ?, nbytes = nbytes - ? WHERE pid=?"
                        " RETURNING method, year, month",
                        (n, nbytes, pid),
                    ).fetchone()
                    if row is not None:
                        months.add((row[0], row[1], row[2]))
                    conn.execute(
                        "DELETE FROM parts WHERE pid=? AND NOT EXISTS (SELECT 1 FROM buffered WHERE pid=?)",
                        (pid, pid),
                    )
                for m, y, mo in sorted(months):
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
            # The rows' pages and index entries, freed.
            self._wrote(sum(nbytes + 200 * n for _, n, nbytes in gone) + 8 * _PAGE_SIZE)
            self._reclaim()

    def _reclaim(self) -> None:
        """Give the disk back its free pages once they are most of the file.

        SQLite reuses the pages of flushed rows for later inserts but never
        returns them: a buffer that once held 200,000 attempts stayed at 525 MB
        when empty. VACUUM copies only the live rows (at most a quarter of the
        file here, so its cost is paid for by the flushes that freed the rest;
        none at all when the buffer is empty);
        the TRUNCATE checkpoint then shrinks the WAL it wrote through. Call with
        ``self._lock`` held.
        """
        conn = self._write
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
        mostly_free = free * size >= _RECLAIM_BYTES and free * 4 >= pages * 3
        # An empty buffer costs nothing to compact: give back all it holds.
        if not mostly_free and (
            free * size < 1 << 20 or conn.execute("SELECT 1 FROM buffered LIMIT 1").fetchone()
        ):
            return
        with _in_turn(self._lock_fd):
            try:
                conn.execute("VACUUM")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except sqlite3.Error as exc:  # space is only reclaimed later, nothing is lost
                log.warning("could not reclaim the space of %s: %s", self.path, exc)

    # -- reading ---------------------------------------------------------------

    def lookup(self, method: RecordType, url_keys: Iterable[str]) -> list[BufferedKey]:
        """Key columns of every buffered attempt of ``method`` for these URL keys."""
        by_hash: dict[int, str | set[str]] = {}
        for key in url_keys:
            h = _khash(method, key)
            seen = by_hash.setdefault(h, key)
            if seen != key:  # a collision: the hash stands for several keys
                both = seen if isinstance(seen, set) else {seen}
                both.add(key)
                by_hash[h] = both
        hashes = list(by_hash)
        out: list[BufferedKey] = []
        with self._lock:
            conn = self._connect()
            if conn is None:
                return out
            for i in range(0, len(hashes), _CHUNK):
                chunk = hashes[i : i + _CHUNK]
                marks = ",".join("?" * len(chunk))
                cur = conn.execute(
                    "SELECT b.khash, b.url_key, b.ts_us, b.request_id, b.calibre, b.success"  # noqa: S608
                    f" FROM buffered b INDEXED BY buffered_key JOIN parts p ON p.pid = b.pid"
                    f" WHERE b.khash IN ({marks}) AND p.method = ?",
                    (*chunk, method.value),
                )
                for h, k, t, r, c, s in cur.fetchall():
                    want = by_hash[h]
                    if k == want or (isinstance(want, set) and k in want):
                        out.append(BufferedKey(k, t, r, c, bool(s)))
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
                    f"SELECT request_id, body FROM buffered WHERE request_id IN ({marks})",  # noqa: S608
                    chunk,
                )
                for rid, body in cur.fetchall():
                    out[rid] = _attempt(rid, body)
        return out

    def iter_all(self) -> Iterator[tuple[MethodPartition, str | None, BufferedAttempt]]:
        """Every buffered attempt (for verify and stats)."""
        for part, claim, rid, body in self._every_row():
            yield part, claim, _attempt(rid, body)

    def iter_metadata(self) -> Iterator[tuple[MethodPartition, str | None, dict[str, Any]]]:
        for part, claim, _rid, body in self._every_row():
            yield part, claim, metadata_row(body, whole=True)

    def _every_row(self) -> Iterator[tuple[MethodPartition, str | None, str, bytes]]:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return
            rows = conn.execute(
                "SELECT p.method, p.year, p.month, p.domain, b.flush_id, b.request_id, b.body"
                " FROM buffered b JOIN parts p ON p.pid = b.pid ORDER BY b.seq"
            ).fetchall()
        for m, y, mo, d, fid, rid, body in rows:
            yield MethodPartition(RecordType(m), y, mo, d), fid, rid, body

    def domain_attempts(
        self, method: RecordType, domain: str
    ) -> list[tuple[MethodPartition, BufferedAttempt]]:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            if not self._buffers(conn, method, domain):
                return []
            rows = conn.execute(
                "SELECT p.year, p.month, b.request_id, b.body FROM parts p JOIN buffered b ON b.pid = p.pid"
                " WHERE p.method=? AND p.domain=? ORDER BY b.seq",
                (method.value, domain),
            ).fetchall()
        return [(MethodPartition(method, y, mo, domain), _attempt(rid, body)) for y, mo, rid, body in rows]

    def capture_lines(
        self, method: RecordType, domain: str, prefixes: Sequence[bytes]
    ) -> dict[tuple[int, int], list[bytes]]:
        """The lines of ``domain``'s buffered responses of ``method`` starting with one of
        ``prefixes``, by month: ranges of ``buffered_lines_key``, and lines made on the spot
        only of rows inserted without theirs (by a version before layout 3)."""
        out: dict[tuple[int, int], list[bytes]] = {}
        with self._lock:
            conn = self._connect()
            if conn is None or not self._buffers(conn, method, domain):
                return out
            if self._layout < 3:  # a reader of a buffer no writer of this version has converted
                rows = conn.execute(
                    "SELECT p.year, p.month, b.body FROM parts p JOIN buffered b ON b.pid = p.pid"
                    " WHERE p.method=? AND p.domain=?",
                    (method.value, domain),
                ).fetchall()
                for year, month, body in rows:
                    made = [
                        line for _, line in _lines_of(_decode(body)[1]) if line.startswith(tuple(prefixes))
                    ]
                    out.setdefault((year, month), []).extend(made)
                return out
            parts = conn.execute(
                "SELECT pid, year, month FROM parts INDEXED BY parts_domain WHERE domain=? AND method=?",
                (domain, method.value),
            ).fetchall()
            for pid, year, month in parts:
                found: list[bytes] = []
                for prefix in prefixes:
                    lo, hi = prefix_range(prefix)
                    if hi is None:
                        cur = conn.execute(
                            "SELECT line FROM buffered_lines INDEXED BY buffered_lines_key"
                            " WHERE pid=? AND key >= ?",
                            (pid, lo),
                        )
                    else:
                        cur = conn.execute(
                            "SELECT line FROM buffered_lines INDEXED BY buffered_lines_key"
                            " WHERE pid=? AND key >= ? AND key < ?",
                            (pid, lo, hi),
                        )
                    found += [line for (line,) in cur.fetchall()]
                unlined = conn.execute(
                    "SELECT body FROM buffered INDEXED BY buffered_unlined WHERE pid=? AND lined = 0", (pid,)
                ).fetchall()
                for (body,) in unlined:
                    found += [
                        line for _, line in _lines_of(_decode(body)[1]) if line.startswith(tuple(prefixes))
                    ]
                if found:
                    out[(year, month)] = found
        return out

    def _buffers(self, conn: sqlite3.Connection, method: RecordType, domain: str) -> bool:
        """Whether anything of ``method`` in ``domain`` is buffered. A CDX lookup asks every
        time, mostly of a domain with nothing buffered: that answer is kept until a commit,
        ours or another connection's (data_version: ~2 us against ~25 us for the query).
        Call with ``self._lock`` held."""
        as_of = (conn, conn.execute("PRAGMA data_version").fetchone()[0], self._transactions)
        if as_of != self._unbuffered_as_of:
            self._unbuffered.clear()
            self._unbuffered_as_of = as_of
        if (method.value, domain) in self._unbuffered:
            return False
        some = conn.execute(
            "SELECT 1 FROM parts WHERE domain=? AND method=? LIMIT 1",
            (domain, method.value),
        ).fetchone()
        if some is None and len(self._unbuffered) < 65536:
            self._unbuffered.add((method.value, domain))
        return some is not None

    def generation(self, method: RecordType, year: int, month: int) -> int:
        with self._lock:
            conn = self._connect()
            if conn is None:
                return 0
            row = conn.execute(
                "SELECT gen FROM generations WHERE method=? AND year=? AND month=?",
                (method.value, year, month),
            ).fetchone()
            return int(row[0]) if row else 0

    def counts(self) -> dict[MethodPartition, tuple[int, int, int]]:
        """Per partition: (attempts, successful attempts, bytes)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return {}
            rows = conn.execute(
                "SELECT p.method, p.year, p.month, p.domain, COUNT(*), SUM(b.success), SUM(b.nbytes)"
                " FROM buffered b JOIN parts p ON p.pid = b.pid GROUP BY b.pid"
            ).fetchall()
        return {MethodPartition(RecordType(m), y, mo, d): (n, s, b) for m, y, mo, d, n, s, b in rows}
