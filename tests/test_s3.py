"""The S3 store on a real SeaweedFS server: backend, conditional writes, leases, compaction."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.factories import T0, attempt
from tests.servers import BUCKET, SeaweedFS
from web_index import FlushPolicy, WebIndex
from web_index.errors import ConflictError, StoreError
from web_index.models import SimplePageQuery
from web_index.read_only import query as ro_query
from web_index.storage._lease import LeaseLocks
from web_index.storage.backends import S3Backend


def fill(index: WebIndex, n: int, hosts: int = 3) -> list[object]:
    keys = []
    for i in range(n):
        url = f"https://h{i % hosts}.example.com/p{i % 7}"
        keys += index.insert_many([attempt(url, T0 + timedelta(days=i % 40), body=f"b{i}".encode())])
    return keys


def test_layout_and_answers_match_local(seaweed: SeaweedFS, tmp_path: object) -> None:
    loc = seaweed.new_store()
    with (
        WebIndex(loc, policy=FlushPolicy(max_rows=5, compact_parts=0)) as s3,
        WebIndex(str(tmp_path) + "/local", policy=FlushPolicy(max_rows=5, compact_parts=0)) as local,
    ):
        keys = fill(s3, 30)
        fill(local, 30)
        s3.flush()
        names = S3Backend(loc).list_files("get/2024/08")
        assert names and all(f.name.endswith(".parquet") for f in names)
        assert any(f.name.startswith("example.com.") for f in names)
        got = s3.query(keys)  # type: ignore[arg-type]
        assert all(r is not None for r in got)
        qs = [SimplePageQuery(url=f"https://h{i}.example.com/p{j}") for i in range(3) for j in range(7)]
        a = [None if r is None else r.data for r in s3.query(qs)]
        b = [None if r is None else r.data for r in local.query(qs)]
        assert [x is None for x in a] == [x is None for x in b]
        s3.compact()
        assert s3.query(keys) == got
        assert s3.verify().ok
    # The read-only functional API on the same store (same machine: same local buffer).
    assert [r is not None for r in ro_query(keys, store=loc)] == [True] * len(keys)  # type: ignore[arg-type]


def test_conditional_puts(seaweed: SeaweedFS) -> None:
    b = S3Backend(seaweed.new_store())
    etag = b.put("x/lease", b"1", create=True)
    with pytest.raises(ConflictError):
        b.put("x/lease", b"2", create=True)
    with pytest.raises(ConflictError):
        b.put("x/lease", b"3", if_match='"not-the-etag"')
    new = b.put("x/lease", b"4", if_match=etag)
    assert new != etag
    with pytest.raises(ConflictError):
        b.put("x/lease", b"5", if_match=etag)  # stale
    assert b.read_object("x/lease") == b"4"


def test_reads_pinned_to_a_version(seaweed: SeaweedFS) -> None:
    b = S3Backend(seaweed.new_store(), tail_bytes=16)
    b.put("f", bytes(range(100)))
    f = b.open_object("f")
    assert f.read(4) == bytes(range(4))
    b.put("f", bytes(100))  # replaced
    f.seek(10)
    with pytest.raises(FileNotFoundError):
        f.read(4)


def test_permanent_errors_are_clear(seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StoreError, match=r"does not exist|bucket"):
        WebIndex("s3://no-such-bucket-wi/x", read_only=True).query([SimplePageQuery(url="https://a.com/")])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StoreError, match="access denied"):
        WebIndex(f"s3://{BUCKET}/x", read_only=True)
    with pytest.raises(StoreError, match="access denied"):
        S3Backend(f"s3://{BUCKET}/x").list_files("get")


def test_lease_excludes_and_takes_over(seaweed: SeaweedFS) -> None:
    b = S3Backend(seaweed.new_store())
    locks = LeaseLocks(b, ttl_s=1.0, poll_s=0.02)
    inside = 0
    most = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        for _ in range(3):
            with locks.hold("compact", "p") as taken:
                assert taken
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.03)
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1
    # A holder that died: its lease stays; a waiter takes it over after the TTL.
    dead = locks.acquire("compact", "q")
    assert dead is not None  # never renewed, never released
    with locks.hold("compact", "q", blocking=False) as taken:
        assert not taken
    start = time.monotonic()
    with locks.hold("compact", "q") as taken:
        assert taken
        assert time.monotonic() - start >= 0.9
    # Renewal keeps a live holder's lease.
    with locks.hold("compact", "r"):
        time.sleep(2.5)
        with locks.hold("compact", "r", blocking=False) as taken:
            assert not taken


def test_compaction_commit_is_conditional(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    with WebIndex(loc, policy=FlushPolicy(max_rows=4, compact_parts=0)) as index:
        keys = fill(index, 20, hosts=1)
        index.flush()
        store = index._store
        partition = next(p for p in store.method_partitions())
        # Someone else writes the compacted file between our read and our commit.
        real = store.backend.write_parquet
        raced = False

        def racing(path: str, table: pa.Table, **options: object) -> int:
            nonlocal raced
            if path.endswith(f"{partition.domain}.parquet") and not raced:
                raced = True
                store.backend.inner.put(path, b"someone else's compaction")  # type: ignore[attr-defined]
            return real(path, table, **options)

        store.backend.write_parquet = racing  # type: ignore[method-assign]
        store.compact_partition(partition)  # the data commit loses; the metadata one goes through
        assert raced
        store.backend.write_parquet = real  # type: ignore[method-assign]
        parts = [f for f in store.partition_files(store_partition(partition)) if f.part]
        assert parts, "a compaction that lost its commit deletes nothing"
        store.backend.delete(
            f"{partition.method.value}/{partition.year:04d}/{partition.month:02d}/{partition.domain}.parquet"
        )
        assert index.compact() >= 1
        assert all(r is not None for r in index.query(keys))  # type: ignore[arg-type]
        assert index.verify().ok


def store_partition(mp: object) -> object:
    from web_index.storage import Partition

    return Partition(mp.method, mp.year, mp.month, mp.domain)  # type: ignore[attr-defined]


def test_captures_from_an_object_store_match_local(
    seaweed: SeaweedFS, tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    # The capture index is written to the bucket and read from a local copy.
    loc = seaweed.new_store()
    with WebIndex(loc) as s3, WebIndex(str(tmp_path) + "/local") as local:
        assert s3.remote and not local.remote  # the archive server reads the one in threads
        for index in (s3, local):
            fill(index, 40)  # over August and September: two indexes
            index.flush()
            index.compact()
        assert any(f.name.endswith(".cdxj.zst") for f in S3Backend(loc).list_files("_captures/get/2024/08"))
        for match in ("exact", "prefix", "host", "domain"):
            # The stores' request ids differ: the rest of each line must not.
            found, expected = (
                [_cdx_part(line) for line in index.captures("https://h1.example.com/p1", match=match)]
                for index in (s3, local)
            )
            assert found and found == expected
    assert "capture" not in caplog.text  # read from the indexes, none refused


def _cdx_part(line: str) -> tuple[str, ...]:
    key, stamp, rest = line.split(" ", 2)
    fields = json.loads(rest)
    return (key, stamp, *(str(fields[k]) for k in ("url", "mime", "status", "digest", "position")))


def test_a_copy_of_an_index_written_again_while_copied_is_not_kept(
    seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An object store's index is copied to this machine once, keyed by its path,
    which a refresh of its payloads' places writes again: a copy taken while that
    happened (and put in place after the writer dropped the old one) would be
    read for good. The copier sees the version it copied is not the store's."""
    from web_index.storage.indexes import _captures

    loc = seaweed.new_store()
    with WebIndex(loc) as index:
        fill(index, 20)
        index.flush()
        index.compact()
    backend = S3Backend(loc)
    [name] = [f.name for f in backend.list_files("_captures/get/2024/08") if f.name.endswith(".cdxj.zst")]
    path = f"_captures/get/2024/08/{name}"
    now = backend.read_range(path, 0, backend.file_info(path).size)
    local = _captures._cached_copy(backend, path)
    local.unlink(missing_ok=True)
    copy_out = S3Backend.copy_out

    def written_again_meanwhile(self: S3Backend, source: str, dest: object) -> str:  # the fault
        copied = copy_out(self, source, dest)  # type: ignore[arg-type]
        self.write_bytes(source, now + b"\0")  # another version (its bytes do not matter here)
        return copied

    monkeypatch.setattr(S3Backend, "copy_out", written_again_meanwhile)
    _captures.open_capture_index(backend, path)  # the copy read once, as it was
    assert not local.exists()
    monkeypatch.undo()
    backend.write_bytes(path, now)
    _captures.open_capture_index(backend, path)
    assert local.read_bytes() == now  # the store's version now, kept


