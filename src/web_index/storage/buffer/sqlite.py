"""The durable insert buffer: SQLite in WAL mode inside the store.

(One class, :class:`SqliteBuffer`, the Buffer contract on SQLite, in three
modules by what each side needs: its writes and flushes here, what any handle
reads in ``_sqlite_reads.py``, the database opened and written in turn in
``_sqlite_connection.py``; its schema, sizes and the writers' turn live in
``_sqlite.py``.)

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

import sqlite3
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from web_index.models import AttemptRows, RecordType
from web_index.storage._clock import now_us
from web_index.storage.buffer._sqlite import (
    _CHUNK,
    _INSERT,
    _INSERT_LINE,
    _PAGE_SIZE,
    _PART_OF,
    _RECLAIM_BYTES,
    _add_to_parts,
    _in_turn,
)
from web_index.storage.buffer._sqlite_reads import _SqliteReads
from web_index.storage.buffer.base import (
    _SEEDS,
    BufferedAttempt,
    MethodPartition,
    _attempt,
    _encode,
    attempt_lines,
    line_key,
    log,
)

__all__ = ["SqliteBuffer"]


class SqliteBuffer(_SqliteReads):
    """One SQLite database per store; safe for many threads and processes on one machine."""

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
