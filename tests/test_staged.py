"""A cluster import's staged rows made visible on an object store (``storage/_staged.py``, on
a real SeaweedFS): a partition that had no files becomes its compacted file in one write, its
payloads shared and its capture index written from the bytes sent; one that has files by then
gets a part file; a task repeated changes no record. Staged as the cluster stages on an object
store (a file a record type, ``_staging``) and a file a partition. Each store is compared with
one that bulk loaded the same records."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.factories import T0, attempt
from tests.servers import SeaweedFS
from tests.test_s3 import _reads_back
from web_index import WebIndex
from web_index._bulk_load import BulkLoad
from web_index.models import RecordType
from web_index.storage import MethodPartition, Partition, Piece, _staged
from web_index.storage._files import SUPERSEDED_KEY

Item = tuple[Any, ...]


def _items(seed: int, n: int) -> list[Item]:
    """GET attempts over two domains and two months, a few payloads served again and again
    (stored once: references), HEADs and failures among them."""
    out = []
    for i in range(n):
        k = seed * 1000 + i
        method = "head" if k % 9 == 0 else "get"
        state = "timeout" if k % 11 == 0 else "success"
        body = b"same page " * (20 * (k % 3)) if method == "get" else b""
        out.append(
            attempt(
                f"https://h{k % 2}.example.com/p{k % 7}",
                T0 + timedelta(days=35 * (k % 2), hours=k % 50),
                method=method,
                state=state,
                body=body,
            )
        )
    return out


def _stage(
    index: WebIndex, folder: str, batches: Sequence[tuple[list[Item], list[str]]], *, packed: bool = True
) -> dict[Partition, list[Piece]]:
    """Each batch staged as a worker stages one WARC file's records."""
    staged: dict[Partition, list[Piece]] = {}
    for n, (items, ids) in enumerate(batches):
        with BulkLoad(index._store, index.limits, stage=f"{folder}/{n}", packed=packed) as load:
            load.add(items, request_ids=ids)
        for partition, piece in load.staged:
            staged.setdefault(partition, []).append(piece)
    return staged


