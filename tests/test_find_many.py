"""A batch's winners weighed as arrays (``query/_find_many``) are the winners weighed one
at a time (``query/_find``): the same candidate, found in the same rows of the same file,
for every query kind, calibre rule and time window, over a store whose records are in
keys files, in partitions the month index does not cover and in the buffer."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import attempt
from web_index import FlushPolicy, WebIndex
from web_index.models import PageKey, Query, RecordType, SimplePageQuery, TimeAwarePageQuery
from web_index.query import _find_many
from web_index.query._find import Found, find_in_buffer, find_in_files
from web_index.query._find_many import find_many, rid_bytes
from web_index.query._plan import Candidate, Plan, plan
from web_index.storage import Store, open_month_index

URLS = [
    f"https://{host}/p{n}" for host in ("a.example.com", "b.example.org", "c.example.net") for n in range(3)
]
LATER = URLS[:3]  # flushed and buffered after the compaction: the other domains stay indexed
START = datetime(2024, 6, 28, tzinfo=UTC)
# Instants over four months, many a URL in each, some equal (ties broken by request id).
TIMES = [START + timedelta(days=d, hours=h) for d in (0, 3, 9, 33, 40, 41, 70, 95) for h in (0, 0, 5)]


def _items(rng: random.Random, n: int, urls: list[str]) -> list[Any]:
    return [
        attempt(
            rng.choice(urls),
            rng.choice(TIMES),
            state=rng.choice(["success", "success", "success", "timeout"]),
            calibre=rng.choice([0, 10, 30, 60]),
            hops=rng.choice([1, 1, 2]),
        )
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, list[PageKey]]]:
    """Compacted months with keys files, a part file the month index does not cover, and
    buffered records."""
    rng = random.Random(5)
    root = tmp_path_factory.mktemp("many")
    index = WebIndex(root / "store", policy=FlushPolicy(max_rows=10**6, max_age_s=10**6))
    keys = list(index.insert_many(_items(rng, 240, URLS)))
    index.flush()
    index.compact()
    keys += index.insert_many(_items(rng, 40, LATER))
    index.flush()  # part files beside the compacted ones: those partitions are read
    keys += index.insert_many(_items(rng, 30, URLS))  # left in the buffer
    store = index._store
    assert any(open_month_index(store.backend, RecordType.GET, 2024, m) for m in (6, 7, 8, 9))
    yield store, keys
    index.close()


def _queries(keys: list[PageKey]) -> st.SearchStrategy[Query]:
    times = st.sampled_from(TIMES) | st.sampled_from([t + timedelta(minutes=1) for t in TIMES])
    types = st.sampled_from([RecordType.GET, RecordType.GET_METADATA])
    simple = st.builds(
        SimplePageQuery,
        url=st.sampled_from(URLS),
        calibre=st.none() | st.sampled_from([0, 10, 30, 60]),
        calibre_strict=st.booleans(),
        type=types,
    )

    @st.composite
    def timed(draw: st.DrawFn) -> TimeAwarePageQuery:
        lo, hi = sorted([draw(times), draw(times)])
        return TimeAwarePageQuery(
            url=draw(st.sampled_from(URLS)),
            not_before=draw(st.none() | st.just(lo)),
            not_after=draw(st.none() | st.just(hi)),
            timestamp=draw(st.none() | times),
            calibre=draw(st.none() | st.sampled_from([0, 10, 30, 60])),
            calibre_strict=draw(st.booleans()),
            type=draw(types),
        )

    @st.composite
    def keyed(draw: st.DrawFn) -> PageKey:
        key = draw(st.sampled_from(keys))
        rid = draw(st.sampled_from([key.request_id, key.request_id.upper(), "not-an-id"]))
        return PageKey(url=key.url, timestamp=key.timestamp, request_id=rid, type=key.type)

    return st.one_of(simple, timed(), keyed())


def _weighed(store: Store, plans: list[Plan], arrays: bool) -> dict[int, Any]:
    found: dict[int, Found] = {}
    for type in {p.type for p in plans}:
        idxs = [i for i, p in enumerate(plans) if p.type is type]
        find_in_buffer(store, type, [plans[i] for i in idxs], idxs, found)
        if arrays:
            assert find_many(store, type, plans, idxs, found, set())
        else:
            find_in_files(store, type, plans, idxs, found, set())
    return {
        i: (
            f.candidate,
            None
            if f.source is None
            else (f.source.path, f.source.rows, f.source.from_index, f.source.version),
        )
        for i, f in found.items()
    }


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_winners_weighed_as_arrays_are_those_weighed_one_at_a_time(
    store: tuple[Store, list[PageKey]], data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    s, keys = store
    queries = data.draw(st.lists(_queries(keys), min_size=1, max_size=40))
    plans = [plan(q) for q in queries]
    monkeypatch.setattr(_find_many, "MANY_PLANS", 0)
    assert _weighed(s, plans, arrays=True) == _weighed(s, plans, arrays=False)


def test_the_store_gives_every_kind_of_candidate(store: tuple[Store, list[PageKey]]) -> None:
    """The property above weighs keys file hits, partitions read and buffered records alike,
    and months with many candidates a URL."""
    s, _keys = store
    plans = [plan(SimplePageQuery(url=u)) for u in URLS]
    got = _weighed(s, plans, arrays=False)
    sources = {src is None or src[2] for _c, src in got.values()}
    assert len(got) == len(URLS) and sources >= {True}
    everything = [plan(TimeAwarePageQuery(url=u, timestamp=t)) for u in URLS for t in TIMES]
    kinds = {
        "buffer" if src is None else "index" if src[2] else "file"
        for _c, src in _weighed(s, everything, False).values()
    }
    assert kinds == {"buffer", "index", "file"}


def test_a_request_id_not_in_canonical_form_is_weighed_as_text(
    store: tuple[Store, list[PageKey]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hand-made file's request id orders as text, not as bytes: a batch with such a
    candidate is left to ``find_in_files``, ``found`` as it was."""
    assert rid_bytes("0190f1e2-aaaa-7bbb-8ccc-0123456789ab") == bytes.fromhex(
        "0190f1e2aaaa7bbb8ccc0123456789ab"
    )
    for text in (
        "0190F1E2-AAAA-7BBB-8CCC-0123456789AB",
        "{0190f1e2-aaaa-7bbb-8ccc-0123456789ab}",
        "x" * 36,
        "",
    ):
        assert rid_bytes(text) is None
    s, _keys = store
    monkeypatch.setattr(_find_many, "MANY_PLANS", 0)
    plans = [plan(SimplePageQuery(url=u)) for u in URLS]
    odd = Found(Candidate(0, "0190F1E2-AAAA-7BBB-8CCC-0123456789AB", 10), None)
    found = {0: odd}
    no_index: set[int] = set()
    assert not find_many(s, RecordType.GET, plans, list(range(len(plans))), found, no_index)
    assert found == {0: odd} and not no_index
    assert find_many(s, RecordType.GET, plans, list(range(len(plans))), {}, no_index)
    monkeypatch.setattr(_find_many, "MANY_PLANS", len(plans) + 1)
    assert not find_many(s, RecordType.GET, plans, list(range(len(plans))), {}, no_index)


def test_a_damaged_keys_file_is_read_around(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A keys file that fails its check: the month's Parquet index answers, as it does
    for ``find_in_files``, and the winners are the same."""
    rng = random.Random(9)
    with WebIndex(tmp_path / "s", policy=FlushPolicy(max_rows=10**6, max_age_s=10**6)) as index:
        index.insert_many(_items(rng, 200, URLS))
        index.flush()
        index.compact()
    keys = sorted((tmp_path / "s" / "_index" / "get").rglob("*.keys"))
    assert keys
    for path in keys:  # a byte of the last chunk of values flipped
        data = bytearray(path.read_bytes())
        data[-3] ^= 0xFF
        path.write_bytes(bytes(data))
    monkeypatch.setattr(_find_many, "MANY_PLANS", 0)
    plans = [plan(TimeAwarePageQuery(url=u, timestamp=t)) for u in URLS for t in TIMES]
    with WebIndex(tmp_path / "s", read_only=True) as index:
        arrays = _weighed(index._store, plans, arrays=True)
    assert "keys file damaged" in caplog.text
    with WebIndex(tmp_path / "s", read_only=True) as index:
        one = _weighed(index._store, plans, arrays=False)
    assert arrays == one and len(arrays) == len(plans)
