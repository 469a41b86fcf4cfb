"""Model-based test: the store against a tiny in-memory reference.

Random sequences of inserts, flushes, compactions, reopenings, query batches
and steps of a clock the test drives: flushes happen by size (``max_rows``),
by age (the clock passes ``max_age_s``, so the next insert flushes what is old)
and by call; compactions by call and by themselves (``compact_parts``); on S3
the cache's listings expire with the same clock. After every batch, every
query kind, calibre rule and time window must answer exactly as the reference
does, and ``verify`` (which also checks the month index against the files it
claims to cover) must find nothing wrong. Runs on a local store, on S3, and on
S3 with the shared PostgreSQL buffer.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.factories import attempt
from tests.servers import BUCKET, Postgres, SeaweedFS
from web_index import FlushPolicy, WebIndex
from web_index.ingest import _validate
from web_index.models import (
    AttemptMetadata,
    Page,
    PageKey,
    Query,
    RecordType,
    SimplePageQuery,
    TimeAwarePageQuery,
)
from web_index.query import _find_many
from web_index.storage import PostgresBuffer
from web_index.storage import _load as load_module
from web_index.storage.indexes._month_verify import index_disagreement
from web_index.urls import domain_of, url_key

# A few resources, each spelled several ways that must meet in the store.
URLS = [
    ["https://a.example.com/x", "HTTPS://A.Example.COM:443/x#frag", "https://a.example.com/%78"],
    ["https://b.example.com/Y?q=1", "https://B.EXAMPLE.COM/Y?q=1#z"],
    ["http://c.example.org", "http://c.example.org:80/"],
    ["http://127.0.0.1:8080/p"],
    ["https://d.test.co.uk/a b", "https://d.test.co.uk/a%20b"],
]
# The shape of the scenario that once lost a record on S3: a dozen URLs over
# three registrable domains, 150 days from 2023-11-01 (across a year end).
SCENARIO_URLS = [
    [f"https://{host}.{domain}/p{n}"]
    for domain in ("alpha.com", "beta.org", "gamma.net")
    for host, n in (("www", 1), ("www", 2), ("blog", 1), ("shop", 3))
]
# Instants around month boundaries, with repeats so that exact ties happen.
BASE = datetime(2024, 7, 31, 23, 0, tzinfo=UTC)
TIMES = [
    BASE + timedelta(minutes=m) for m in (0, 30, 59, 60, 61, 90, 60 * 24 * 31, 60 * 24 * 31 + 1, 60 * 24 * 62)
]
SCENARIO_START = datetime(2023, 11, 1, tzinfo=UTC)
SCENARIO_TIMES = [SCENARIO_START + timedelta(hours=4 * k) for k in range(0, 150 * 6, 37)]

urls = st.sampled_from(URLS + SCENARIO_URLS).flatmap(st.sampled_from)


def _body(n: int) -> bytes:
    """Every third body is one of two long payloads that many records share (a
    re-crawl of an unchanged page: stored once, storage/_dedupe.py); the rest unique."""
    if n % 3 == 0:
        return f"<html>a page that did not change, version {n % 2}. ".encode() * 8
    return f"body {n}".encode()


times = st.sampled_from(TIMES) | st.sampled_from(SCENARIO_TIMES)
calibres = st.sampled_from([0, 10, 30, 50, 60, 99])
states = st.sampled_from(["success", "success", "success", "timeout", "blocked", "error"])
types = st.sampled_from(list(RecordType))
maybe_time = st.none() | times | st.sampled_from([t + timedelta(seconds=1) for t in TIMES + SCENARIO_TIMES])


class DrivenClock:
    """The store's clock, advanced by the test (see ``web_index.storage.Clock``)."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).timestamp()
        self.mono = 1000.0

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.mono += seconds


@st.composite
def time_aware(draw: st.DrawFn) -> TimeAwarePageQuery:
    bounds = sorted([draw(maybe_time), draw(maybe_time)], key=lambda t: (t is None, t))
    lo, hi = bounds if draw(st.booleans()) else (None, bounds[0])
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    return TimeAwarePageQuery(
        url=draw(urls),
        not_before=lo,
        not_after=hi,
        timestamp=draw(maybe_time),
        calibre=draw(st.none() | calibres),
        calibre_strict=draw(st.booleans()),
        type=draw(types),
    )


