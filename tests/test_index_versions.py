"""A month index never answers for a file rewritten since it was built, even when
the new file has the same name and exactly as many bytes.

That is not hypothetical: a compaction that absorbs one part holding one record
into a compacted file that had listed two superseded parts writes one row more
and one part id less, and the two can cancel to the byte. The index (which
trusted name and size) kept its old rows, and queries answered from it missed
the new record while ``verify`` saw nothing wrong. Here the same state is made
on purpose, on a local and an S3 store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.factories import T0, attempt
from tests.servers import SeaweedFS
from web_index import WebIndex
from web_index.ingest import validate_attempt
from web_index.models import RecordType, TimeAwarePageQuery
from web_index.storage import Backend, Partition
from web_index.storage._schema import FORMAT_VERSION
from web_index.storage._tables import rows_to_table, sort_dedupe
from web_index.storage.backends import sealed_bytes
from web_index.storage.indexes import _month_build as _build
from web_index.storage.indexes import _month_format as _format
from web_index.storage.indexes import _month_open

URL = "https://www.example.com/page"
PARTITION = Partition(RecordType.GET_METADATA, T0.year, T0.month, "example.com")
# Within a month, inside the window; B is the only one of calibre 50.
WINDOW = TimeAwarePageQuery(
    url=URL,
    type="get-metadata",
    calibre=50,
    not_before=T0 - timedelta(days=1),
    not_after=T0 + timedelta(days=5),
    timestamp=T0,
)


def _row(days: int, calibre: int) -> dict[str, Any]:
    item = attempt(URL, T0 + timedelta(days=days), state="timeout", calibre=calibre)
    meta, _ = validate_attempt(*item).rows()
    return meta


def _file_bytes(rows: list[dict[str, Any]], pad: int) -> bytes:
    """A compacted file of ``rows`` whose footer carries ``pad`` bytes of a key
    readers ignore: the knob that makes two different files the same size."""
    table = sort_dedupe(PARTITION.type, rows_to_table(PARTITION.type, rows))
    meta = {
        b"web_index.format": FORMAT_VERSION.encode(),
        b"web_index.superseded": json.dumps([]).encode(),
        b"x-test-padding": b"x" * pad,
    }
    return bytes(sealed_bytes(table.replace_schema_metadata(meta), compression="lz4", store_schema=False))


def _write_same_size(backend: Backend, rows: list[dict[str, Any]], size: int) -> None:
    # The padding is one footer string: its length moves the file size one for
    # one (between 128 and 16,383 bytes its length prefix stays two bytes).
    probe = len(_file_bytes(rows, 500))
    data = _file_bytes(rows, 500 + size - probe)
    assert len(data) == size
    _put(backend, data)


def _put(backend: Backend, data: bytes) -> None:
    handle = pq.ParquetFile(pa.BufferReader(data))
    backend.write_parquet(
        PARTITION.compacted_path,
        handle.read().replace_schema_metadata(handle.schema_arrow.metadata),
        compression="lz4",
        store_schema=False,
    )


def _size(backend: Backend) -> int:
    name = PARTITION.compacted_path.rsplit("/", 1)[1]
    [info] = [i for i in backend.list_files(PARTITION.folder) if i[0] == name]
    return int(info[1])  # (name, size, ...): also as listings were before they had versions


def _stale_state(index: WebIndex) -> str:
    """Index built over a file of record A; the file then rewritten, same name and
    size, with A and B (calibre 50). Returns B's request id."""
    backend = index._store.backend
    a, b = _row(0, 10), _row(2, 50)
    _put(backend, _file_bytes([a], 1000))
    assert _build.build_month_index(backend, PARTITION.type, PARTITION.year, PARTITION.month)
    assert index.query([WINDOW]) == [None]
    before = _size(backend)
    _write_same_size(backend, [a, b], before)
    assert _size(backend) == before
    return str(b["request_id"])


def _check(index: WebIndex) -> None:
    rid = _stale_state(index)
    [found] = index.query([WINDOW])
    assert found is not None and found.request_id == rid
    assert index.presence([WINDOW]) == [True]
    report = index.verify()
    assert report.ok, report.problems
    assert any("does not cover 1 partition" in n.message for n in report.notes)
    index.compact()  # brings the index up to date: answered from it again, rightly
    assert [r.request_id if r else None for r in index.query([WINDOW])] == [rid]
    assert not index.verify().notes


@pytest.fixture
def s3_index(seaweed: SeaweedFS) -> Iterator[WebIndex]:
    with WebIndex(seaweed.new_store()) as idx:
        yield idx


def test_same_name_same_size_rewrite_is_not_answered_from_the_index(index: WebIndex) -> None:
    _check(index)


def test_same_name_same_size_rewrite_on_s3(s3_index: WebIndex) -> None:
    _check(s3_index)


def _forge_covers(index: WebIndex) -> None:
    """Make the index claim the rewritten file's version (as an index built by
    name and size alone did): its rows now lie about a file it says it covers."""
    backend = index._store.backend
    t, y, m = PARTITION.type, PARTITION.year, PARTITION.month
    old = _month_open.open_month_index(backend, t, y, m)
    assert old is not None
    versions = {i.name: (i.size, i.version) for i in backend.list_files(PARTITION.folder)}
    covers = [c._replace(size=versions[c.name][0], version=versions[c.name][1]) for c in old.covers]
    _format.write_index(backend, t, y, m, old.handle.read(), covers, None)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_verify_reports_an_index_that_disagrees_with_files_it_covers(
    where: str, request: pytest.FixtureRequest
) -> None:
    index: WebIndex = request.getfixturevalue("index" if where == "local" else "s3_index")
    _stale_state(index)
    _forge_covers(index)
    assert index.query([WINDOW]) == [None]  # the wrong answer verify must explain
    problems = [str(p) for p in index.verify().problems]
    assert len(problems) == 1, problems
    assert "month index disagrees with the files of 1 domain(s) (example.com)" in problems[0]
    assert "1 record(s) missing" in problems[0], problems
