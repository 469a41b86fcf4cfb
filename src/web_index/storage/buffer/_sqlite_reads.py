"""What any handle on the SQLite buffer answers, read-only or writable: the key
columns of URL keys, whole rows by request id, every row (verify, stats), a
domain's rows and capture lines, a month's generation, each partition's counts.
Kept apart from the writes (``sqlite.py``), which a reader never runs."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from web_index.models import RecordType
from web_index.storage.buffer._sqlite import _CHUNK
from web_index.storage.buffer._sqlite_connection import _SqliteConnection
from web_index.storage.buffer.base import (
    BufferedAttempt,
    BufferedKey,
    MethodPartition,
    _attempt,
    _decode,
    _khash,
    _lines_of,
    metadata_row,
    prefix_range,
)


class _SqliteReads(_SqliteConnection):
    """The reading side of :class:`~web_index.storage.buffer.SqliteBuffer`."""

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