@dataclass(frozen=True)
class Ref:
    method: RecordType
    url: str
    key: str
    ts: datetime
    request_id: str
    calibre: int
    success: bool
    state: str
    hops: int
    body: bytes | None


def reference(q: Query, records: list[Ref]) -> Ref | None:
    """The standard's semantics, written as plainly as possible."""
    pool = [
        r
        for r in records
        if r.method == q.type.method and r.key == url_key(q.url) and (q.type.is_metadata or r.success)
    ]
    if isinstance(q, PageKey):
        hits = [r for r in pool if r.request_id == q.request_id and r.ts == q.timestamp]
        return hits[0] if hits else None
    if q.calibre is not None:
        pool = [r for r in pool if (r.calibre == q.calibre if q.calibre_strict else r.calibre >= q.calibre)]
    if isinstance(q, TimeAwarePageQuery):
        pool = [
            r
            for r in pool
            if (q.not_before is None or r.ts >= q.not_before) and (q.not_after is None or r.ts <= q.not_after)
        ]
        if q.timestamp is not None and pool:
            t = q.timestamp
            best = min(abs(r.ts - t) for r in pool)
            pool = [r for r in pool if abs(r.ts - t) == best]
    if not pool:
        return None
    return max(pool, key=lambda r: (r.ts, r.request_id))


def describe(result: Any) -> Any:
    if result is None:
        return None
    if isinstance(result, Page):
        return ("page", result.request_id, result.url, result.timestamp, len(result.responses), result.data)
    assert isinstance(result, AttemptMetadata)
    return ("meta", result.request_id, result.url, result.timestamp, result.state.value)


