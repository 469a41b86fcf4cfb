"""A big batch gives back what Arrow's allocator kept from decoding it, on every
thread that decoded (mimalloc keeps a heap per thread); a small one does not pay
for it. Observed by wrapping the real pool: the release itself is mimalloc's."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex
from web_index.models import SimplePageQuery
from web_index.query import _engine, _pool


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


def _released_by(watched: _Watched, threads: int) -> set[str]:
    deadline = time.monotonic() + 5
    while len(set(watched.released)) < threads and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # and no more than that
    return set(watched.released)


def test_a_batch_of_a_thousand_queries_is_given_back_by_every_thread_that_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index = WebIndex(tmp_path / "store", policy=FlushPolicy(compact_parts=0, max_age_s=10**6))
    urls = [f"https://shop.example.com/p{i}" for i in range(_engine._RELEASE_AFTER)]
    index.insert_many(attempt(url, T0, body=b"<p>%d</p>" % i * 200) for i, url in enumerate(urls))
    index.flush()
    queries = [SimplePageQuery(url=u) for u in urls]
    watched = _Watched(pa.default_memory_pool())
    monkeypatch.setattr(pa, "default_memory_pool", lambda: watched)

    small = index.query(queries[:-1])
    assert all(p is not None for p in small)
    time.sleep(0.2)
    assert watched.released == []

    pages = index.query(queries)
    assert [p.url for p in pages] == urls  # type: ignore[union-attr]
    readers = {f"{name}_{i}" for pool in _pool._POOLS.values() for name, i in _names(pool)}
    released = _released_by(watched, 1 + len(readers))
    assert released == {threading.current_thread().name} | readers
    # One release a thread: no reader thread took two of the tasks.
    assert len(watched.released) == len(released)
    index.close()


def _names(pool: Any) -> list[tuple[str, int]]:
    return [(pool._thread_name_prefix, i) for i in range(pool._max_workers)]
