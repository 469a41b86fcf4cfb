"""A big batch gives back what Arrow's allocator kept from decoding it, on every
thread that decoded (mimalloc keeps a heap per thread); a small one, or one that
ends while another is answered, does not. Observed by wrapping the real pool: the
release itself is the allocator's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex
from web_index.models import SimplePageQuery
from web_index.query import _pool


class _Watched:
    """The default pool, noting which threads released it."""

    def __init__(self, pool: pa.MemoryPool) -> None:
        self._pool = pool
        self.released: list[str] = []
        self._lock = threading.Lock()

    def release_unused(self) -> None:
        with self._lock:
            self.released.append(threading.current_thread().name)
        self._pool.release_unused()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Watched]:
    # Pools of this test's own, whose threads all meet their barrier even on a
    # loaded machine (the 0.1 s of a server is for a pool busy elsewhere).
    monkeypatch.setattr(_pool, "_POOLS", {})
    monkeypatch.setattr(_pool, "_BARRIER_S", 10.0)
    spy = _Watched(pa.default_memory_pool())
    monkeypatch.setattr(pa, "default_memory_pool", lambda: spy)
    yield spy
    for readers in _pool._POOLS.values():
        readers.shutdown()


def _released_by(watched: _Watched, threads: int) -> list[str]:
    deadline = time.monotonic() + 20
    while len(watched.released) < threads and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # and no more than that
    return sorted(watched.released)


def _readers() -> list[str]:
    pools = _pool._POOLS.values()
    return sorted(f"{pool._thread_name_prefix}_{i}" for pool in pools for i in range(pool._max_workers))


def test_a_big_batch_is_given_back_by_this_thread_and_every_reader_thread(
    tmp_path: Path, watched: _Watched
) -> None:
    index = WebIndex(tmp_path / "store", policy=FlushPolicy(compact_parts=0, max_age_s=10**6))
    try:
        urls = [f"https://shop.example.com/p{i}" for i in range(_pool._RELEASE_AFTER)]
        index.insert_many(attempt(url, T0, body=b"<p>%d</p>" % i * 200) for i, url in enumerate(urls))
        index.flush()
        queries = [SimplePageQuery(url=u) for u in urls]

        # One short of the line, even asked twice over: distinct queries count.
        small = index.query(queries[:-1] * 2)
        assert all(p is not None for p in small)
        time.sleep(0.2)
        assert watched.released == []

        pages = index.query(queries)
        assert [p.url for p in pages] == urls  # type: ignore[union-attr]
        readers = _readers()
        assert readers  # the batch's files were read on them
        # One release a thread: no reader thread took two of the tasks.
        assert _released_by(watched, 1 + len(readers)) == sorted([threading.current_thread().name, *readers])
    finally:
        index.close()


def test_no_release_while_another_batch_is_answered_or_another_release_is_under_way(
    tmp_path: Path, watched: _Watched
) -> None:
    with _pool.answering(1):  # a batch still being answered, on another thread say
        with _pool.answering(_pool._RELEASE_AFTER):
            pass
        time.sleep(0.2)
        assert watched.released == []
    assert watched.released == []  # the small one ended last: nothing to give back

    with WebIndex(tmp_path / "store") as index:
        _pool.reader_pool(index._store)
    with _pool._RELEASING:  # a release under way: this one gives back its own thread's only
        _pool.release_memory()
        time.sleep(0.2)
        assert watched.released == [threading.current_thread().name]
    watched.released.clear()
    with _pool.answering(_pool._RELEASE_AFTER):
        pass
    everyone = sorted([threading.current_thread().name, *_readers()])
    assert _released_by(watched, len(everyone)) == everyone


def test_work_in_chunks_keeps_its_order_and_runs_inline_in_a_reader_thread(tmp_path: Path) -> None:
    """``in_chunks`` cuts work over the reader threads and this one, in order; asked from a
    reader thread (a batch answered there) it does the work there, never waiting on a run
    queued behind its own thread."""
    with WebIndex(tmp_path / "s") as index:
        store = index._store
        pool = _pool.reader_pool(store)
        seen: list[tuple[str, int]] = []

        def work(items: Any) -> list[int]:
            seen.extend((threading.current_thread().name, n) for n in items)
            return [n * n for n in items]

        items = list(range(pool._max_workers * 10))
        assert _pool.in_chunks(store, work, items, least=3) == [n * n for n in items]
        if pool._max_workers > 1:
            assert len({name for name, _n in seen}) > 1
        assert _pool.in_chunks(store, work, items[:5], least=3) == [n * n for n in items[:5]]
        seen.clear()
        inner = pool.submit(_pool.in_chunks, store, work, items, least=1).result(timeout=10)
        assert inner == [n * n for n in items]
        assert len({name for name, _n in seen}) == 1
