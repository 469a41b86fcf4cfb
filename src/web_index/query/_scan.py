"""Every stored record of a type, in order, as results: what ``WebIndex.scan`` gives."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from web_index.models import AttemptMetadata, Page, RecordType, parse_ts, parse_when, to_us
from web_index.query._results import build_result, timestamps_as_int
from web_index.storage import ScanFilter, Store, scan
from web_index.urls import domain_of, url_key

__all__ = ["scan_records", "time_bound"]


def scan_records(
    store: Store,
    type: RecordType,
    *,
    domain: str | None = None,
    url_prefix: str | None = None,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
) -> Iterator[Page | AttemptMetadata]:
    """Pages (data types) or metadata records, partition by partition (months
    oldest first, domains by name), in each by URL key, time and request id;
    filtered as :meth:`WebIndex.scan` says. A bad filter raises here, not on
    the first record."""
    host = None if domain is None else domain_of(f"http://{domain.strip().strip('.')}/")
    if url_prefix is not None:
        if host is not None and host != domain_of(url_prefix):
            return iter(())  # the prefix lies outside the domain: nothing is in both
        host = domain_of(url_prefix)
    where = ScanFilter(
        domain=host,
        url_key_prefix=None if url_prefix is None else url_key(url_prefix),
        start_us=None if start is None else to_us(time_bound(start, "start", end=False)),
        end_us=None if end is None else to_us(time_bound(end, "end", end=True)),
    )
    return _records(store, type, where)


def _records(store: Store, type: RecordType, where: ScanFilter) -> Iterator[Page | AttemptMetadata]:
    chain: list[dict[str, Any]] = []
    for _partition, table in scan(store, type, where):
        for row in timestamps_as_int(table).to_pylist():
            if type.is_metadata:
                result = build_result(type, row, [])
                assert result is not None
                yield result
            elif chain and row["request_id"] != chain[0]["request_id"]:
                yield _page(type, chain)
                chain = [row]
            else:
                chain.append(row)
    if chain:
        yield _page(type, chain)


def time_bound(value: datetime | str, field: str, *, end: bool) -> datetime:
    """A ``start`` or ``end`` given as a datetime, a date or a CDX timestamp (a
    partial ``end`` reaches the last moment it names); an error names ``field``."""
    if isinstance(value, datetime):
        return parse_ts(value, field)
    return parse_when(value, field, end=end)


def _page(type: RecordType, rows: list[dict[str, Any]]) -> Page:
    page = build_result(type, None, rows)
    assert isinstance(page, Page)
    return page
