"""Bulk loads when things go wrong: a chunk that cannot be spilled, a commit cut
short, a loader killed before its commit. (What a load stores is checked
against the reference model in test_model_based.py.)"""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.errors import InvalidRecordError, StoreError
from web_index.models import SimplePageQuery
from web_index.storage import LocalBackend
from web_index.storage import _load as load_module


def _items(start: int, n: int) -> list[Any]:
    return [
        attempt(f"https://s{i % 7}.example.com/{i}", T0 + timedelta(days=40 * (i % 3)))
        for i in range(start, start + n)
    ]


def _present(index: WebIndex, items: list[Any]) -> list[bool]:
    return index.presence([SimplePageQuery(url=item[1]) for item in items])


def _spool_files(store: Path) -> list[Path]:
    return [p for p in (store / "_tmp").glob("*") if p.is_file()] if (store / "_tmp").exists() else []


def test_a_chunk_that_cannot_be_spilled_is_dropped_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = load_module.partition_tables
    calls = {"n": 0}

    def full_disk(attempts: Any, payload_of: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(28, "No space left on device")
        return real(attempts, payload_of)

    monkeypatch.setattr(load_module, "partition_tables", full_disk)
    first, second, third = _items(0, 10), _items(10, 10), _items(20, 10)
    store = tmp_path / "s"
    with WebIndex(store) as index:
        with pytest.raises(OSError, match="No space"), index.bulk_load(chunk=10) as load:
            load.add(first)  # spilled
            load.add(second)  # its spill fails: the error reaches the caller
            load.add(third)  # never reached
        assert load.stored == 10  # the first chunk was committed as the block ended
        assert _present(index, first) == [True] * 10
        assert _present(index, second) == [False] * 10
        assert index.verify().ok
    assert _spool_files(store) == []


def test_a_commit_cut_short_leaves_whole_partitions_and_no_spool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = LocalBackend.place
    calls = {"n": 0}

    def place(self: LocalBackend, spool: Path, path: str) -> None:
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(5, "Input/output error")
        real(self, spool, path)

    monkeypatch.setattr(LocalBackend, "place", place)
    items = _items(0, 40)
    store = tmp_path / "s"
    with WebIndex(store) as index:
        with pytest.raises(OSError, match="Input/output"), index.bulk_load() as load:
            load.add(items)
        assert load.stored == 0  # the commit did not finish
        present = _present(index, items)
        assert 0 < sum(present) < len(items)  # some partitions were named before the fault
        assert index.verify().ok  # each of them whole, nothing half-written
        monkeypatch.setattr(LocalBackend, "place", real)
        with index.bulk_load() as again:  # the load run again stores the rest
            again.add([item for item, there in zip(items, present, strict=True) if not there])
        assert _present(index, items) == [True] * len(items)
        assert index.verify().ok
    assert _spool_files(store) == []


_KILLED = """
import os, sys
sys.path.insert(0, {root!r})
from tests.factories import attempt
from web_index import WebIndex
with WebIndex(sys.argv[1]) as index:
    load = index.bulk_load(chunk=5)
    for n in range(4):
        load.add([attempt(f"https://k.example.com/{{n}}/{{i}}") for i in range(5)])
    os._exit(9)  # killed after spilling, before any commit
"""


def test_a_killed_loader_leaves_nothing_visible_and_its_spill_is_removed(tmp_path: Path) -> None:
    store = tmp_path / "s"
    root = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run([sys.executable, "-c", _KILLED.format(root=root), str(store)], check=False)
    assert done.returncode == 9
    assert len(_spool_files(store)) >= 4  # four chunks spilled (one file each: GET and metadata)
    with WebIndex(store) as index:
        assert index.stats().records == 0  # nothing of an uncommitted load is visible
        index.flush()  # any writer's flush or compaction removes a dead writer's leftovers
    assert _spool_files(store) == []


@pytest.mark.parametrize("has_syncfs", [True, False])
def test_a_commit_syncs_the_stores_filesystem_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, has_syncfs: bool
) -> None:
    """syncfs(2) on the store's filesystem, not os.sync (every filesystem of the machine), where
    the C library has it; os.sync where it does not."""
    from web_index.storage.backends import local

    synced: list[str] = []
    if not has_syncfs:
        monkeypatch.setattr(local, "_SYNCFS", None)
    else:
        assert local._SYNCFS is not None, "the C library of this Linux has syscall wrappers for syncfs"
    monkeypatch.setattr(local.os, "sync", lambda: synced.append("all"))
    items = _items(0, 12)
    with WebIndex(tmp_path / "s") as index:
        with index.bulk_load() as load:
            load.add(items)
        assert _present(index, items) == [True] * 12
    assert synced == ([] if has_syncfs else ["all", "all"])


_HOLDER, _TOLD = "01910000-0000-7000-8000-000000000001", "01910000-0000-7000-8000-000000000002"
_BODY = b"<p>" + b"z" * 2000 + b"</p>"


def _told(url: str, body: bytes = b"") -> Any:
    return attempt(url, T0 + timedelta(hours=1), body=body)


@pytest.mark.parametrize("gather_max", [load_module.GATHER_MAX, 1])
def test_a_response_told_its_payload_gets_its_holder_s_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gather_max: int
) -> None:
    """``payload_of``: the body of a response the load took before, in the same partition, given
    when the partition is read back, whether gathered whole or merged as read (``gather_max``
    1), and stored once; the holder spilled in another chunk than the row told of it."""
    monkeypatch.setattr(load_module, "GATHER_MAX", gather_max)
    with WebIndex(tmp_path / "s", create=True) as index:
        with index.bulk_load(chunk=1) as load:
            load.add([attempt("https://a.example.com/", body=_BODY)], request_ids=[_HOLDER])
            load.add([_told("https://a.example.com/b")], request_ids=[_TOLD], payload_of={_TOLD: _HOLDER})
        pages = index.query(
            [SimplePageQuery(url=u) for u in ("https://a.example.com/", "https://a.example.com/b")]
        )
        assert [p.data if p is not None else None for p in pages] == [_BODY, _BODY]
        assert index.verify().problems == []
    from tests.test_shared_payloads import _references

    assert _references(tmp_path / "s") == 1