def _commit(index: WebIndex, staged: dict[Partition, list[Piece]]) -> set[bool]:
    """What ``_import_cluster`` has its workers do, here: every partition created, data first,
    in two tasks a wave (each staged file read once a task)."""
    store = index._store
    months = store.sharing_months()
    said: set[bool] = set()
    for metadata in (False, True):
        wave = sorted((p, pieces) for p, pieces in staged.items() if p.type.is_metadata is metadata)
        for task in (wave[: len(wave) // 2], wave[len(wave) // 2 :]):
            said.update(store.create_staged(task, months))
    written = {MethodPartition(p.type.method, p.year, p.month, p.domain) for p in staged}
    store.forget_listings(written)
    store.compact(written if True in said else [], index_also=written)
    return said


def _records(index: WebIndex) -> dict[RecordType, list[dict[str, Any]]]:
    return {t: sorted((r.to_dict() for r in index.scan(t)), key=str) for t in RecordType}


def _compacted(index: WebIndex, types: Sequence[RecordType] = tuple(RecordType)) -> list[Any]:
    """The compacted files of the store's ``types``, opened."""
    store = index._store
    return [
        store.backend.open_parquet(f.path)
        for type in types
        for year, month in store.months(type)
        for files in store.month_files(type, year, month).values()
        for f in files
        if f.part is None
    ]


def _compacted_footers(index: WebIndex) -> list[dict[bytes, bytes]]:
    return [dict(handle.metadata.metadata or {}) for handle in _compacted(index)]


def _references(index: WebIndex) -> int:
    """Rows of the store's compacted ``get`` files whose payload is another row's."""
    refs = [h.read(columns=["payload_ref"]).column(0) for h in _compacted(index, [RecordType.GET])]
    return sum(len(r) - r.null_count for r in refs)


@pytest.mark.parametrize(("streamed", "packed"), [(False, True), (True, True), (False, False)])
def test_a_new_partitions_staged_rows_become_its_compacted_file_in_one_write(
    seaweed: SeaweedFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: bool, packed: bool
) -> None:
    """Held as a table (most partitions), or merged as read (past ``GATHER_MAX``: each
    staged file's pieces then read a range at a time)."""
    if streamed:
        monkeypatch.setattr(_staged, "GATHER_MAX", 0)
    read_back = _reads_back(monkeypatch)
    first, second = _items(1, 40), _items(2, 40)
    ids = [str(uuid.uuid4()) for _ in range(80)]
    # The second file holds ten of the first's records again: each is stored once.
    batches = [(first, ids[:40]), (first[30:] + second, ids[30:40] + ids[40:])]
    with WebIndex(seaweed.new_store()) as s3, WebIndex(tmp_path / "local") as local:
        staged = _stage(s3, "_tmp/import", batches, packed=packed)
        assert any(len(pieces) > 1 for pieces in staged.values())
        files = {piece.path for pieces in staged.values() for piece in pieces}
        assert len(files) == (2 * 4 if packed else len([p for ps in staged.values() for p in ps]))
        assert _commit(s3, staged) == {False}
        with local.bulk_load() as load:
            for items, rids in batches:
                load.add(items, request_ids=rids)
        assert read_back == []  # every capture index written from the bytes sent
        assert _records(s3) == _records(local)
        for url in ("https://h0.example.com/", "https://h1.example.com/p3"):
            assert list(s3.captures(url, match="domain")) == list(local.captures(url, match="domain"))
        stats = s3.stats().partitions
        assert stats and all(p.compacted and p.part_files == 0 for p in stats)
        footers = _compacted_footers(s3)
        assert len(footers) == len(stats) and not any(
            SUPERSEDED_KEY in f for f in footers
        )  # absorbed nothing
        assert s3.verify().ok
        assert 0 < _references(s3) == _references(local)  # payloads stored once, on both sides

        # A task repeated: packed, its pieces are still there and it writes a part file of
        # the same records; else the first run removed them and it finds its work done.
        before = _records(s3)
        partition, pieces = next(iter(sorted(staged.items())))
        assert s3._store.create_staged([(partition, pieces)], ()) == [True]
        assert _records(s3) == before
        part_files = sum(p.part_files for p in s3.stats().partitions)
        assert part_files == (1 if packed else 0)
        s3.compact()  # as the import does after, which the part file tells
        assert _records(s3) == before and s3.verify().ok


def test_a_partition_compacted_by_another_meanwhile_gets_a_part_file(
    seaweed: SeaweedFS, tmp_path: Path
) -> None:
    first, second = _items(3, 30), _items(4, 30)
    ids = [str(uuid.uuid4()) for _ in range(60)]
    with WebIndex(seaweed.new_store()) as s3, WebIndex(tmp_path / "local") as local:
        staged = _stage(s3, "_tmp/import", [(second, ids[30:])])
        with s3.bulk_load() as load:  # the other writer, after the partitions were listed
            load.add(first, request_ids=ids[:30])
        assert True in _commit(s3, staged)
        with local.bulk_load() as load:
            load.add(first, request_ids=ids[:30])
            load.add(second, request_ids=ids[30:])
        assert _records(s3) == _records(local)
        assert all(p.part_files == 0 for p in s3.stats().partitions)  # the parts compacted
        assert s3.verify().ok


def test_a_dead_processes_staging_folder_is_removed_once_its_lease_is_stale(
    seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an object store nobody can tell whether a process on another machine lives: a
    staging folder is kept while its process renews its lease, and removed by the next flush
    or compaction once the lease is gone or stale; a folder of another name is not touched."""
    import os
    import time

    from web_index.storage._lease import LeaseLocks

    ttl = 0.5
    monkeypatch.setenv("WEB_INDEX_LEASE_TTL", str(ttl))
    items, ids = _items(3, 20), [str(uuid.uuid4()) for _ in range(20)]
    location = seaweed.new_store()
    with WebIndex(location) as live, WebIndex(location) as sweeper:
        backend = sweeper._store.backend

        def folders() -> set[str]:
            return set(backend.inner.list_folders("_tmp"))

        def leases() -> int:
            return len(backend.inner.list_files("_locks/stage"))

        with live._store.staging() as kept:
            _stage(live, kept, [(items, ids)])
            stale = f"_tmp/{os.getpid() + 1}-{uuid.uuid4()}"  # its process died: never renewed
            assert LeaseLocks(backend.inner, ttl_s=ttl).acquire("stage", stale) is not None
            unleased = f"_tmp/{os.getpid() + 2}-{uuid.uuid4()}"  # died before... or never had one
            _stage(sweeper, stale, [(items, ids)])
            _stage(sweeper, unleased, [(items, ids)])
            _stage(sweeper, "_tmp/import", [(items, ids)])
            assert leases() == 2
            assert sweeper._store.remove_orphans() == 1
            assert folders() == {n.removeprefix("_tmp/") for n in (kept, stale, "_tmp/import")}
            time.sleep(2.5 * ttl)  # past its expiry by a lease's time
            sweeper.flush()
            assert folders() == {n.removeprefix("_tmp/") for n in (kept, "_tmp/import")}
            assert leases() == 1  # the stale one taken over and given back: only the live one
            sweeper.compact()
            assert kept.removeprefix("_tmp/") in folders()
        assert folders() == {"import"}
        assert leases() == 0
        requests = backend.inner.requests
        requests.reset()
        assert sweeper._store.remove_orphans() == 0
        assert requests.counts == {"list": 1}  # with no process's folder there: one listing
