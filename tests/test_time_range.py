"""A month the store cannot plan over (9999-12, written by a version that let such
a date in) breaks nothing: queries skip it, ``verify`` reports it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tests.factories import T0, attempt
from web_index import WebIndex, WriteOptions
from web_index.ingest import validate_attempt
from web_index.models import PageKey, RecordType, SimplePageQuery, TimeAwarePageQuery
from web_index.models._time import month_bounds, to_us
from web_index.storage import Partition
from web_index.storage._files import write_partition_file
from web_index.storage._tables import rows_to_table, sort_dedupe

FAR = datetime(9999, 12, 31, tzinfo=UTC)


def _store_far_record(index: WebIndex, url: str) -> str:
    """Write an attempt dated 9999-12-31 as its part files, as a flush did before
    such dates were refused at insert. Returns its request id."""
    meta, responses = validate_attempt(*attempt(url, T0)).rows()
    far = to_us(FAR)
    meta["timestamp"] = far
    for r in responses:
        r["attempt_timestamp"] = r["timestamp"] = far
    for type, rows in ((RecordType.GET, responses), (RecordType.GET_METADATA, [meta])):
        partition = Partition(type, 9999, 12, "example.com")
        table = sort_dedupe(type, rows_to_table(type, rows))
        write_partition_file(index._store.backend, partition, table, WriteOptions(), part=str(uuid.uuid4()))
    return str(meta["request_id"])


@pytest.mark.parametrize("compacted", [False, True])
def test_a_month_out_of_range_is_skipped_by_queries_and_reported_by_verify(
    index: WebIndex, compacted: bool
) -> None:
    url = "https://www.example.com/"
    key = index.insert(*attempt(url, T0))
    index.insert(*attempt("https://other.org/", T0 + timedelta(days=3)))
    index.flush()
    rid = _store_far_record(index, url)
    if compacted:
        index.compact()
    queries = [
        SimplePageQuery(url=url),
        SimplePageQuery(url=url, type="get-metadata"),
        SimplePageQuery(url="https://other.org/"),
        TimeAwarePageQuery(url=url, not_before=T0 - timedelta(days=1), timestamp=FAR),
        PageKey(url=url, timestamp=FAR, request_id=rid),
        key,
    ]
    got = index.query(queries)
    assert [r.request_id if r else None for r in got] == [
        key.request_id,
        key.request_id,
        got[2].request_id if got[2] else "missing",
        key.request_id,
        None,
        key.request_id,
    ]
    assert index.presence(queries) == [True, True, True, True, False, True]
    report = index.verify()
    where = sorted(str(p.where) for p in report.problems)
    assert where == ["get-metadata/9999/12", "get/9999/12"], report.problems
    assert all("outside the times the store accepts" in p.message for p in report.problems)
    assert index.stats() is not None


def test_month_bounds_hold_for_every_year_a_folder_can_name() -> None:
    assert month_bounds(9999, 12) == (to_us(datetime(9999, 12, 1, tzinfo=UTC)), 253402300800000000)
    for year in (1, 1969, 1970, 2024, 9998):
        for month in (1, 2, 12):
            start, end = month_bounds(year, month)
            assert start == to_us(datetime(year, month, 1, tzinfo=UTC))
            assert end - start in {d * 86_400_000_000 for d in (28, 29, 30, 31)}
