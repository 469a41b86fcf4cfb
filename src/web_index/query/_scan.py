"""Every stored record of a type, in order, as results: what ``WebIndex.scan`` gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from web_index.models import AttemptMetadata, Page, RecordType
from web_index.query._results import build_result, timestamps_as_int
from web_index.storage import ScanFilter, Store, scan

__all__ = ["scan_records"]


def scan_records(store: Store, type: RecordType, where: ScanFilter) -> Iterator[Page | AttemptMetadata]:
    """Pages (data types) or metadata records, partition by partition (months
    oldest first, domains by name), in each by URL key, time and request id."""
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


def _page(type: RecordType, rows: list[dict[str, Any]]) -> Page:
    page = build_result(type, None, rows)
    assert isinstance(page, Page)
    return page
