"""Model-based test: the store against a tiny in-memory reference.

Random sequences of inserts, flushes, compactions, reopenings and query
batches; after every batch, every query kind, calibre rule and time window
must answer exactly as the reference does.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

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
from tests.servers import BUCKET, SeaweedFS
from web_index import FlushPolicy, WebIndex
from web_index.models import (
    AttemptMetadata,
    Page,
    PageKey,
    Query,
    RecordType,
    SimplePageQuery,
    TimeAwarePageQuery,
)
from web_index.urls import url_key

# A few resources, each spelled several ways that must meet in the store.
URLS = [
    ["https://a.example.com/x", "HTTPS://A.Example.COM:443/x#frag", "https://a.example.com/%78"],
    ["https://b.example.com/Y?q=1", "https://B.EXAMPLE.COM/Y?q=1#z"],
    ["http://c.example.org", "http://c.example.org:80/"],
    ["http://127.0.0.1:8080/p"],
    ["https://d.test.co.uk/a b", "https://d.test.co.uk/a%20b"],
]
# Instants around month boundaries, with repeats so that exact ties happen.
BASE = datetime(2024, 7, 31, 23, 0, tzinfo=UTC)
TIMES = [
    BASE + timedelta(minutes=m) for m in (0, 30, 59, 60, 61, 90, 60 * 24 * 31, 60 * 24 * 31 + 1, 60 * 24 * 62)
]

urls = st.sampled_from(URLS).flatmap(st.sampled_from)
times = st.sampled_from(TIMES)
calibres = st.sampled_from([0, 10, 30, 60, 99])
states = st.sampled_from(["success", "success", "success", "timeout", "blocked", "error"])
types = st.sampled_from(list(RecordType))
maybe_time = st.none() | times | st.sampled_from([t + timedelta(seconds=1) for t in TIMES])


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

    @initialize(max_rows=st.sampled_from([3, 50, 100_000]), compact_parts=st.sampled_from([0, 2, 5]))
    def open(self, max_rows: int, compact_parts: int) -> None:
        self.policy = FlushPolicy(max_rows=max_rows, compact_parts=compact_parts)
        self.index = self.open_index(policy=self.policy)

    def open_index(self, **kwargs: Any) -> WebIndex:
        return WebIndex(self.location, **kwargs)

    def new_location(self) -> str:
        return tempfile.mkdtemp(prefix="wi-model-")

    def drop_location(self) -> None:
        shutil.rmtree(self.location, ignore_errors=True)

    def teardown(self) -> None:
        if self.index is not None:
            self.index.close()
        self.drop_location()

    def _store(self, items: list[tuple[Any, ...]]) -> None:
        assert self.index is not None
        keys = self.index.insert_many(items)
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
        body = f"body {self.n}".encode()
        self._store([attempt(url, ts, method=method, state=state, calibre=calibre, hops=hops, body=body)])

    @rule(batch=st.lists(st.tuples(urls, times, states, calibres), min_size=1, max_size=6))
    def insert_many(self, batch: list[tuple[str, datetime, str, int]]) -> None:
        items = []
        for url, ts, state, calibre in batch:
            self.n += 1
            items.append(attempt(url, ts, state=state, calibre=calibre, body=f"body {self.n}".encode()))
        self._store(items)

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
    )
    def query(self, data: st.DataObject, batch: list[Query], readonly: bool) -> None:
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

    @precondition(lambda self: self.index is not None)
    @invariant()
    def verify_clean(self) -> None:
        if self.n % 5:
            return  # verify reads everything: every few steps is enough
        assert self.index is not None
        report = self.index.verify()
        assert report.ok, report.problems


MODEL_SETTINGS = settings(max_examples=60, stateful_step_count=25, deadline=None)
StoreMachine.TestCase.settings = MODEL_SETTINGS
TestStoreModel = StoreMachine.TestCase


class S3StoreMachine(StoreMachine):
    """The same machine on an S3 store (SeaweedFS), one fresh prefix per example."""

    def new_location(self) -> str:
        return f"s3://{BUCKET}/model-{uuid.uuid4().hex[:12]}"

    def drop_location(self) -> None:
        pass  # the server's temp dir goes at the end of the session


def test_store_model_s3(seaweed: SeaweedFS) -> None:
    run_state_machine_as_test(S3StoreMachine, settings=MODEL_SETTINGS)
