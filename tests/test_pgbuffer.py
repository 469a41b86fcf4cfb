"""The shared insert buffer on a real PostgreSQL: same semantics as SQLite, safe claims, locks."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.factories import T0, attempt
from tests.servers import BUCKET, Postgres, SeaweedFS
from tests.test_model_based import StoreMachine
from web_index import FlushPolicy, WebIndex
from web_index.errors import StoreError
from web_index.ingest import validate_attempt
from web_index.models import RecordType
from web_index.storage._tables import rows_to_table
from web_index.storage.buffer import MethodPartition, PostgresBuffer, SqliteBuffer
from web_index.storage.indexes._capture_lines import capture_lines


def test_insert_visible_to_other_handles_at_once(postgres: Postgres, tmp_path: Path) -> None:
    dsn = postgres.new_database()
    store = tmp_path / "store"
    with WebIndex(store, buffer=dsn) as a, WebIndex(store, buffer=dsn, read_only=True) as b:
        assert a.remote and b.remote  # the buffer is read over the network
        key = a.insert(*attempt("https://a.example.com/x", T0))
        assert b.query([key])[0] is not None
        assert a.stats().buffered_attempts == 1
        assert a.flush() == 1
        assert b.query([key])[0] is not None
        assert a.stats().buffered_attempts == 0
        assert a.verify().ok


def test_claims_are_disjoint(postgres: Postgres) -> None:
    buf = PostgresBuffer(postgres.new_database())
    attempts = [validate_attempt(*attempt(f"https://a.example.com/{i}", T0)) for i in range(200)]
    buf.append(attempts)
    mp = MethodPartition(attempts[0].method, attempts[0].year, attempts[0].month, attempts[0].domain)
    claimed: list[int] = []
    failed: list[BaseException] = []

    def grab() -> None:
        try:  # a writer opening the buffer while others claim from it (no deadlock)
            other = PostgresBuffer(buf.dsn)
            while n := other.claim(mp, str(uuid.uuid4()), 7):
                claimed.append(n)
            other.close()
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=grab) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == []
    assert sum(claimed) == 200
    rows = list(buf.iter_all())
    assert len(rows) == 200 and all(fid is not None for _, fid, _ in rows)
    assert len({fid for _, fid, _ in rows}) == len(claimed)
    buf.close()


def test_one_size_check_for_many_partitions(postgres: Postgres) -> None:
    buf = PostgresBuffer(postgres.new_database())
    items = [attempt(f"https://d{n % 5}.example{n % 5}.com/{n}", T0) for n in range(15)]
    items += [attempt("https://d0.example0.com/x", T0 + timedelta(days=40), method="head")]
    attempts = [validate_attempt(*item) for item in items]
    buf.append(attempts)
    parts = sorted({MethodPartition(a.method, a.year, a.month, a.domain) for a in attempts})
    assert len(parts) == 6
    assert sorted(buf.oversized(parts, 3, 1 << 40)) == [p for p in parts if p.method.value == "get"]
    assert sorted(buf.oversized(parts, 1, 1 << 40)) == parts
    assert buf.oversized(parts, 4, 1 << 40) == [] and buf.oversized([], 1, 1) == []
    assert sorted(buf.oversized(parts, 100, 1)) == parts
    buf.close()


def test_advisory_lock_released_when_holder_dies(postgres: Postgres) -> None:
    buf = PostgresBuffer(postgres.new_database())
    locks = buf.locks()
    with locks.hold("flush", "p") as taken:
        assert taken
        other = PostgresBuffer(buf.dsn).locks()
        with other.hold("flush", "p", blocking=False) as second:
            assert not second
    holder = PostgresBuffer(buf.dsn)
    cm = holder.locks().hold("flush", "q")
    cm.__enter__()
    holder._lock_conns.clear()
    holder.close()
    # Dying = the connection going away: kill the backend holding the lock.
    import psycopg

    with psycopg.connect(buf.dsn, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND pid <> pg_backend_pid()"
        )
    import time

    deadline = time.monotonic() + 10
    while True:
        with locks.hold("flush", "q", blocking=False) as taken:
            if taken or time.monotonic() > deadline:
                break
        time.sleep(0.05)
    assert taken


def test_bad_dsn_is_a_clear_error(postgres: Postgres, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot connect"):
        WebIndex(tmp_path / "s", buffer=f"postgresql://postgres@127.0.0.1:{postgres.port}/no_such_db")


class PgS3Machine(StoreMachine):
    """The semantics suite with both shared pieces: S3 files and a Postgres buffer."""

    dsn = ""

    def new_location(self) -> str:
        return f"s3://{BUCKET}/pg-{uuid.uuid4().hex[:12]}"

    def drop_location(self) -> None:
        pass

    def open_index(self, **kwargs: object) -> WebIndex:
        return WebIndex(self.location, buffer=self.dsn, **kwargs)  # type: ignore[arg-type]


def test_store_model_s3_postgres(seaweed: SeaweedFS, postgres: Postgres) -> None:
    def factory() -> PgS3Machine:
        PgS3Machine.dsn = postgres.new_database()
        return PgS3Machine()

    run_state_machine_as_test(
        factory, settings=settings(max_examples=25, stateful_step_count=25, deadline=None)
    )


def test_many_writer_processes_share_one_buffer(postgres: Postgres, seaweed: SeaweedFS) -> None:
    dsn = postgres.new_database()
    loc = seaweed.new_store()
    keys: list[object] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        with WebIndex(loc, buffer=dsn, policy=FlushPolicy(max_rows=5, compact_parts=3)) as index:
            for i in range(25):
                url = f"https://h{i % 3}.example.com/{n}/{i}"
                k = index.insert(*attempt(url, T0 + timedelta(days=i % 35)))
                with lock:
                    keys.append(k)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with WebIndex(loc, buffer=dsn) as index:
        assert all(r is not None for r in index.query(keys))  # type: ignore[arg-type]
        index.flush()
        index.compact()
        assert all(r is not None for r in index.query(keys))  # type: ignore[arg-type]
        report = index.verify()
        assert report.ok, report.problems
        assert sum(p.records for p in index.stats().partitions if p.type == "get-metadata") == 100


def test_a_read_survives_a_dropped_connection(postgres: Postgres) -> None:
    import psycopg

    buf = PostgresBuffer(postgres.new_database())
    attempts = [validate_attempt(*attempt("https://a.example.com/x", T0))]
    buf.append(attempts)
    before = buf.counts()
    with psycopg.connect(buf.dsn, autocommit=True) as admin:
        killed = admin.execute(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()) t"
        ).fetchone()
    assert killed is not None and killed[0] >= 1
    assert buf.counts() == before  # the dropped connection was replaced, once, quietly
    buf.close()


def _buffer(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> SqliteBuffer | PostgresBuffer:
    """A new empty buffer of that kind (PostgreSQL: a database of its own)."""
    if kind == "postgres":
        return PostgresBuffer(request.getfixturevalue("postgres").new_database())
    return SqliteBuffer(tmp_path / "buffer.sqlite")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_domains_attempts_are_those_of_its_partitions(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """What a CDX query adds to the files: one domain's attempts of one method, claimed or not."""
    buf = _buffer(kind, request, tmp_path)
    attempts = [
        validate_attempt(*attempt(f"https://{host}/{i}", T0 + timedelta(days=20 * (i % 3)), method=kind_))
        for i in range(12)
        for host in ("a.example.com", "example.com", "b.example.org")
        for kind_ in ("get", "head")
    ]
    buf.append(attempts)
    first = attempts[0]
    buf.claim(MethodPartition(first.method, first.year, first.month, first.domain), "flush-1", 3)
    everything = list(buf.iter_all())
    for method in (first.method, attempts[1].method):
        for domain in ("example.com", "example.org", "example.net"):
            want = [(mp, a) for mp, _, a in everything if mp.method is method and mp.domain == domain]
            assert buf.domain_attempts(method, domain) == want
            assert want or domain == "example.net"
    buf.close()