def test_a_holder_compacted_again_refreshes_a_month_another_process_compacted(seaweed: SeaweedFS) -> None:
    """The places a month's index holds of another month's payloads are written again
    when that month is compacted again: of the month's file as the store holds it, not as
    this process's cache last listed it (another process compacted it since)."""
    from web_index.storage.backends import CacheConfig

    loc = seaweed.new_store()
    url, body = "https://a.example.com/page", b"<html>" + b"payload " * 100
    slow = CacheConfig(ttl_s=3600)  # listings kept: what another process wrote is not seen
    policy = FlushPolicy(max_rows=10**9, compact_parts=0)
    with WebIndex(loc, policy=policy) as index:
        for day in (0, 40):  # August holds the payload, September refers to it
            index.insert_many([attempt(url, T0 + timedelta(days=day), body=body)])
            index.flush()
            index.compact()
    from web_index.models import RecordType
    from web_index.storage.buffer import MethodPartition

    august = MethodPartition(RecordType.GET, 2024, 8, "example.com")
    with WebIndex(loc, policy=policy, cache=slow) as x, WebIndex(loc, policy=policy) as y:
        y.insert_many([attempt(url, T0 + timedelta(days=41), body=body)])
        y.flush()
        assert x.query([SimplePageQuery(url=url)])[0] is not None  # x lists September's folder
        y.compact()  # September written again by another process (no flush: x's listing stays)
        x.insert_many([attempt("https://a.example.com/a", T0 + timedelta(hours=1), body=b"x" * 999)])
        x.flush()
        x.compact(partitions=[august])  # a late capture before the holder moves its place
    with WebIndex(loc, read_only=True) as index:
        report = index.verify()
        assert report.problems == []
        assert not [n for n in report.notes if "place their payload" in n.message], report.notes
        held = [line for line in index.captures(url) if '"held":"2024/08"' in line]
        assert len(held) == 2 and all(index.capture_response(line).data == body for line in held)  # type: ignore[union-attr]