def expected(q: Query, r: Ref | None) -> Any:
    if r is None:
        return None
    if q.type.is_metadata:
        return ("meta", r.request_id, r.url, r.ts, r.state)
    return ("page", r.request_id, r.url, r.ts, r.hops, r.body)


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.location = self.new_location()
        self.records: list[Ref] = []
        self.keys: list[PageKey] = []
        self.index: WebIndex | None = None
        self.n = 0
        self.clock = DrivenClock()

    @initialize(
        max_rows=st.sampled_from([3, 50, 100_000]),
        max_age_s=st.sampled_from([60.0, 900.0]),
        compact_parts=st.sampled_from([0, 2, 5]),
    )
    def open(self, max_rows: int, max_age_s: float, compact_parts: int) -> None:
        self.policy = FlushPolicy(max_rows=max_rows, max_age_s=max_age_s, compact_parts=compact_parts)
        self.index = self.open_index(policy=self.policy)

    def open_index(self, **kwargs: Any) -> WebIndex:
        return WebIndex(self.location, clock=self.clock, **kwargs)

    def new_location(self) -> str:
        return tempfile.mkdtemp(prefix="wi-model-")

    def drop_location(self) -> None:
        shutil.rmtree(self.location, ignore_errors=True)

    def teardown(self) -> None:
        if self.index is not None:
            self.index.close()
        self.drop_location()

    def _store(self, items: list[tuple[Any, ...]], add: Any = None) -> None:
        assert self.index is not None
        keys = (add or self.index.insert_many)(items)
        for (method, url, ts, meta, data), key in zip(items, keys, strict=True):
            success = meta.state.value == "success"
            assert key.type == (RecordType(method) if success else RecordType(method).metadata)
            self.records.append(
                Ref(
                    RecordType(method),
                    url,
                    url_key(url),
                    ts,
                    key.request_id,
                    meta.fetcher_calibre,
                    success,
                    meta.state.value,
                    len(data),
                    data[-1].data if data else None,
                )
            )
            self.keys.append(key)

    @rule(
        url=urls,
        ts=times,
        method=st.sampled_from(["get", "get", "head"]),
        state=states,
        calibre=calibres,
        hops=st.integers(1, 3),
    )
    def insert(self, url: str, ts: datetime, method: str, state: str, calibre: int, hops: int) -> None:
        self.n += 1
        body = _body(self.n)
        self._store([attempt(url, ts, method=method, state=state, calibre=calibre, hops=hops, body=body)])

    @rule(batch=st.lists(st.tuples(urls, times, states, calibres), min_size=1, max_size=6))
    def insert_many(self, batch: list[tuple[str, datetime, str, int]]) -> None:
        items = []
        for url, ts, state, calibre in batch:
            self.n += 1
            items.append(attempt(url, ts, state=state, calibre=calibre, body=_body(self.n)))
        self._store(items)

    max_bulk_loads = 1_000  # fewer over S3: each load writes, compacts and indexes through the server
    bulk_loads = 0

    @precondition(lambda self: self.bulk_loads < self.max_bulk_loads)
    @rule(
        adds=st.lists(st.lists(st.tuples(urls, times, states, calibres), min_size=1, max_size=5), max_size=4),
        chunk=st.sampled_from([1, 3, 50_000]),
        commit_bytes=st.sampled_from([1, 4 << 30]),
        again=st.booleans(),
        merged=st.booleans(),
    )
    def bulk_load(
        self,
        adds: list[list[tuple[str, datetime, str, int]]],
        chunk: int,
        commit_bytes: int,
        again: bool,
        merged: bool,
    ) -> None:
        """A bulk load of several adds, spilled every ``chunk`` attempts and
        committed at once or (``commit_bytes=1``) after every spill; ``again``:
        with an importer's request ids, each add given twice, stored once;
        ``merged``: every partition merged as read (as one past ``GATHER_MAX``),
        spilled in batches of a row or two."""
        assert self.index is not None
        self.bulk_loads += 1
        with ExitStack() as patched:
            if merged:
                patch = patched.enter_context(pytest.MonkeyPatch.context())
                patch.setattr(load_module, "GATHER_MAX", 0)
                patch.setattr(load_module, "BATCH_BYTES", 600)
            self._bulk_load(adds, chunk, commit_bytes, again)

    def _bulk_load(
        self, adds: list[list[tuple[str, datetime, str, int]]], chunk: int, commit_bytes: int, again: bool
    ) -> None:
        assert self.index is not None
        with self.index.bulk_load(chunk=chunk, commit_bytes=commit_bytes) as load:
            for batch in adds:
                items = []
                for url, ts, state, calibre in batch:
                    self.n += 1
                    body = _body(self.n)
                    items.append(attempt(url, ts, state=state, calibre=calibre, body=body))
                if again:
                    ids = [str(uuid.uuid4()) for _ in items]
                    load.add(items, request_ids=ids)
                    self._store(items, lambda i, ids=ids: load.add(i, request_ids=ids))  # type: ignore[misc]
                else:
                    self._store(items, load.add)
        # Every partition the load wrote is compacted at its end: no part file of it left.
        loaded = {(domain_of(url), ts.year, ts.month) for batch in adds for url, ts, _, _ in batch}
        for row in self.index.stats().partitions:
            if row.type in ("get", "get-metadata") and (row.domain, row.year, row.month) in loaded:
                assert row.part_files == 0, row

    @rule(seconds=st.sampled_from([1.0, 4.0, 6.0, 61.0, 901.0]))
    def tick(self, seconds: float) -> None:
        """Time passes: buffered rows age (the next insert flushes what is due)
        and cached listings expire."""
        self.clock.advance(seconds)

    @rule()
    def flush(self) -> None:
        assert self.index is not None
        self.index.flush()

    @rule(min_parts=st.integers(1, 3))
    def compact(self, min_parts: int) -> None:
        assert self.index is not None
        self.index.compact(min_parts=min_parts)

    @rule()
    def reopen(self) -> None:
        assert self.index is not None
        self.index.close()
        self.index = self.open_index(policy=self.policy)

    @rule(
        data=st.data(),
        batch=st.lists(
            st.one_of(
                st.builds(
                    SimplePageQuery,
                    url=urls,
                    calibre=st.none() | calibres,
                    calibre_strict=st.booleans(),
                    type=types,
                ),
                time_aware(),
            ),
            min_size=1,
            max_size=12,
        ),
        readonly=st.booleans(),
        arrays=st.booleans(),
    )
    def query(self, data: st.DataObject, batch: list[Query], readonly: bool, arrays: bool) -> None:
        """A batch answered as the reference does, its candidates weighed one at a time or,
        as for a batch of many plans, as arrays (``_find_many``)."""
        assert self.index is not None
        many = _find_many.MANY_PLANS
        _find_many.MANY_PLANS = 0 if arrays else 1 << 30
        try:
            self._query(data, batch, readonly)
        finally:
            _find_many.MANY_PLANS = many

    def _query(self, data: st.DataObject, batch: list[Query], readonly: bool) -> None:
        assert self.index is not None
        if self.keys:
            picked = data.draw(st.lists(st.sampled_from(self.keys), max_size=4))
            batch = batch + picked
            # Page keys with the wrong type, url spelling or time must miss or match exactly.
            batch += [
                PageKey(
                    url=k.url,
                    timestamp=k.timestamp + timedelta(seconds=1),
                    request_id=k.request_id,
                    type=k.type,
                )
                for k in picked[:1]
            ]
            batch += [
                PageKey(url=k.url, timestamp=k.timestamp, request_id=k.request_id, type=k.type.metadata)
                for k in picked[:1]
            ]
        batch = batch + batch[:2]  # duplicates in one batch
        reader = self.open_index(read_only=True) if readonly else self.index
        try:
            got = reader.query(batch)
            present = reader.presence(batch)
        finally:
            if readonly:
                reader.close()
        for q, result, there in zip(batch, got, present, strict=True):
            want = expected(q, reference(q, self.records))
            assert describe(result) == want, q
            assert there == (want is not None), q

    @rule(flush_first=st.booleans())
    def counted(self, flush_first: bool) -> None:
        """``attempt_counts`` (buffered attempts included) and, once all is
        flushed, ``stats`` say what the model holds, whether a partition is
        counted from its month index or from its own files."""
        assert self.index is not None
        if flush_first:
            self.index.flush()
        want: Counter[tuple[str, int, int, str, str, int, str]] = Counter(
            (r.method.metadata.value, r.ts.year, r.ts.month, domain_of(r.url), r.state, r.calibre, "test")
            for r in self.records
        )
        got = Counter(
            {
                (c.type, c.year, c.month, c.domain, c.state, c.calibre, c.fetcher): c.attempts
                for c in self.index.attempt_counts()
            }
        )
        assert got == want
        if not flush_first:
            return
        rows: Counter[tuple[str, int, int, str]] = Counter()
        for r in self.records:
            where = (r.ts.year, r.ts.month, domain_of(r.url))
            rows[(r.method.metadata.value, *where)] += 1
            if r.success:
                rows[(r.method.value, *where)] += r.hops
        stats = self.index.stats()
        assert stats.buffered_attempts == 0
        assert {(p.type, p.year, p.month, p.domain): p.records for p in stats.partitions} == rows

    @precondition(lambda self: self.index is not None)
    @invariant()
    def verify_clean(self) -> None:
        if self.n % 5:
            return  # verify reads everything: every few steps is enough
        assert self.index is not None
        report = self.index.verify()
        assert report.ok, report.problems


