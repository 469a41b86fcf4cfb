"""The same contract, checked on every implementation of a seam: every backend
(local folder, S3, S3 behind the read-through cache) keeps ``Backend``'s,
every buffer (SQLite, PostgreSQL) keeps ``Buffer``'s. A new backend or buffer
joins the parameter lists and must pass unchanged."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from tests.factories import T0, attempt
from tests.servers import Postgres, SeaweedFS
from web_index.errors import ConflictError, StoreError
from web_index.ingest import validate_attempt
from web_index.models import RecordType
from web_index.storage import Backend, Buffer, LocalBackend, MethodPartition, PostgresBuffer
from web_index.storage.backends import CachingBackend, S3Backend
from web_index.storage.buffer import SqliteBuffer

TABLE = pa.table({"k": ["a", "b", "c"], "v": [1, 2, 3]})


@pytest.fixture(params=["local", "s3", "cached-s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "local":
        return LocalBackend(tmp_path / "store")
    seaweed: SeaweedFS = request.getfixturevalue("seaweed")
    s3 = S3Backend(seaweed.new_store())
    return s3 if request.param == "s3" else CachingBackend(s3)


def test_a_written_file_is_listed_read_back_checked_and_deleted(backend: Backend) -> None:
    assert backend.list_files("get/2024/08") == []
    size = backend.write_parquet("get/2024/08/example.com.parquet", TABLE)
    [info] = backend.list_files("get/2024/08")
    assert (info.name, info.size) == ("example.com.parquet", size)
    assert backend.list_files("get/2024/08", "other.") == []
    assert backend.list_folders("get/2024") == ["08"]
    assert backend.open_parquet("get/2024/08/example.com.parquet").read().select(["k", "v"]).equals(TABLE)
    assert backend.check_file("get/2024/08/example.com.parquet") is True
    backend.delete("get/2024/08/example.com.parquet")
    backend.delete("get/2024/08/example.com.parquet")  # gone already: not an error
    assert backend.list_files("get/2024/08") == []
    with pytest.raises(FileNotFoundError):
        backend.open_parquet("get/2024/08/example.com.parquet")


def test_every_write_is_a_new_version_even_at_the_same_size(backend: Backend) -> None:
    path = "get/2024/08/example.com.parquet"
    backend.write_parquet(path, TABLE)
    [first] = backend.list_files("get/2024/08")
    backend.write_parquet(path, TABLE.set_column(1, "v", pa.array([3, 2, 1])))
    [second] = backend.list_files("get/2024/08")
    assert second.size == first.size and second.version != first.version


def test_a_file_is_described_as_it_is_listed(backend: Backend) -> None:
    path = "get/2024/08/example.com.parquet"
    backend.write_parquet(path, TABLE)
    [info] = backend.list_files("get/2024/08")
    assert backend.file_info(path) == info
    backend.delete(path)
    with pytest.raises(FileNotFoundError):
        backend.file_info(path)


def test_a_link_or_a_folder_is_no_file_of_a_local_store(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "store")
    backend.write_parquet("get/2024/08/example.com.parquet", TABLE)
    month = tmp_path / "store" / "get" / "2024" / "08"
    (month / "linked.com.parquet").symlink_to(month / "example.com.parquet")
    (month / "folder.com.parquet").mkdir()
    assert [f.name for f in backend.list_files("get/2024/08")] == ["example.com.parquet"]
    for name in ("linked.com.parquet", "folder.com.parquet"):
        with pytest.raises(FileNotFoundError):
            backend.file_info(f"get/2024/08/{name}")


def test_a_stream_is_written_as_it_comes(backend: Backend) -> None:
    chunks = [TABLE.slice(i, 1).to_batches()[0] for i in range(TABLE.num_rows)]
    backend.write_parquet("x/streamed.parquet", pa.RecordBatchReader.from_batches(TABLE.schema, iter(chunks)))
    handle = backend.open_parquet("x/streamed.parquet")
    assert handle.metadata.num_row_groups == 3
    assert handle.read().select(["k", "v"]).equals(TABLE)


def test_conditional_writes(backend: Backend) -> None:
    path = "get/2024/08/example.com.parquet"
    backend.write_parquet(path, TABLE, create=True)
    if isinstance(backend, LocalBackend):
        # Local writers are kept apart by their locks: conditions are not checked.
        backend.write_parquet(path, TABLE, create=True)
        return
    with pytest.raises(ConflictError):
        backend.write_parquet(path, TABLE, create=True)
    with pytest.raises(ConflictError):
        backend.write_parquet(path, TABLE, if_match='"not-the-etag"')
    [info] = backend.list_files("get/2024/08")
    backend.write_parquet(path, TABLE, if_match=info.version)


def test_paths_outside_the_store_are_refused(backend: Backend) -> None:
    for path in ("../escape.parquet", "get/../../escape.parquet", "/etc/escape.parquet"):
        with pytest.raises((StoreError, ValueError)):
            backend.write_parquet(path, TABLE)


def test_a_small_file_is_written_whole_and_listed(backend: Backend) -> None:
    backend.write_bytes("_marker.json", b'{"a": 1}')
    backend.write_bytes("_marker.json", b'{"a": 22}')  # replaced whole
    [info] = backend.list_files("", "_marker.json")
    assert info.size == len(b'{"a": 22}')
    with pytest.raises((StoreError, ValueError)):
        backend.write_bytes("../escape.json", b"{}")


def test_a_file_of_any_kind_is_copied_out(backend: Backend, tmp_path: Path) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, not Parquet
    backend.write_bytes("in/crawl.warc.gz", data)
    copied = backend.copy_out("in/crawl.warc.gz", tmp_path / "copy")
    assert (tmp_path / "copy").read_bytes() == data
    assert copied == backend.file_info("in/crawl.warc.gz").version
    with pytest.raises(FileNotFoundError):
        backend.copy_out("in/missing.warc.gz", tmp_path / "other")
    with pytest.raises((StoreError, ValueError)):
        backend.copy_out("../escape", tmp_path / "other")


def test_a_local_file_is_copied_in_whole(backend: Backend, tmp_path: Path) -> None:
    src = tmp_path / "pack.sqlite.zst"
    src.write_bytes(os.urandom(3 << 20))  # 3 MiB, over the S3 multipart threshold set below
    if isinstance(getattr(backend, "inner", backend), S3Backend):
        getattr(backend, "inner", backend).multipart_bytes = 1 << 20
    backend.copy_in(src, "search/packs/a.test/00000001.sqlite.zst")
    [info] = backend.list_files("search/packs/a.test")
    assert (info.name, info.size) == ("00000001.sqlite.zst", 3 << 20)
    backend.copy_out("search/packs/a.test/00000001.sqlite.zst", tmp_path / "back")
    assert (tmp_path / "back").read_bytes() == src.read_bytes()
    with pytest.raises((StoreError, ValueError)):
        backend.copy_in(src, "../escape.zst")
    assert backend.list_files("search/packs/a.test") == [info]  # nothing else written


def test_a_private_local_folder(backend: Backend) -> None:
    folder = backend.local_folder("_buffer")
    assert folder.is_dir()
    assert backend.exists()


# -- buffers ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def buffer(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Buffer]:
    if request.param == "sqlite":
        made: Buffer = SqliteBuffer(tmp_path / "buffer")
    else:
        postgres: Postgres = request.getfixturevalue("postgres")
        made = PostgresBuffer(postgres.new_database())
    yield made
    made.close()


def _attempts(n: int, host: str = "a.example.com") -> list[object]:
    return [
        validate_attempt(
            *attempt(f"https://{host}/{i}", T0 + timedelta(minutes=i), state=("success", "timeout")[i % 2])
        )
        for i in range(n)
    ]


def test_appended_attempts_are_found_counted_claimed_and_completed(buffer: Buffer) -> None:
    attempts = _attempts(10) + _attempts(3, "b.example.org")
    buffer.append(attempts)  # type: ignore[arg-type]
    mp = MethodPartition(RecordType.GET, 2024, 8, "example.com")
    assert set(buffer.partitions()) == {mp, MethodPartition(RecordType.GET, 2024, 8, "example.org")}
    assert buffer.counts()[mp][0] == 10
    found = buffer.lookup(RecordType.GET, [attempts[3].url_key, "https://a.example.com/nothing"])  # type: ignore[attr-defined]
    assert [k.request_id for k in found] == [attempts[3].request_id]  # type: ignore[attr-defined]
    loaded = buffer.load([attempts[0].request_id])  # type: ignore[attr-defined]
    assert loaded[attempts[0].request_id].metadata["url"] == "https://a.example.com/0"  # type: ignore[attr-defined]
    assert buffer.due(max_rows=10, max_bytes=1 << 30, max_age_s=1e9) == [mp]
    generation = buffer.generation(RecordType.GET, 2024, 8)
    flush_id = str(uuid.uuid4())
    assert buffer.claim(mp, flush_id, 4) == 4
    assert buffer.claims(mp) == [flush_id]
    assert len(list(buffer.claimed(flush_id))) == 4
    # Each attempt's metadata without its bodies, as iter_all gives it, claims included.
    everything = [(part, claim, a.metadata) for part, claim, a in buffer.iter_all()]
    assert list(buffer.iter_metadata()) == everything
    assert {claim for _, claim, _ in everything} == {flush_id, None} and len(everything) == 13
    buffer.complete(flush_id)
    assert buffer.claims(mp) == []
    assert buffer.counts()[mp][0] == 6
    assert buffer.generation(RecordType.GET, 2024, 8) > generation
    assert len(list(buffer.iter_all())) == 9
    claimed_keys = {a.url_key for a in attempts[:10:2]}  # type: ignore[attr-defined]
    left = {k.url_key for k in buffer.lookup(RecordType.GET, [a.url_key for a in attempts])}  # type: ignore[attr-defined]
    assert len(left) == 9 and len(claimed_keys - left) >= 1  # flushed rows left the buffer


def test_an_attempt_already_buffered_is_refused_whole(buffer: Buffer) -> None:
    # A request id is one attempt: appending it again (a client retrying an
    # insert it thinks failed) is a StoreError, and the batch it came in is
    # not half-written.
    attempts = _attempts(2)
    buffer.append(attempts[:1])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="could not be written"):
        buffer.append(attempts)  # type: ignore[arg-type]
    assert len(list(buffer.iter_all())) == 1


def test_a_replaced_file_is_let_go_at_a_read_a_second_after_it_was_found_linked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A positioned read keeps its file open and does not ``stat`` it every time: a file
    replaced since is read as it was (its readers check what they read, and read again
    ``fresh``) until a read a second or more after it was last found linked, which opens
    the new one and lets the old one's space go."""
    from types import SimpleNamespace

    from web_index.storage.backends import local

    clock = [1000.0]
    monkeypatch.setattr(local, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    backend = LocalBackend(tmp_path / "store")
    backend.write_bytes("get/f.bin", b"old bytes")
    assert backend.read_range("get/f.bin", 0, 3) == b"old"
    backend.write_bytes("get/f.bin", b"new bytes")  # renamed over it: the old file has no link left
    clock[0] += 0.5
    assert backend.read_range("get/f.bin", 0, 3) == b"old"
    assert backend.read_range("get/f.bin", 0, 3, fresh=True) == b"new"
    backend.write_bytes("get/f.bin", b"NEW bytes")
    clock[0] += 1.0
    assert backend.read_range("get/f.bin", 0, 3) == b"NEW"


def test_a_local_store_keeps_footers_within_their_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Footers parsed once are kept for reopening, within a bound on the memory they hold
    (not a count: a compaction opening a month's thousands of files once each held
    hundreds of MiB of them); a file read after they were let go reads the same."""
    from web_index.storage.backends import local
    from web_index.storage.backends.base import footer_memory

    backend = LocalBackend(tmp_path / "store")
    tables = {}
    for n in range(40):
        table = pa.table({"url_key": [f"k{n}-{i:04d}" for i in range(60)], "n": list(range(60))})
        tables[f"get/2024/01/d{n}.example.parquet"] = table
        backend.write_parquet(f"get/2024/01/d{n}.example.parquet", table, row_group_size=3)
    bound = 8 * footer_memory(backend.open_parquet("get/2024/01/d0.example.parquet").metadata)
    monkeypatch.setattr(local, "_FOOTERS_KEPT", bound)
    backend = LocalBackend(tmp_path / "store")  # its cache made with that bound
    for _ in range(2):
        for path, table in tables.items():
            assert backend.open_parquet(path).read().equals(table)
            kept = [meta for meta, _weight, _expires in backend._footers.items.values()]
            assert 0 < sum(footer_memory(m) for m in kept) <= bound


def _mapped(path: Path) -> bool:
    with open("/proc/self/maps") as maps:
        return any(line.rstrip("\n").endswith(str(path)) for line in maps)


def test_a_file_read_once_is_read_as_any_other_and_not_mapped(backend: Backend, tmp_path: Path) -> None:
    """A compaction's inputs are opened to be read once: the same rows, and on a local
    store no mapping, whose pages would stay this process's memory while the file is open
    (a partition's parts, up to its size)."""
    path = "get/2024/08/example.com.parquet"
    backend.write_parquet(path, TABLE)
    once = backend.open_parquet(path, once=True)
    assert once.read().select(["k", "v"]).equals(TABLE)
    if isinstance(backend, LocalBackend):
        assert not _mapped(backend.file_path(path))
        again = backend.open_parquet(path)  # a lookup's: mapped (small files read fastest so)
        assert _mapped(backend.file_path(path))
        del again


def test_a_compaction_reads_its_inputs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file a compaction merges, and the file it wrote when its capture index is
    made, is opened to be read once (see above)."""
    from web_index import WebIndex

    opened: list[tuple[str, bool]] = []
    real = LocalBackend.open_parquet

    def spy(self: LocalBackend, path: str, *, once: bool = False) -> object:
        opened.append((path, once))
        return real(self, path, once=once)

    with WebIndex(tmp_path / "s") as index:
        for n in range(3):  # three flushes: three parts of the partition
            index.insert_many([attempt(f"https://a.example/{n}", T0 + timedelta(seconds=n))])
            index.flush()
        monkeypatch.setattr(LocalBackend, "open_parquet", spy)
        index.compact()
    merged = [(p, once) for p, once in opened if p.startswith(("get/", "get-metadata/"))]
    assert merged and all(once for _, once in merged), merged
