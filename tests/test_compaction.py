"""A whole-store ``compact()``, and a flush's compaction of the partitions it
filled, work from month listings taken once: a month folder is scanned as often
whatever the month's domains, and a partition that changed after the listing
(compacted by another process, given a new part, a dead flush finished) is still
compacted right, losing nothing."""

from __future__ import annotations

import functools
import json
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex, _on_cluster
from web_index.models import PageKey, RecordType
from web_index.storage import MethodPartition

MONTH = f"{T0.year:04d}/{T0.month:02d}"


def _two_parts_each(index: WebIndex, domains: list[str]) -> list[PageKey]:
    keys: list[PageKey] = []
    for n in range(2):
        keys += index.insert_many([attempt(f"https://{d}/p{n}", T0 + timedelta(minutes=n)) for d in domains])
        index.flush()
    return keys


def _parquet_names(store: Path, type: str = "get") -> list[str]:
    return sorted(p.name for p in (store / type / MONTH).glob("*.parquet"))


def _scans(tmp_path: Path, domains: int, monkeypatch: pytest.MonkeyPatch, by: str) -> Counter[str]:
    """The scans of each folder by a ``compact()`` of ``domains`` domains of two parts each, or
    (``by="flush"``) by the second of two flushes of them that compacts them all, or
    (``by="cluster"``) by a ``compact()`` whose partitions are compacted by the task a Dask
    worker runs (here, in this process: a worker's scans could not be counted)."""
    store = tmp_path / f"{by}{domains}"
    domain_names = [f"d{n}.example" for n in range(domains)]
    with WebIndex(store, policy=FlushPolicy(compact_parts=2 if by == "flush" else 0)) as index:
        index.insert_many([attempt(f"https://{d}/p0", T0) for d in domain_names])
        index.flush()
        index.insert_many([attempt(f"https://{d}/p1", T0 + timedelta(minutes=1)) for d in domain_names])
        backend = type(index._store.backend)  # the worker's store's too
        scans: Counter[str] = Counter()
        original = backend.list_files

        def counted(self: Any, folder: str, prefix: str = "") -> Any:
            scans[folder] += 1
            return original(self, folder, prefix)

        task = functools.partial(_on_cluster._compact, str(store), None, 1)
        try:
            with monkeypatch.context() as m:
                m.setattr(backend, "list_files", counted)
                if by == "flush":
                    assert index.flush() == domains
                else:
                    index.flush()
                    scans.clear()
                    run = functools.partial(map, task) if by == "cluster" else None
                    assert index._store.compact(run=run) == 2 * domains
        finally:
            if by == "cluster":  # the task's store, kept open for the worker's life
                for opened in _on_cluster._opened_stores.values():
                    opened.close()
                _on_cluster._opened_stores.clear()
        assert all(len(_parquet_names(store, t)) == domains for t in ("get", "get-metadata"))
        assert len(list((store / "_captures" / "get" / MONTH).glob("*.cdxj.zst"))) == domains
        assert not [n for n in index.verify().notes if "capture" in n.message]
    return scans


@pytest.mark.parametrize("by", ["compact", "flush", "cluster"])
def test_a_month_folder_is_scanned_as_often_whatever_its_domains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    few, many = _scans(tmp_path, 3, monkeypatch, by), _scans(tmp_path, 12, monkeypatch, by)
    assert few and few == many, (few, many)


def test_a_partition_changed_after_the_listing_is_compacted_right(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with WebIndex(store) as index, WebIndex(store) as other:
        keys = _two_parts_each(index, ["a.example", "b.example"])
        listing = index._store._partitions_with_parts

        def then_another_process_writes(**options: Any) -> Any:
            listed = listing(**options)
            # As another process would, between the listing and its use: a.example compacted
            # (the parts listed are gone), b.example given a third part (not listed).
            other._store.compact_partition(MethodPartition(RecordType.GET, T0.year, T0.month, "a.example"))
            keys.append(other.insert(*attempt("https://b.example/p2", T0 + timedelta(minutes=2))))
            other.flush()
            return listed

        index._store._partitions_with_parts = then_another_process_writes  # type: ignore[method-assign]
        index.compact()
        assert all(page is not None for page in index.query(keys))
        found = [
            json.loads(line.split(" ", 2)[2])["url"]
            for line in index.captures("https://b.example/", match="prefix")
        ]
        assert sorted(found) == [f"https://b.example/p{n}" for n in range(3)]
        assert index.verify().ok
        del index._store._partitions_with_parts
        index.compact()  # the part written after the listing, compacted now
        assert _parquet_names(store) == ["a.example.parquet", "b.example.parquet"]
        assert all(page is not None for page in index.query(keys))


def test_parts_of_a_flush_that_died_are_compacted_in(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with WebIndex(store) as index:
        keys = _two_parts_each(index, ["a.example"])
        keys.append(index.insert(*attempt("https://a.example/p2", T0 + timedelta(minutes=2))))
        mp = MethodPartition(RecordType.GET, T0.year, T0.month, "a.example")
        # A flusher that claimed the buffered attempt and died before writing it.
        assert index._store.buffer.claim(mp, "00000000-0000-4000-8000-000000000000", 100)
        assert index.compact() == 2
        # The claim's part was written after compact()'s listing: compacted in all the same.
        assert _parquet_names(store) == ["a.example.parquet"]
        assert _parquet_names(store, "get-metadata") == ["a.example.parquet"]
        assert all(page is not None for page in index.query(keys))
        assert index.verify().ok


def test_a_compaction_that_died_after_the_listing_loses_nothing(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with WebIndex(store) as index, WebIndex(store) as other:
        keys = _two_parts_each(index, ["a.example"])
        mp = MethodPartition(RecordType.GET, T0.year, T0.month, "a.example")
        listing = index._store._partitions_with_parts

        def then_another_compactor_dies(**options: Any) -> Any:
            listed = listing(**options)
            listed_names = {f.path for files in listed[mp].values() for f in files}
            # Another process flushes a part the listing has not seen, compacts, and dies after
            # deleting only that part: its record is now in the compacted file alone.
            keys.append(other.insert(*attempt("https://a.example/p2", T0 + timedelta(minutes=2))))
            other.flush()
            backend = other._store.backend
            delete = backend.delete
            # (Its deletes of the parts listed never happen: as if it died after the first.)
            backend.delete = lambda path: None if path in listed_names else delete(path)  # type: ignore[method-assign]
            other._store.compact_partition(mp)
            del backend.delete
            assert len(_parquet_names(store)) == 3  # the compacted file and the two parts listed
            return listed

        index._store._partitions_with_parts = then_another_compactor_dies  # type: ignore[method-assign]
        index.compact()
        assert all(page is not None for page in index.query(keys)), "a record of the dead compaction lost"
        assert _parquet_names(store) == ["a.example.parquet"]
        assert index.verify().ok
