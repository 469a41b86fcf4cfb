"""The SQLite insert buffer's layout: narrow indexes, per-partition totals, and
buffers written in the older layout."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import sqlite3
import threading
import time
import zlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex
from web_index.errors import StoreError
from web_index.ingest import validate_attempt
from web_index.models import (
    GET_COLUMNS,
    HEAD_COLUMNS,
    METADATA_COLUMNS,
    Page,
    PageKey,
    RecordType,
    SimplePageQuery,
)
from web_index.storage._schema import DIGEST_COLUMNS, SCHEMAS
from web_index.storage.buffer import MethodPartition, SqliteBuffer, buffer_rows
from web_index.storage.buffer.base import _khash

# The layout before this one (web-index up to commit 57b7260), as it created it.
_OLD_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS totals (
    method TEXT NOT NULL, year INTEGER NOT NULL, month INTEGER NOT NULL, domain TEXT NOT NULL,
    rows INTEGER NOT NULL, nbytes INTEGER NOT NULL,
    PRIMARY KEY (method, year, month, domain)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS generations (
    method TEXT NOT NULL, year INTEGER NOT NULL, month INTEGER NOT NULL, gen INTEGER NOT NULL,
    PRIMARY KEY (method, year, month)
) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS totals_insert AFTER INSERT ON attempts BEGIN
    INSERT INTO totals VALUES (NEW.method, NEW.year, NEW.month, NEW.domain, 1, NEW.nbytes)
    ON CONFLICT DO UPDATE SET rows = rows + 1, nbytes = nbytes + NEW.nbytes;
END;
CREATE TRIGGER IF NOT EXISTS totals_delete AFTER DELETE ON attempts BEGIN
    UPDATE totals SET rows = rows - 1, nbytes = nbytes - OLD.nbytes
    WHERE method = OLD.method AND year = OLD.year AND month = OLD.month AND domain = OLD.domain;
    DELETE FROM totals
    WHERE method = OLD.method AND year = OLD.year AND month = OLD.month AND domain = OLD.domain
      AND rows <= 0;
END;
"""


DEAD_FLUSH = "00000000-0000-4000-8000-00000000dead"