MODEL_SETTINGS = settings(max_examples=60, stateful_step_count=30, deadline=None)
StoreMachine.TestCase.settings = MODEL_SETTINGS
TestStoreModel = StoreMachine.TestCase


@contextmanager
def _seeded_request_ids(seed: int) -> Iterator[None]:
    """Request ids from a seeded generator and a clock that ticks a millisecond
    a call, in place of the process's random bits and wall clock."""
    rng = random.Random(seed)
    tick = [1_722_470_400_000]

    def time_ns() -> int:
        tick[0] += 1
        return tick[0] * 1_000_000

    saved = (_validate.os, _validate.time, list(_validate._last), _validate._random, _validate._used)
    _validate.os = SimpleNamespace(urandom=rng.randbytes, register_at_fork=os.register_at_fork)  # type: ignore[assignment]
    _validate.time = SimpleNamespace(time_ns=time_ns)  # type: ignore[assignment]
    _validate._last[:] = [0, 0]
    _validate._random, _validate._used = "", 0
    try:
        yield
    finally:
        _validate.os, _validate.time = saved[0], saved[1]
        _validate._last[:] = saved[2]
        _validate._random, _validate._used = "", 0


CHURN_URLS = [f"https://www.example.com/p{n}" for n in range(6)]
CHURN_TIMES = [datetime(2024, 8, 1, tzinfo=UTC) + timedelta(hours=h) for h in range(0, 600, 7)]