def test_payload_of_names_an_item_with_an_empty_body(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index, index.bulk_load() as load:
        with pytest.raises(InvalidRecordError, match="payload_of"):
            load.add([_told("https://a.example.com/b")], request_ids=[_TOLD], payload_of={"other": _HOLDER})
        with pytest.raises(InvalidRecordError, match="empty body"):
            load.add(
                [_told("https://a.example.com/b", b"x")], request_ids=[_TOLD], payload_of={_TOLD: _HOLDER}
            )
        assert load.add([attempt("https://a.example.com/")]) != []  # the load goes on


def test_a_holder_not_in_the_partition_fails_the_commit_naming_both(tmp_path: Path) -> None:
    """The holder in another domain's partition: nothing of the load is committed."""
    root = tmp_path / "s"
    with WebIndex(root, create=True) as index:
        with pytest.raises(StoreError, match=f"{_TOLD}.*{_HOLDER}"), index.bulk_load() as load:
            load.add([attempt("https://b.example.org/", body=_BODY)], request_ids=[_HOLDER])
            load.add([_told("https://a.example.com/b")], request_ids=[_TOLD], payload_of={_TOLD: _HOLDER})
        assert not list(root.glob("get*/**/*.parquet"))
        assert index.query([SimplePageQuery(url="https://b.example.org/")]) == [None]


def test_a_commit_before_the_last_indexes_its_months(tmp_path: Path) -> None:
    """What the rest of a load looks up (an import's presence checks) finds a commit's records
    through its months' indexes, not by reading every file it wrote."""
    root = tmp_path / "s"
    month = root / "_index" / "get" / f"{T0.year:04d}" / f"{T0.month:02d}.parquet"
    with WebIndex(root, create=True) as index, index.bulk_load(chunk=1, commit_bytes=1) as load:
        load.add([attempt("https://a.example.com/")])
        assert load.commits == 1 and month.exists()
        assert index.presence([SimplePageQuery(url="https://a.example.com/")]) == [True]
        load.add([attempt("https://a.example.com/b")])
        assert load.commits == 2


@pytest.mark.parametrize("gather_max", [load_module.GATHER_MAX, 1])
def test_a_commit_places_its_bodies_without_decompressing_a_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gather_max: int
) -> None:
    """The capture index of a file a commit writes gets its bodies' places, and those of the
    holders its referring rows name in it, from the bodies' lengths, known as the file is
    written, whether its partition was gathered whole or merged as read (``gather_max`` 1): no
    page of it is decompressed again; the lines are those read back."""
    from web_index.storage.pages import _places

    monkeypatch.setattr(load_module, "GATHER_MAX", gather_max)
    # 20 payloads under 60 URLs: rows that refer to a holder in the same file, placed too.
    items = [
        attempt(f"https://a.example.com/{n}", body=b"<p>%d</p>" % (n % 20) * (n % 20 * 40 + 50))
        for n in range(60)
    ]
    with WebIndex(tmp_path / "s", create=True) as index:
        with monkeypatch.context() as patch:
            patch.setattr(_places, "_decompress", _no_decompression)
            with index.bulk_load(chunk=7) as load:
                load.add(items)
        written = capture_index_files(tmp_path / "s")
        assert len(written) == 1  # the get partition's (a metadata file has none)
        for path in (tmp_path / "s" / "_captures").rglob("*.cdxj.zst"):
            path.unlink()
        index.compact()  # the indexes made again from the files read back
        assert capture_index_files(tmp_path / "s") == written
        assert index.verify().ok
    from tests.test_shared_payloads import _references

    assert _references(tmp_path / "s") == 40


def capture_index_files(root: Path) -> dict[str, bytes]:
    """The capture index files of a store, their bytes by name (the covered file's version in it)."""
    return {path.name: path.read_bytes() for path in sorted((root / "_captures").rglob("*.cdxj.zst"))}


def _no_decompression(*_args: object) -> bytes:
    raise AssertionError("a page decompressed again")


def test_a_commit_waits_for_what_the_spool_disk_and_the_merge_allow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """By default a load commits at 8 GiB spilled, or at half the spool disk's free space if that
    is less (the spill stays there until its commit has written the files); a load told its
    ``commit_bytes`` commits at those."""
    from web_index import _bulk_load

    gib = 1 << 30
    assert _bulk_load.default_commit_bytes(100 * gib) == 8 * gib
    assert _bulk_load.default_commit_bytes(6 * gib) == 3 * gib
    assert _bulk_load.default_commit_bytes(0) == 256 << 20
    items = _items(0, 30)
    with WebIndex(tmp_path / "a") as index, index.bulk_load(chunk=10) as load:
        load.add(items)
        assert load.commits == 0  # three chunks spilled, far from any bound
    assert load.commits == 1
    # A disk with little room (and no least size): the spill commits once it holds half of it.
    monkeypatch.setattr(_bulk_load, "_COMMIT_LEAST", 0)
    monkeypatch.setattr(load_module.Spill, "free_bytes", property(lambda self: 2))
    with WebIndex(tmp_path / "b") as index:
        with index.bulk_load(chunk=10) as load:
            load.add(items[:10])
            assert load.commits == 1
            load.add(items[10:])
        assert load.commits == 3 and _present(index, items) == [True] * 30