def test_a_bulk_load_indexes_what_it_sent_and_reads_none_of_it_back(
    seaweed: SeaweedFS, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bulk load onto an object store writes each new file's capture index from the rows and
    bytes in hand, references to payloads stored once included: the compaction pass finds
    them written and reads no file back for them (on the 1 GiB import, 879 of 1,019 MB were
    read back so); they are what a local store's load writes, and ``verify`` agrees."""
    rebuilt = _reads_back(monkeypatch)
    loc = seaweed.new_store()
    # The URLs of a domain serve two payloads (each stored once: the others refer to it) and an
    # empty body, in August and September.
    items = [
        attempt(
            f"https://h{i % 2}.example.com/p{i % 5}",
            T0 + timedelta(days=40 * (i % 2), hours=i),
            body=b"same" * 100 * (i % 3),
        )
        for i in range(40)
    ]
    with WebIndex(loc) as s3, WebIndex(str(tmp_path) + "/local") as local:
        for index in (s3, local):
            with index.bulk_load() as load:
                load.add(items)
        assert rebuilt == []  # the local load's month pass writes none either: its workers did
        _same_as_local(s3, local)


def test_a_compaction_indexes_what_it_sent(
    seaweed: SeaweedFS, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction on an object store writes its file's capture index from the bytes it sent
    (the re-crawl's references to payloads stored before included), not by reading the file
    back; the lines are a local store's, and ``verify`` agrees."""
    read_back = _reads_back(monkeypatch)
    loc = seaweed.new_store()
    policy = FlushPolicy(max_rows=7, compact_parts=0)
    with WebIndex(loc, policy=policy) as s3, WebIndex(str(tmp_path) + "/local", policy=policy) as local:
        for index in (s3, local):
            for crawl in range(2):  # the second crawl's bodies are the first's: references
                index.insert_many(
                    [
                        attempt(
                            f"https://h{i % 2}.example.com/p{i}",
                            T0 + timedelta(days=crawl, hours=i),
                            body=b"x" * 300 * (i % 4 + 1),
                        )
                        for i in range(12)
                    ]
                )
                index.flush()
                index.compact()
        assert read_back == []
        _same_as_local(s3, local)


def test_a_bulk_load_builds_its_month_indexes_from_the_rows_it_sent(
    seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On an object store too, a bulk load's month indexes are built from the rows its commit
    made of each file as it sent it: no file is read back for them (on the 1 GiB import into
    SeaweedFS, the key columns of 728 files were), and they are row for row and cover for
    cover the indexes the files give, chains of several responses and metadata types included."""
    from web_index.models import RecordType
    from web_index.storage.indexes import _month_build, build_month_index

    read: list[str] = []
    real = _month_build.iter_records

    def spied(backend: Any, type: RecordType, listing: dict[str, Any], *args: Any) -> Any:
        if backend.remote:
            read.extend(f.name for files in listing.values() for f in files)
        return real(backend, type, listing, *args)

    monkeypatch.setattr(_month_build, "iter_records", spied)
    loc = seaweed.new_store()
    items = [
        attempt(
            f"https://h{i % 3}.example.com/p{i % 4}",
            T0 + timedelta(days=40 * (i % 2), hours=i),
            method="head" if i % 5 == 0 else "get",
            state="timeout" if i % 7 == 0 else "success",
            hops=1 + i % 2,
        )
        for i in range(48)
    ]
    with WebIndex(loc) as index, index.bulk_load() as load:
        load.add(items)
    assert read == []
    backend = S3Backend(loc)

    def month_indexes() -> dict[str, tuple[pa.Table, dict[bytes, bytes]]]:
        found = {}
        for type in RecordType:
            for year in backend.list_folders(f"_index/{type.value}"):
                for f in backend.list_files(f"_index/{type.value}/{year}"):
                    if f.name.endswith(".parquet"):
                        path = f"_index/{type.value}/{year}/{f.name}"
                        handle = backend.open_parquet(path)
                        meta = handle.metadata.metadata or {}
                        ignored = {b"web_index.index.listed", b"web_index.checksum"}  # when, how sealed
                        found[path] = (handle.read(), {k: v for k, v in meta.items() if k not in ignored})
        return found

    built = month_indexes()
    assert {path.split("/")[1] for path in built} == {"get", "get-metadata", "head", "head-metadata"}
    for path in built:
        backend.delete(path)
        type, year, month = path.removeprefix("_index/").removesuffix(".parquet").split("/")
        assert build_month_index(backend, RecordType(type), int(year), int(month))
    assert len(read) == len(built)  # each month's one file, read back this time
    assert month_indexes() == built


def _reads_back(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The partitions of object stores whose compacted files are read back for their capture
    indexes, from now (a local store's compaction leaves its indexes to the month's pass)."""
    from web_index.storage.indexes import _captures_build

    partitions: list[str] = []
    real = _captures_build._build

    def build(backend: Any, partition: object, *args: Any) -> bool:
        if backend.remote:
            partitions.append(str(partition))
        return real(backend, partition, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_captures_build, "_build", build)
    return partitions


def _same_as_local(s3: WebIndex, local: WebIndex) -> None:
    """The object store's capture lines are the local store's (request ids aside), ``verify``
    finds them right, and some of the local store's rows refer to a payload stored once."""
    for match in ("exact", "prefix", "domain"):
        found, expected = (
            [_cdx_part(line) for line in index.captures("https://h1.example.com/p1", match=match)]
            for index in (s3, local)
        )
        assert found and found == expected
    assert s3.verify().ok
    files = Path(local.location, "get").rglob("*.parquet")
    refs = [pq.read_table(f, columns=["payload_ref"]).column(0) for f in files]
    assert sum(len(r) - r.null_count for r in refs) > 0