class ChurnMachine(StoreMachine):
    """One partition compacted again and again, its month index checked against
    its files after every compaction.

    Each compaction rewrites ``example.com.parquet`` with a few more rows and
    another list of absorbed parts. Now and then the new file is exactly as
    long as the old one (about one compaction in 200 here): an index that
    trusted name and size kept describing the old file, and answered wrongly.
    """

    # Only churn and queries here (None: not rules in this machine).
    insert = insert_many = bulk_load = tick = reopen = flush = compact = None  # type: ignore[assignment]

    _ids: AbstractContextManager[None] | None = None

    @initialize(seed=st.integers(0, 2**32))
    def seed_request_ids(self, seed: int) -> None:
        # Whether a rewrite keeps its size depends on the request ids' bytes: ids
        # from a drawn seed make a failing example fail again when replayed.
        self._ids = _seeded_request_ids(seed)
        self._ids.__enter__()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            if self._ids is not None:
                self._ids.__exit__(None, None, None)

    @rule(
        batch=st.lists(
            st.tuples(st.sampled_from(CHURN_URLS), st.sampled_from(CHURN_TIMES), states, calibres),
            min_size=1,
            max_size=4,
        ),
        flushes=st.integers(1, 3),
    )
    def churn(self, batch: list[tuple[str, datetime, str, int]], flushes: int) -> None:
        assert self.index is not None
        for n in range(flushes):
            part = batch[n::flushes]
            if part:
                items = []
                for url, ts, state, calibre in part:
                    self.n += 1
                    items.append(attempt(url, ts, state=state, calibre=calibre, body=_body(self.n)))
                self._store(items)
                self.index.flush()
        self.index.compact()
        backend = self.index._store.backend
        for type in (RecordType.GET, RecordType.GET_METADATA):
            assert index_disagreement(backend, type, 2024, 8) is None


def test_store_model_churn() -> None:
    run_state_machine_as_test(ChurnMachine, settings=settings(MODEL_SETTINGS, max_examples=40))


class S3StoreMachine(StoreMachine):
    """The same machine on an S3 store (SeaweedFS), one fresh prefix per example."""

    max_bulk_loads = 1

    def new_location(self) -> str:
        return f"s3://{BUCKET}/model-{uuid.uuid4().hex[:12]}"

    def drop_location(self) -> None:
        pass  # the server's temp dir goes at the end of the session


def test_store_model_s3(seaweed: SeaweedFS) -> None:
    # Half the local examples: the S3 + PostgreSQL machine below runs 30 more on S3,
    # and each S3 step costs ~28 ms against SeaweedFS (CI time).
    run_state_machine_as_test(S3StoreMachine, settings=settings(MODEL_SETTINGS, max_examples=30))


class S3PostgresStoreMachine(S3StoreMachine):
    """On S3 with the shared PostgreSQL buffer (a fresh database per example),
    whose rows age by the same driven clock."""

    dsn = ""

    def __init__(self) -> None:
        super().__init__()
        self.dsn = _POSTGRES[0].new_database()

    def open_index(self, **kwargs: Any) -> WebIndex:
        buffer = PostgresBuffer(self.dsn, readonly=bool(kwargs.get("read_only")), clock=self.clock)
        return WebIndex(self.location, clock=self.clock, buffer=buffer, **kwargs)


_POSTGRES: list[Postgres] = []


def test_store_model_s3_postgres(seaweed: SeaweedFS, postgres: Postgres) -> None:
    _POSTGRES[:] = [postgres]
    run_state_machine_as_test(S3PostgresStoreMachine, settings=settings(MODEL_SETTINGS, max_examples=30))
