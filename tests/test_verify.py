"""verify finds every kind of broken invariant, and changes nothing."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pyarrow as pa

from tests.factories import T0, attempt
from web_index import WebIndex, WriteOptions
from web_index.ingest import validate_attempt
from web_index.models import RecordType
from web_index.storage import Partition
from web_index.storage._files import write_partition_file
from web_index.storage._schema import SORT_KEYS
from web_index.storage._tables import rows_to_table


def _write(index: WebIndex, partition: Partition, rows: list[dict[str, object]], sort: bool = True) -> None:
    table = rows_to_table(partition.type, rows)
    if sort:
        table = table.sort_by([(c, "ascending") for c in SORT_KEYS[partition.type]])
    write_partition_file(index._store.backend, partition, table, WriteOptions(), part=str(uuid.uuid4()))


def _rows(url: str, ts=T0, hops: int = 1) -> tuple[list[dict[str, object]], dict[str, object]]:  # type: ignore[no-untyped-def]
    meta, responses = validate_attempt(*attempt(url, ts, hops=hops)).rows()
    return responses, meta


def test_clean_store_is_clean(index: WebIndex) -> None:
    index.insert_many(
        [attempt(f"https://a.example.com/{n}", T0 + timedelta(days=n), hops=2) for n in range(40)]
    )
    index.flush()
    index.insert(*attempt("https://a.example.com/buffered"))
    report = index.verify()
    assert report.ok and not report.notes and report.records > 0 and report.buffered_attempts == 1


def test_data_in_the_wrong_domain_month_or_order(index: WebIndex, store_path: Path) -> None:
    get = Partition(RecordType.GET, 2024, 8, "example.com")
    responses, _ = _rows("https://other.org/x")
    _write(index, get, responses)  # domain other.org in example.com's file, and no metadata
    responses, _ = _rows("https://example.com/late", T0 + timedelta(days=40))
    _write(index, get, responses)  # September attempt in the August folder
    r1, _ = _rows("https://example.com/b")
    r2, _ = _rows("https://example.com/a")
    _write(index, get, r1 + r2, sort=False)
    before = sorted(p.stat().st_mtime_ns for p in store_path.rglob("*.parquet"))
    problems = " | ".join(str(p) for p in index.verify().problems)
    assert "belongs in domain other.org" in problems
    assert "timestamp outside get/2024/08" in problems
    assert "not sorted" in problems
    assert "data without a metadata record" in problems
    assert sorted(p.stat().st_mtime_ns for p in store_path.rglob("*.parquet")) == before  # changed nothing


def test_broken_chains_and_duplicates(index: WebIndex) -> None:
    get = Partition(RecordType.GET, 2024, 8, "example.com")
    meta = Partition(RecordType.GET_METADATA, 2024, 8, "example.com")
    responses, metadata = _rows("https://example.com/x", hops=3)
    _write(index, get, [responses[0], responses[2]])  # a gap in the chain
    _write(index, meta, [metadata])
    responses, metadata = _rows("https://example.com/y", hops=2)
    _write(index, get, [responses[0], {**responses[1], "is_final": False}])
    _write(index, meta, [metadata])
    _write(index, meta, [metadata])  # the same record in two visible parts
    problems = " | ".join(str(p) for p in index.verify().problems)
    assert "chain has gaps" in problems
    assert "is_final must mark the last response only" in problems
    assert "also stored in" in problems


def test_success_without_data_and_foreign_files(index: WebIndex, store_path: Path) -> None:
    _, metadata = _rows("https://example.com/x")
    _write(index, Partition(RecordType.GET_METADATA, 2024, 8, "example.com"), [metadata])
    (store_path / "get-metadata" / "2024" / "08" / "notes.txt").write_text("hello")
    problems = " | ".join(str(p) for p in index.verify().problems)
    assert "successful attempt without data records" in problems
    assert "foreign file name" in problems


def test_wrong_schema(index: WebIndex) -> None:
    table = pa.table({"url_key": ["https://example.com/"]})
    part = Partition(RecordType.GET, 2024, 8, "example.com")
    index._store.backend.write_parquet(part.part_path(str(uuid.uuid4())), table)
    assert any("schema differs" in str(p) for p in index.verify().problems)
