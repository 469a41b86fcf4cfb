"""The embedded broker: one SQLite file, shared by the processes of one machine.

A lease is a visibility deadline on the row; every change is one
``BEGIN IMMEDIATE`` transaction, so two consumers can never take the same
message and a timer's removal and its callback commit together. WAL lets
readers go on while a writer commits. The clock is injectable, so the tests
drive leases, retry delays and timers without sleeping.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from web_index._retry import Pause, retrying
from web_index.crawl.queues.base import DeadLetter, Delivery, QueueCounts, backoff, check_bodies

__all__ = ["SqliteBroker"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    body BLOB NOT NULL,
    visible REAL NOT NULL,
    deliveries INTEGER NOT NULL DEFAULT 0,
    lease TEXT,
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS messages_ready ON messages (queue, visible, id);
CREATE TABLE IF NOT EXISTS dead (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    body BLOB NOT NULL,
    reason TEXT NOT NULL,
    deliveries INTEGER NOT NULL,
    died REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS dead_queue ON dead (queue, id);
CREATE TABLE IF NOT EXISTS crawls (id TEXT PRIMARY KEY, spec BLOB NOT NULL, seen INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS seen (
    crawl TEXT NOT NULL, url TEXT NOT NULL, PRIMARY KEY (crawl, url)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS timers (
    site TEXT PRIMARY KEY,
    deadline REAL NOT NULL,
    timeout REAL NOT NULL,
    callback_queue TEXT NOT NULL,
    callback BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS timers_due ON timers (deadline);
CREATE TABLE IF NOT EXISTS turns (key TEXT PRIMARY KEY, next REAL NOT NULL) WITHOUT ROWID;
"""


class _LockedError(Exception):
    pass


def _wal(db: sqlite3.Connection) -> None:
    try:
        db.execute("PRAGMA journal_mode=WAL")
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc):
            raise _LockedError from exc
        raise