def _old_buffer(store: Path, items: list[tuple[object, ...]], claimed: int = 0) -> list[PageKey]:
    """A store whose buffer is in the old layout, holding these attempts (the first
    ``claimed`` of get/2024/08/example0.com claimed by a flush that died)."""
    attempts = [validate_attempt(*item) for item in items]  # type: ignore[arg-type]
    folder = store / "_buffer"
    folder.mkdir(parents=True)
    conn = sqlite3.connect(folder / "buffer.sqlite3", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(_OLD_SCHEMA)
    rows = [  # the blobs as that version wrote them: maps, not values in column order
        (*row[:11], *map(_as_map, a.rows()))
        for row, a in zip(buffer_rows(attempts, time.time_ns() // 1000), attempts, strict=True)
    ]
    conn.executemany(
        "INSERT INTO attempts (method, year, month, domain, url_key, ts_us, request_id,"
        " calibre, success, nbytes, added_us, metadata, responses) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        rows,
    )
    conn.execute(  # a claim is of one partition's rows
        "UPDATE attempts SET flush_id = ? WHERE seq IN (SELECT seq FROM attempts WHERE method = 'get'"
        " AND year = 2024 AND month = 8 AND domain = 'example0.com' ORDER BY seq LIMIT ?)",
        (DEAD_FLUSH, claimed),
    )
    conn.close()
    out = []
    for a in attempts:
        type = a.method if a.success else a.method.metadata
        out.append(PageKey(url=a.url, timestamp=a.timestamp, request_id=a.request_id, type=type))
    return out


_as_map = msgspec.msgpack.Encoder().encode


def _items() -> list[tuple[object, ...]]:
    items: list[tuple[object, ...]] = []
    for n in range(30):
        url = f"https://{'ab'[n % 2]}.example{n % 3}.com/p{n}"
        items.append(attempt(url, T0 + timedelta(days=40 * (n % 2), seconds=n), hops=1 + n % 3))
    items.append(attempt("https://example0.com/failed", state="timeout"))
    items.append(attempt("https://example0.com/head", method="head"))
    return items


def test_an_old_buffer_is_converted_by_a_writable_open(store_path: Path) -> None:
    keys = _old_buffer(store_path, _items(), claimed=3)
    with pytest.raises(StoreError, match="older layout"), WebIndex(store_path, read_only=True) as ro:
        ro.query(keys[:1])
    with WebIndex(store_path) as index:
        pages = index.query(keys)
        assert all(p is not None for p in pages)
        assert [p.request_id for p in pages] == [k.request_id for k in keys]  # type: ignore[union-attr]
        assert index.stats().buffered_attempts == len(keys) and index.verify().ok
        buf = index._store.buffer
        assert isinstance(buf, SqliteBuffer) and buf._conn is not None
        totals = buf._conn.execute("SELECT SUM(rows), SUM(nbytes) FROM parts").fetchone()
        sums = buf._conn.execute("SELECT COUNT(*), SUM(nbytes) FROM buffered").fetchone()
        assert totals == sums and sums[0] == len(keys)
        tables = {r[0] for r in buf._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "attempts" not in tables and "totals" not in tables
        part = MethodPartition(RecordType.GET, 2024, 8, "example0.com")
        assert buf.claims(part) == [DEAD_FLUSH]  # the dead flush's claim came along
        assert index.flush() == len(keys)
        assert index.stats().buffered_attempts == 0 and buf.partitions() == []
        assert index.query(keys) == pages
    with WebIndex(store_path, read_only=True) as ro:
        assert ro.query(keys) == pages


def _as_layout_2(database: Path) -> None:
    """Turn a buffer of layout 3 back into layout 2: no capture lines, no ``lined``."""
    conn = sqlite3.connect(database, isolation_level=None)
    for name in ("buffered_unlined", "buffered_lines_key", "parts_domain"):
        conn.execute(f"DROP INDEX {name}")
    conn.execute("DROP TABLE buffered_lines")
    # As layout 2 made it (a CREATE TABLE ending with a comment would defeat DROP COLUMN).
    conn.execute("BEGIN")
    conn.execute(
        "CREATE TABLE old (seq INTEGER PRIMARY KEY, pid INTEGER NOT NULL, khash INTEGER NOT NULL,"
        " url_key TEXT NOT NULL, ts_us INTEGER NOT NULL, request_id TEXT NOT NULL UNIQUE,"
        " calibre INTEGER NOT NULL, success INTEGER NOT NULL, nbytes INTEGER NOT NULL,"
        " added_us INTEGER NOT NULL, flush_id TEXT, body BLOB NOT NULL)"
    )
    conn.execute("INSERT INTO old SELECT seq, pid, khash, url_key, ts_us, request_id, calibre, success,"
                 " nbytes, added_us, flush_id, body FROM buffered")  # fmt: skip
    conn.execute("DROP TABLE buffered")
    conn.execute("ALTER TABLE old RENAME TO buffered")
    conn.execute("CREATE INDEX buffered_key ON buffered (khash)")
    conn.execute("CREATE INDEX buffered_part ON buffered (pid, flush_id, added_us)")
    conn.execute("CREATE INDEX buffered_flush ON buffered (flush_id) WHERE flush_id IS NOT NULL")
    conn.execute("COMMIT")
    conn.execute("PRAGMA user_version=2")
    conn.close()


def test_a_buffer_of_layout_2_gets_its_capture_lines_when_opened_writable(store_path: Path) -> None:
    items = _items()
    queries = [(f"https://{h}.example{d}.com/", "domain") for h in "ab" for d in range(3)]
    queries += [("https://a.example0.com/p0", "exact"), ("https://example0.com/head", "exact")]
    with WebIndex(store_path) as index:
        keys = index.insert_many(items)
        before = [list(index.captures(u, match=m, type=t)) for u, m in queries for t in ("get", "head")]
    assert sum(map(len, before)) > len(items)
    _as_layout_2(store_path / "_buffer" / "buffer.sqlite3")
    with WebIndex(store_path, read_only=True) as ro:  # a reader reads it as it is
        assert all(ro.query(keys))
        assert [list(ro.captures(u, match=m, type=t)) for u, m in queries for t in ("get", "head")] == before
    with WebIndex(store_path) as index:
        buf = index._store.buffer
        assert isinstance(buf, SqliteBuffer) and buf._conn is not None
        responses = sum(len(validate_attempt(*item).responses) for item in items)  # type: ignore[arg-type]
        assert buf._conn.execute("SELECT COUNT(*) FROM buffered_lines").fetchone()[0] == responses
        assert buf._conn.execute("SELECT COUNT(*) FROM buffered WHERE lined = 0").fetchone()[0] == 0
        assert [
            list(index.captures(u, match=m, type=t)) for u, m in queries for t in ("get", "head")
        ] == before
        assert index.flush() == len(items)
        assert buf._conn.execute("SELECT COUNT(*) FROM buffered_lines").fetchone()[0] == 0
        assert [
            list(index.captures(u, match=m, type=t)) for u, m in queries for t in ("get", "head")
        ] == before


def test_an_empty_old_buffer_reads_as_empty(store_path: Path) -> None:
    _old_buffer(store_path, [])
    with WebIndex(store_path, read_only=True) as ro:
        assert ro.query([SimplePageQuery(url="https://example.com/")]) == [None]
    with WebIndex(store_path) as index:
        key = index.insert(*attempt("https://example.com/"))
        with WebIndex(store_path, read_only=True) as ro:
            assert ro.query([key])[0] is not None


def test_buffered_rows_come_back_as_validated(index: WebIndex) -> None:
    """Blobs hold values in column order; loading gives back the rows validation made."""
    attempts = [validate_attempt(*item) for item in _items()]  # type: ignore[arg-type]
    buf = index._store.buffer
    buf.append(attempts)
    loaded = buf.load([a.request_id for a in attempts])
    assert {a.method for a in attempts} == {RecordType.GET, RecordType.HEAD}
    assert any(not a.responses for a in attempts) and any(len(a.responses) > 1 for a in attempts)
    for a in attempts:
        got = loaded[a.request_id]
        assert (got.metadata, got.responses) == a.rows()
    assert isinstance(buf, SqliteBuffer) and buf._conn is not None
    blob = buf._conn.execute("SELECT body FROM buffered LIMIT 1").fetchone()[0]
    assert isinstance(msgspec.msgpack.decode(blob)[0], list)  # no keys repeated in every row


def test_the_blob_layout_holds_every_column_of_the_files() -> None:
    # A column added to the files needs a place in the blob (and a new blob layout),
    # unless it is derived when rows are written (the payload digests, from the body)
    # or only compaction writes it (payload references: a buffered row holds its body).
    assert sorted(METADATA_COLUMNS) == sorted(SCHEMAS[RecordType.GET_METADATA].names)
    assert sorted((*GET_COLUMNS, *DIGEST_COLUMNS, "payload_ref")) == sorted(SCHEMAS[RecordType.GET].names)
    assert sorted(HEAD_COLUMNS) == sorted(SCHEMAS[RecordType.HEAD].names)


def test_a_blob_of_another_layout_is_an_error_naming_it(index: WebIndex) -> None:
    a = validate_attempt(*attempt("https://example.com/"))
    buf = index._store.buffer
    buf.append([a])
    assert isinstance(buf, SqliteBuffer) and buf._conn is not None
    for meta, responses, what in [
        (a.metadata[:-1], a.responses, "metadata row of 10 values"),
        (a.metadata, [a.responses[0][:-2]], "response row of 13 values"),
    ]:
        blob = _as_map((meta, responses))
        buf._conn.execute("UPDATE buffered SET body = ? WHERE request_id = ?", (blob, a.request_id))
        with pytest.raises(StoreError, match=what):
            buf.load([a.request_id])


def test_blobs_of_maps_written_before_still_read_and_flush(store_path: Path) -> None:
    """A buffer of this layout written before blobs held values only (they held maps)."""
    items = _items()
    with WebIndex(store_path) as index:
        keys = index.insert_many(items)
        pages = index.query(keys)
        attempts = list(index._store.buffer.load([k.request_id for k in keys]).values())
        buf = index._store.buffer
        assert isinstance(buf, SqliteBuffer) and buf._conn is not None
        buf._conn.executemany(
            "UPDATE buffered SET body = ? WHERE request_id = ?",
            [(_as_map((a.metadata, a.responses)), a.request_id) for a in attempts],
        )
    with WebIndex(store_path) as index:
        assert index.query(keys) == pages and index.verify().ok
        assert index.flush() == len(items)
        assert index.query(keys) == pages


# Two URL keys of one CRC-32 lookup hash for GET (found by search; the hash is fixed, see below).
COLLIDING = ("https://c.example.com/998539", "https://c.example.com/12060000")


def test_lookups_see_through_hash_collisions(index: WebIndex) -> None:
    a, b = COLLIDING
    assert _khash(RecordType.GET, a) == _khash(RecordType.GET, b)
    key_a = index.insert(*attempt(a, body=b"A"))
    key_b = index.insert(*attempt(b, T0 + timedelta(seconds=1), body=b"B"))
    index.insert(*attempt(a, method="head"))
    buf = index._store.buffer
    assert [k.request_id for k in buf.lookup(RecordType.GET, [a])] == [key_a.request_id]
    assert [k.request_id for k in buf.lookup(RecordType.GET, [b])] == [key_b.request_id]
    both = buf.lookup(RecordType.GET, [a, b, "https://c.example.com/none"])
    assert sorted(k.request_id for k in both) == sorted([key_a.request_id, key_b.request_id])
    assert len(buf.lookup(RecordType.HEAD, [a, b])) == 1
    pages = index.query([SimplePageQuery(url=a), SimplePageQuery(url=b)])
    assert [p.data for p in pages if isinstance(p, Page)] == [b"A", b"B"]


def test_size_and_age_thresholds_count_unclaimed_rows(index: WebIndex) -> None:
    buf = index._store.buffer
    items = [attempt(f"https://example.com/{n}", T0 + timedelta(seconds=n)) for n in range(10)]
    index.insert_many(items)
    part = MethodPartition(RecordType.GET, 2024, 8, "example.com")
    assert buf.oversized([part], 10, 1 << 40) == [part]
    assert buf.due(10, 1 << 40, 3600) == [part]
    assert buf.due(11, 1 << 40, 3600) == []
    time.sleep(0.01)
    assert buf.due(11, 1 << 40, 0.005) == [part]  # old enough
    assert buf.claim(part, "f1", 4) == 4
    assert buf.oversized([part], 10, 1 << 40) == [part]  # totals: every buffered row
    assert buf.due(10, 1 << 40, 3600) == []  # due: only rows no flush has claimed
    assert buf.due(6, 1 << 40, 3600) == [part]
    assert len(list(buf.claimed("f1"))) == 4
    buf.complete("f1")
    assert buf.oversized([part], 6, 1 << 40) == [part] and buf.oversized([part], 7, 1 << 40) == []
    assert buf.claim(part, "f2", 100) == 6
    assert buf.due(1, 1, 0) == []  # everything is claimed
    buf.complete("f2")
    assert buf.partitions() == [] and buf.counts() == {}


def test_one_size_check_covers_many_partitions(store_path: Path) -> None:
    policy = FlushPolicy(max_rows=2, compact_parts=0)
    with WebIndex(store_path, policy=policy) as index:
        # More partitions than one statement takes (totals and size checks go in chunks).
        items = [attempt(f"https://d{n}.example{n}.com/", T0) for n in range(240)]
        index.insert_many(items)  # 240 partitions of one row: nothing to flush
        buf = index._store.buffer
        parts = buf.partitions()
        assert len(parts) == 240 and index.stats().buffered_attempts == 240
        assert sorted(buf.oversized(parts, 1, 1 << 40)) == sorted(parts)
        assert buf.oversized(parts, 2, 1 << 40) == []
        index.insert_many(items[:3] + items[-3:])  # these reach two rows: flushed at once
        assert index.stats().buffered_attempts == 234 and len(buf.partitions()) == 234


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3), st.integers(0, 2)), min_size=1, max_size=30),
    st.integers(1, 8),
    st.integers(1, 40_000),
)
def test_the_size_check_after_an_insert_answers_as_the_query_does(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, int, int]], max_rows: int, max_bytes: int
) -> None:
    # Right after append, oversized answers from the totals the insert's own
    # transaction ended with; the plain query (asked next) must agree, over
    # several inserts, with a flush (claim + complete) in between.
    root = tmp_path_factory.mktemp("buf")
    buf = SqliteBuffer(root)
    try:
        for batch in (rows[: len(rows) // 2], rows[len(rows) // 2 :]):
            attempts = [
                validate_attempt(
                    *attempt(f"https://site{d}.com/{n}", T0 + timedelta(days=31 * m), body=b"x" * 900)
                )
                for n, (d, m, _) in enumerate(batch)
            ]
            if not attempts:
                continue
            buf.append(attempts)
            touched = list({MethodPartition(a.method, a.year, a.month, a.domain) for a in attempts})
            fast = buf.oversized(touched, max_rows, max_bytes)
            assert not buf._after_append  # used once
            assert sorted(fast) == sorted(buf.oversized(touched, max_rows, max_bytes))
            for (_, _, claim), mp in zip(batch, touched, strict=False):
                if claim and buf.claim(mp, f"f-{mp}", claim):
                    buf.complete(f"f-{mp}")
    finally:
        buf.close()


def test_the_size_check_after_an_insert_asks_for_partitions_it_did_not_write(store_path: Path) -> None:
    with WebIndex(store_path, policy=FlushPolicy(max_rows=1 << 30, compact_parts=0)) as index:
        buf = index._store.buffer
        index.insert_many([attempt(f"https://a-site.com/{n}") for n in range(3)])
        other = MethodPartition(RecordType.GET, 2024, 8, "a-site.com")
        buf.append([validate_attempt(*attempt("https://b-site.com/"))])
        # ``other`` was not in that insert: the query answers, not the insert's totals.
        assert buf.oversized([other], 3, 1 << 40) == [other]
        assert buf.oversized([other], 4, 1 << 40) == []


def test_checksums_of_the_lookup_index_are_stable() -> None:
    # The index holds these hashes on disk: they must never change between versions.
    assert _khash(RecordType.GET, "https://example.com/") == zlib.crc32(
        b"https://example.com/", zlib.crc32(b"get\0")
    )
    assert _khash(RecordType.HEAD, "https://example.com/") != _khash(RecordType.GET, "https://example.com/")


def test_writers_take_turns_through_the_lock_file(store_path: Path) -> None:
    with WebIndex(store_path) as index:
        index.insert(*attempt("https://example.com/first"))
        fd = os.open(store_path / "_buffer" / "buffer.lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer, mid-transaction
        done = threading.Event()
        t = threading.Thread(target=lambda: (index.insert(*attempt("https://example.com/x")), done.set()))
        t.start()
        assert not done.wait(0.3)  # waits its turn...
        fcntl.flock(fd, fcntl.LOCK_UN)
        assert done.wait(10)  # ...and goes as soon as the lock is free
        t.join()
        os.close(fd)
        assert index.stats().buffered_attempts == 2


def _open_at(folder: str, start: float, out: Any) -> None:
    while time.time() < start:  # spin: the processes arrive within microseconds
        pass
    try:
        SqliteBuffer(Path(folder)).close()
        out.put("ok")
    except Exception as exc:
        out.put(repr(exc))


def test_processes_opening_a_new_buffer_at_once_all_succeed(tmp_path: Path) -> None:
    """Turning a new database to WAL from two processes at once deadlocks inside
    SQLite, which fails one at once, busy timeout or not; setting up in turn (the
    lock file) avoids it. Without the lock this test failed on the project's
    2-core VM (about 1 trial in 40 fails; the bare SQLite calls, 9 in 40)."""
    ctx = multiprocessing.get_context("fork")  # no imports in the children: they start together
    failures = []
    for trial in range(25):
        folder = tmp_path / f"t{trial}"
        out = ctx.Queue()
        start = time.time() + 0.2
        procs = [ctx.Process(target=_open_at, args=(str(folder), start, out)) for _ in range(8)]
        for proc in procs:
            proc.start()
        results = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(60)
        failures += [r for r in results if r != "ok"]
    assert failures == []


@pytest.mark.parametrize("damage", ["directory", "garbage"])
def test_a_buffer_that_fails_to_open_leaves_the_lock_free(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "buffer.sqlite3"
    if damage == "directory":
        path.mkdir()  # sqlite3.connect itself fails
    else:
        path.write_bytes(b"not a database" * 1000)  # the first PRAGMA fails
    with pytest.raises(StoreError, match=r"insert buffer .*buffer\.sqlite3 could not be opened"):
        SqliteBuffer(tmp_path)
    fd = os.open(tmp_path / "buffer.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if still held
    finally:
        os.close(fd)
    if damage == "garbage":  # a reader (stats, queries) gets the same error
        with pytest.raises(StoreError, match=r"insert buffer .*buffer\.sqlite3 could not be opened"):
            SqliteBuffer(tmp_path, readonly=True).counts()


def test_writers_keep_the_wal_short(store_path: Path) -> None:
    body = os.urandom(20_000)
    wal = store_path / "_buffer" / "buffer.sqlite3-wal"
    largest = 0
    with WebIndex(store_path, policy=FlushPolicy(max_rows=1 << 30, max_bytes=1 << 40)) as index:
        for batch in range(24):  # ~48 MB of bodies
            items = [attempt(f"https://example.com/{batch}/{n}", body=body) for n in range(100)]
            index.insert_many(items)
            largest = max(largest, wal.stat().st_size)
        assert index.stats().buffered_attempts == 2400
    # Checkpointed as it went (on a thread of its own, so give it some slack).
    assert largest < 24 << 20
    assert not [
        t for t in threading.enumerate() if t.name == "web-index-checkpoint"
    ]  # closed with the handle