def _lines_made_from_bodies(
    buf: SqliteBuffer | PostgresBuffer, method: RecordType, domain: str, prefixes: tuple[bytes, ...]
) -> dict[tuple[int, int], list[bytes]]:
    """What a CDX query took from the buffer before lines were kept: every attempt of the
    domain read back, bodies hashed, lines made from the rows as a table."""
    rows: dict[tuple[int, int], list[dict[str, object]]] = {}
    for mp, a in buf.domain_attempts(method, domain):
        rows.setdefault((mp.year, mp.month), []).extend(a.responses)
    out = {}
    for month, responses in rows.items():
        lines = sorted(
            line
            for line in capture_lines(method, rows_to_table(method, responses))
            if line.startswith(prefixes)
        )
        if lines:
            out[month] = lines
    return out


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_buffered_capture_lines_are_those_made_from_the_bodies(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The lines kept at insert, found by prefix, are the lines the rows make (digests of
    their bodies included), claimed or not, for every prefix form; and rows inserted
    without lines (by a version before them) are found too."""
    buf = _buffer(kind, request, tmp_path)
    attempts = [
        validate_attempt(
            *attempt(
                f"https://{host}/{i}",
                T0 + timedelta(days=20 * (i % 3)),
                method=kind_,
                hops=1 + i % 3,
                body=f"body {i} {host}".encode() * i,
            )
        )
        for i in range(12)
        for host in ("a.example.com", "example.com", "b.example.org")
        for kind_ in ("get", "head")
    ]
    buf.append(attempts)
    first = attempts[0]
    buf.claim(MethodPartition(first.method, first.year, first.month, first.domain), "flush-1", 3)
    # As a version before lines were kept inserted them: no lines, not marked.
    old = [a.request_id for a in attempts[::5]]
    if isinstance(buf, SqliteBuffer):
        assert buf._conn is not None
        marks = ",".join("?" * len(old))
        buf._conn.execute(
            "DELETE FROM buffered_lines WHERE seq IN"
            f" (SELECT seq FROM buffered WHERE request_id IN ({marks}))",
            old,
        )
        buf._conn.execute(f"UPDATE buffered SET lined = 0 WHERE request_id IN ({marks})", old)
    else:
        with buf._cursor(write=True) as cur:
            cur.execute("DELETE FROM web_index_lines WHERE request_id = ANY(%s)", (old,))
            cur.execute("UPDATE web_index_attempts SET lined = false WHERE request_id = ANY(%s)", (old,))
    prefix_sets = [
        (b"com,example)/1 ",),  # exact
        (b"com,example)/1",),  # prefix
        (b"com,example,a)/",),  # host
        (b"com,example)", b"com,example,"),  # domain
        (b"org,example,b)/10",),
        (b"",),
    ]
    for method in (RecordType.GET, RecordType.HEAD):
        for domain in ("example.com", "example.org", "example.net"):
            for prefixes in prefix_sets:
                got = {m: sorted(lines) for m, lines in buf.capture_lines(method, domain, prefixes).items()}
                assert got == _lines_made_from_bodies(buf, method, domain, prefixes), (
                    method,
                    domain,
                    prefixes,
                )
    assert buf.capture_lines(RecordType.GET, "example.com", (b"",))  # something was compared
    buf.close()


def test_a_postgres_buffer_without_lines_is_read_and_then_given_them(postgres: Postgres) -> None:
    """A database written by a version before capture lines: a reader of this version makes
    them from the rows; the first writer of this version adds the table and makes them once."""
    dsn = postgres.new_database()
    buf = PostgresBuffer(dsn)
    attempts = [
        validate_attempt(
            *attempt(f"https://example.com/{i}", T0 + timedelta(days=20 * (i % 3)), hops=1 + i % 2)
        )
        for i in range(10)
    ]
    buf.append(attempts)
    prefixes = [(b"com,example)/1",), (b"com,example)", b"com,example,")]
    want = [
        {m: sorted(v) for m, v in buf.capture_lines(RecordType.GET, "example.com", p).items()}
        for p in prefixes
    ]
    assert want[1] and sum(map(len, want[1].values())) == sum(len(a.responses) for a in attempts)
    with buf._cursor(write=True) as cur:  # as that version left it
        cur.execute("DROP TABLE web_index_lines")
        cur.execute("ALTER TABLE web_index_attempts DROP COLUMN lined")
    buf.close()

    def found(b: PostgresBuffer) -> list[dict[tuple[int, int], list[bytes]]]:
        return [
            {m: sorted(v) for m, v in b.capture_lines(RecordType.GET, "example.com", p).items()}
            for p in prefixes
        ]

    reader = PostgresBuffer(dsn, readonly=True)
    assert found(reader) == want
    writer = PostgresBuffer(dsn)
    with writer._cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM web_index_lines")
        assert cur.fetchone()[0] == sum(len(a.responses) for a in attempts)
        cur.execute("SELECT COUNT(*) FROM web_index_attempts WHERE NOT lined")
        assert cur.fetchone()[0] == 0
    assert found(writer) == want and found(reader) == want
    reader.close()
    writer.close()