class SqliteBroker:
    """Queues and crawl state in the SQLite file ``path`` (created if missing)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_deliveries: int = 5,
        clock: Callable[[], float] = time.time,
        poll: float = 0.02,
    ) -> None:
        if max_deliveries < 1:
            raise ValueError("max_deliveries must be >= 1")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._max_deliveries = max_deliveries
        self._clock = clock
        self._poll = poll
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=60.0, isolation_level=None, check_same_thread=False)
        # Switching a new file to WAL needs it alone, and SQLite answers "locked"
        # at once, without waiting out the busy timeout, while another process
        # opens it too (workers started together on a fresh queue): try again.
        retrying(
            lambda: _wal(self._db),
            tries=600,
            on=(_LockedError,),
            pause=Pause(0.01, cap=0.1),
            gave_up=f"{self.path}: the queue file stayed locked for a minute",
        )
        self._db.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL: durable against a process crash
        self._db.executescript(_SCHEMA)  # its own transaction: each statement is idempotent

    @property
    def url(self) -> str:
        return f"sqlite://{self.path.resolve()}"  # sqlite:///abs/path

    @property
    def max_deliveries(self) -> int:
        return self._max_deliveries

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def _read(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # --- queues -------------------------------------------------------------
    def send(self, queue: str, bodies: Sequence[bytes], *, delay: float = 0.0) -> None:
        visible = self._clock() + max(0.0, delay)
        with self._write() as db:
            db.executemany(
                "INSERT INTO messages (queue, body, visible) VALUES (?, ?, ?)",
                [(queue, bytes(b), visible) for b in bodies],
            )

    def receive(
        self, queue: str, *, limit: int = 1, lease: float = 60.0, wait: float = 0.0
    ) -> list[Delivery]:
        if limit < 1 or lease <= 0:
            raise ValueError("limit must be >= 1 and lease > 0")
        give_up = time.monotonic() + max(0.0, wait)
        while True:
            got = self._take(queue, limit, lease)
            if got or time.monotonic() >= give_up:
                return got
            time.sleep(min(self._poll, max(0.0, give_up - time.monotonic())))

    def _take(self, queue: str, limit: int, lease: float) -> list[Delivery]:
        now = self._clock()
        token = uuid.uuid4().hex
        out: list[Delivery] = []
        with self._write() as db:
            while len(out) < limit:
                rows = db.execute(
                    "SELECT id, body, deliveries, last_error FROM messages"
                    " WHERE queue = ? AND visible <= ? ORDER BY visible, id LIMIT ?",
                    (queue, now, limit - len(out)),
                ).fetchall()
                if not rows:
                    break
                for mid, body, deliveries, last_error in rows:
                    if deliveries >= self._max_deliveries:
                        reason = _exhausted(deliveries, last_error)
                        self._bury(db, mid, queue, body, reason, deliveries, now)
                        continue
                    db.execute(
                        "UPDATE messages SET visible = ?, deliveries = deliveries + 1, lease = ?"
                        " WHERE id = ?",
                        (now + lease, token, mid),
                    )
                    out.append(Delivery(queue, str(mid), bytes(body), deliveries + 1, token))
        return out

    def _bury(
        self,
        db: sqlite3.Connection,
        mid: object,
        queue: str,
        body: bytes,
        reason: str,
        deliveries: int,
        now: float,
    ) -> None:
        db.execute("DELETE FROM messages WHERE id = ?", (mid,))
        db.execute(
            "INSERT INTO dead (id, queue, body, reason, deliveries, died) VALUES (?, ?, ?, ?, ?, ?)",
            (mid, queue, body, reason, deliveries, now),
        )

    def ack(self, delivery: Delivery) -> None:
        with self._write() as db:
            db.execute(
                "DELETE FROM messages WHERE id = ? AND lease = ?", (int(delivery.id), delivery.lease_token)
            )

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        with self._write() as db:
            db.executemany(
                "DELETE FROM messages WHERE id = ? AND lease = ?",
                [(int(d.id), d.lease_token) for d in deliveries],
            )

    def extend(self, delivery: Delivery, lease: float) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE messages SET visible = ? WHERE id = ? AND lease = ?",
                (self._clock() + lease, int(delivery.id), delivery.lease_token),
            )

    def release(self, delivery: Delivery, reason: str, *, delay: float | None = None) -> None:
        now = self._clock()
        with self._write() as db:
            if delivery.deliveries >= self._max_deliveries:
                held = db.execute(
                    "SELECT 1 FROM messages WHERE id = ? AND lease = ?",
                    (int(delivery.id), delivery.lease_token),
                ).fetchone()
                if held:
                    why = _exhausted(delivery.deliveries, reason)
                    self._bury(
                        db, int(delivery.id), delivery.queue, delivery.body, why, delivery.deliveries, now
                    )
                return
            wait = backoff(delivery.deliveries) if delay is None else max(0.0, delay)
            db.execute(
                "UPDATE messages SET visible = ?, lease = NULL, last_error = ? WHERE id = ? AND lease = ?",
                (now + wait, reason, int(delivery.id), delivery.lease_token),
            )

    def dead_letter(self, delivery: Delivery, reason: str) -> None:
        with self._write() as db:
            held = db.execute(
                "SELECT 1 FROM messages WHERE id = ? AND lease = ?", (int(delivery.id), delivery.lease_token)
            ).fetchone()
            if held:
                self._bury(
                    db,
                    int(delivery.id),
                    delivery.queue,
                    delivery.body,
                    reason,
                    delivery.deliveries,
                    self._clock(),
                )

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]:
        rows = self._read(
            "SELECT id, body, reason, deliveries, died FROM dead WHERE queue = ? ORDER BY id LIMIT ?",
            (queue, limit),
        )
        return [DeadLetter(queue, str(r[0]), bytes(r[1]), str(r[2]), int(r[3]), float(r[4])) for r in rows]

    def counts(self, queue: str) -> QueueCounts:
        now = self._clock()
        ((ready, leased),) = self._read(
            "SELECT COALESCE(SUM(lease IS NULL OR visible <= ?), 0),"
            " COALESCE(SUM(lease IS NOT NULL AND visible > ?), 0)"
            " FROM messages WHERE queue = ?",
            (now, now, queue),
        )
        ((dead,),) = self._read("SELECT COUNT(*) FROM dead WHERE queue = ?", (queue,))
        return QueueCounts(int(ready), int(leased), int(dead))

    def forget(self, queue: str) -> None:
        with self._write() as db:
            db.execute("DELETE FROM messages WHERE queue = ?", (queue,))
            db.execute("DELETE FROM dead WHERE queue = ?", (queue,))

    # --- crawl state ----------------------------------------------------------
    def put_crawl(self, crawl: str, spec: bytes) -> bool:
        with self._write() as db:
            cur = db.execute("INSERT OR IGNORE INTO crawls (id, spec) VALUES (?, ?)", (crawl, spec))
            return cur.rowcount == 1

    def get_crawl(self, crawl: str) -> bytes | None:
        rows = self._read("SELECT spec FROM crawls WHERE id = ?", (crawl,))
        return bytes(rows[0][0]) if rows else None

    def add_seen(
        self,
        crawl: str,
        urls: Sequence[str],
        *,
        max_pages: int,
        queue: str | None = None,
        bodies: Sequence[bytes] = (),
    ) -> list[bool]:
        check_bodies(urls, queue, bodies)
        admitted: list[bool] = []
        visible = self._clock()
        with self._write() as db:
            row = db.execute("SELECT COUNT(*) FROM seen WHERE crawl = ?", (crawl,)).fetchone()
            count = int(row[0])
            for url in urls:
                if count >= max_pages:
                    admitted.append(False)
                    continue
                cur = db.execute("INSERT OR IGNORE INTO seen (crawl, url) VALUES (?, ?)", (crawl, url))
                new = cur.rowcount == 1
                count += new
                admitted.append(new)
            if queue is not None:
                db.executemany(
                    "INSERT INTO messages (queue, body, visible) VALUES (?, ?, ?)",
                    [(queue, bytes(b), visible) for b, ok in zip(bodies, admitted, strict=True) if ok],
                )
        return admitted

    def seen_count(self, crawl: str) -> int:
        ((count,),) = self._read("SELECT COUNT(*) FROM seen WHERE crawl = ?", (crawl,))
        return int(count)

    def reserve_turn(self, key: str, interval: float) -> float:
        now = self._clock()
        with self._write() as db:
            row = db.execute("SELECT next FROM turns WHERE key = ?", (key,)).fetchone()
            start = max(now, float(row[0]) if row else now)
            db.execute("INSERT OR REPLACE INTO turns (key, next) VALUES (?, ?)", (key, start + interval))
        return start - now

    # --- timers ---------------------------------------------------------------
    def start_timer(self, site: str, timeout: float, callback_queue: str, callback: bytes) -> None:
        with self._write() as db:
            db.execute(
                "INSERT OR REPLACE INTO timers (site, deadline, timeout, callback_queue, callback)"
                " VALUES (?, ?, ?, ?, ?)",
                (site, self._clock() + timeout, timeout, callback_queue, callback),
            )

    def reset_timer(self, site: str, timeout: float, callback_queue: str, callback: bytes) -> bool:
        now = self._clock()
        with self._write() as db:
            cur = db.execute("UPDATE timers SET deadline = ? + timeout WHERE site = ?", (now, site))
            if cur.rowcount:
                return True
            db.execute(
                "INSERT INTO timers (site, deadline, timeout, callback_queue, callback)"
                " VALUES (?, ?, ?, ?, ?)",
                (site, now + timeout, timeout, callback_queue, callback),
            )
            return False

    def fire_timers(self, limit: int = 100) -> list[str]:
        now = self._clock()
        with self._write() as db:
            due = db.execute(
                "SELECT site, callback_queue, callback FROM timers"
                " WHERE deadline <= ? ORDER BY deadline LIMIT ?",
                (now, limit),
            ).fetchall()
            for site, queue, callback in due:
                db.execute("DELETE FROM timers WHERE site = ?", (site,))
                db.execute(
                    "INSERT INTO messages (queue, body, visible) VALUES (?, ?, ?)", (queue, callback, now)
                )
        return [str(site) for site, _, _ in due]

    def timers(self) -> dict[str, float]:
        return {str(s): float(d) for s, d in self._read("SELECT site, deadline FROM timers")}

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _exhausted(deliveries: int, last_error: object) -> str:
    last = f"; last error: {last_error}" if last_error else " without an ack (its consumers died or hung)"
    return f"delivered {deliveries} times{last}"
