"""A bulk load's commit onto an object store (``storage/_load_remote.py``, on a real SeaweedFS):
several pages' partitions written side by side, each page's data before its metadata, and a
commit cut short leaving each partition whole."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from tests.factories import T0, attempt
from tests.servers import SeaweedFS
from web_index import WebIndex
from web_index.models import RecordType, SimplePageQuery
from web_index.storage.backends import S3Backend


def _items(n: int) -> list[Any]:
    return [
        attempt(
            f"https://s{i % 6}.example{i % 6}.org/p{i}",
            T0 + timedelta(days=40 * (i % 2), hours=i),
            method="head" if i % 5 == 0 else "get",
        )
        for i in range(n)
    ]


class _Puts:
    """Every store file's PUT (capture indexes and month indexes aside), in the order they
    completed; how many were in flight at most; the ``fail``-th of a ``get`` file raising as a
    disk would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: int = 0) -> None:
        self.done: list[str] = []
        self.most = 0
        self._now = self._calls = 0
        self._fail = fail
        self._lock = threading.Lock()
        real = S3Backend.put

        def put(backend: S3Backend, path: str, data: Any, **kw: Any) -> Any:
            if path.startswith("_"):
                return real(backend, path, data, **kw)
            with self._lock:
                self._calls += path.startswith("get/")
                failing = path.startswith("get/") and self._calls == self._fail
                self._now += 1
                self.most = max(self.most, self._now)
            try:
                time.sleep(0.02)  # long enough for the commit's other threads to send theirs
                if failing:
                    raise OSError(5, "Input/output error")
                etag = real(backend, path, data, **kw)
            finally:
                with self._lock:
                    self._now -= 1
            with self._lock:
                self.done.append(path)
            return etag

        monkeypatch.setattr(S3Backend, "put", put)


def _present(index: WebIndex, items: list[Any]) -> list[bool]:
    return index.presence([SimplePageQuery(url=item[1], type=_type(item)) for item in items])


def _type(item: Any) -> RecordType:
    return RecordType.HEAD if item[0] == "head" else RecordType.GET


def test_pages_are_written_side_by_side_each_data_before_its_metadata(
    seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    puts = _Puts(monkeypatch)
    items = _items(48)
    with WebIndex(seaweed.new_store()) as index:
        with index.bulk_load() as load:
            load.add(items)
        assert _present(index, items) == [True] * len(items)
        assert index.verify().ok
    assert puts.most > 1  # several partitions at a time
    for i, path in enumerate(puts.done):
        kind, rest = path.split("/", 1)
        if kind.endswith("-metadata"):  # its page's data, if any, was sent before it
            data = f"{kind.removesuffix('-metadata')}/{rest}"
            assert data not in puts.done[i:]


def test_a_commit_cut_short_leaves_whole_partitions(
    seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    puts = _Puts(monkeypatch, fail=3)
    items = _items(48)
    with WebIndex(seaweed.new_store()) as index:
        with pytest.raises(OSError, match="Input/output"), index.bulk_load() as load:
            load.add(items)
        assert load.stored == 0  # the commit did not finish
        present = _present(index, items)
        assert 0 < sum(present) < len(items)  # the partitions sent before the fault, and beside it
        assert index.verify().ok  # each of them whole
        monkeypatch.undo()
        with index.bulk_load() as again:  # the load run again stores the rest
            again.add([item for item, there in zip(items, present, strict=True) if not there])
        assert _present(index, items) == [True] * len(items)
        assert index.verify().ok
    assert len(puts.done) >= 4
