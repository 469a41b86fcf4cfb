"""Large objects on a real SeaweedFS: compacted files above the multipart
threshold go up in parts from a local spool, keep the commit's condition,
and read back exactly (issue 21, item 6)."""

from __future__ import annotations

import os
from datetime import timedelta

import pyarrow as pa
import pytest

from tests.factories import T0, attempt
from tests.servers import SeaweedFS
from web_index import FlushPolicy, WebIndex
from web_index.errors import ConflictError
from web_index.models import RecordType
from web_index.storage import Partition, WriteOptions
from web_index.storage._files import write_partition_file
from web_index.storage._layout import TMP_DIR
from web_index.storage._tables import rows_to_table
from web_index.storage.backends import S3Backend

MiB = 1 << 20


def _big_index(loc: str) -> WebIndex:
    index = WebIndex(loc, policy=FlushPolicy(max_rows=4, compact_parts=0))
    inner = index._store.backend.inner  # type: ignore[attr-defined]
    inner.multipart_bytes = 2 * MiB  # the threshold, lowered so that a test file crosses it
    return index


def test_a_compaction_larger_than_the_threshold_goes_up_in_parts(
    seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_s3 import _reads_back

    read_back = _reads_back(monkeypatch)
    loc = seaweed.new_store()
    bodies = [os.urandom(MiB) for _ in range(20)]  # incompressible: a ~20 MiB compacted file
    with _big_index(loc) as index:
        keys = index.insert_many(
            [
                attempt(f"https://big.example.com/{i}", T0 + timedelta(minutes=i), body=b)
                for i, b in enumerate(bodies)
            ]
        )
        index.flush()
        assert index.compact() == 2  # get and get-metadata
        backend = S3Backend(loc)
        info = backend.head("get/2024/08/example.com.parquet")
        assert info is not None and info.size > 16 * MiB
        # S3 (and SeaweedFS) give a multipart object an ETag "<md5 of part md5s>-<parts>".
        assert info.etag is not None and info.etag.strip('"').endswith("-3"), info.etag
        assert [r.data if r else None for r in index.query(keys)] == bodies  # type: ignore[union-attr]
        assert backend.check_file("get/2024/08/example.com.parquet")
        assert index.verify().ok
        assert not list(backend.local_folder(TMP_DIR).iterdir()), "spool files left behind"
    # Its capture index was written from the spool it went up from: a listing names the object
    # by the ETag its upload returned, so nothing was read back for it.
    assert read_back == []


def test_a_large_commit_keeps_its_condition(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    backend = S3Backend(loc, multipart_bytes=2 * MiB)
    partition = Partition(RecordType.GET_METADATA, 2024, 8, "example.com")
    backend.put(partition.compacted_path, b"another compactor's file")
    rows = [
        {
            "url_key": f"com,example)/{i:06d}",
            "url": f"https://example.com/{i}",
            "timestamp": 1_722_470_400_000_000 + i,
            "request_id": f"01a210c4-38a1-7000-a06a-{i:012x}",
            "state": "success",
            "fetcher_name": "t",
            "fetcher_version": "1",
            "fetcher_calibre": 10,
            "retry_attempt": 0,
            "run_time": 0.1,
            "logs": os.urandom(64).hex() * 8,
        }
        for i in range(8000)
    ]
    table = rows_to_table(partition.type, rows)
    assert table.nbytes > 2 * MiB

    def stream() -> list[pa.Table]:
        return [table.slice(n, 4096) for n in range(0, table.num_rows, 4096)]

    with pytest.raises(ConflictError):
        write_partition_file(
            backend, partition, stream(), WriteOptions(), part=None, condition={"if_match": '"stale"'}
        )
    with pytest.raises(ConflictError):
        write_partition_file(
            backend, partition, stream(), WriteOptions(), part=None, condition={"create": True}
        )
    assert backend.read_object(partition.compacted_path) == b"another compactor's file"
    current = backend.head(partition.compacted_path)
    assert current is not None
    write_partition_file(
        backend, partition, stream(), WriteOptions(), part=None, condition={"if_match": current.etag}
    )
    handle = backend.open_parquet(partition.compacted_path)
    assert handle.metadata.num_rows == len(rows)
    assert backend.check_file(partition.compacted_path)
    assert not list(backend.local_folder(TMP_DIR).iterdir())
