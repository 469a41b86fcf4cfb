"""Bulk answering: a Parquet file of queries to a Parquet file of results, streamed."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from typer.testing import CliRunner

from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.cli import app
from web_index.models import (
    RESULT_SCHEMA,
    AttemptMetadata,
    Page,
    Query,
    SimplePageQuery,
    TimeAwarePageQuery,
    write_queries,
)


def _store(root: Path) -> list[Query]:
    rng = random.Random(3)
    items = []
    for k in range(60):
        url = f"https://www.site{k % 7}.com/p/{k % 20}"
        state = "success" if rng.random() < 0.8 else "timeout"
        items.append(
            attempt(url, T0 + timedelta(days=k), state=state, hops=rng.choice([1, 2]), body=b"x" * k)
        )
    with WebIndex(root) as idx:
        keys = idx.insert_many(items)
        idx.flush()
        idx.compact()
    queries: list[Query] = list(keys)
    for k in keys:
        queries.append(SimplePageQuery(url=k.url, type="get-metadata"))
        queries.append(TimeAwarePageQuery(url=k.url, timestamp=k.timestamp + timedelta(days=2)))
        queries.append(SimplePageQuery(url=k.url + "/missing"))
    return queries


def _expected_row(i: int, q: Query, r: Page | AttemptMetadata | None) -> dict[str, Any]:
    row: dict[str, Any] = {"query": i, "type": q.type.value, "url": q.url, "found": r is not None}
    if isinstance(r, Page):
        row["request_id"] = r.request_id
        row["chain"] = [(x.request_url, x.status_code, x.data, dict(x.headers)) for x in r.responses]
    elif isinstance(r, AttemptMetadata):
        row["request_id"] = r.request_id
        row["state"] = r.state.value
    return row


def _file_rows(path: Path) -> list[dict[str, Any]]:
    table = pq.read_table(path)
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    out = []
    for row in table.to_pylist():
        got: dict[str, Any] = {k: row[k] for k in ("query", "type", "url", "found")}
        if row["responses"] is not None:
            got["request_id"] = row["request_id"]
            got["chain"] = [
                (x["request_url"], x["status_code"], x["data"], dict(x["headers"])) for x in row["responses"]
            ]
        elif row["state"] is not None:
            got["request_id"] = row["request_id"]
            got["state"] = row["state"]
        out.append(got)
    return out


def test_query_file_writes_one_row_per_query_equal_to_query(tmp_path: Path) -> None:
    queries = _store(tmp_path / "s")
    write_queries(tmp_path / "q.parquet", queries)
    with WebIndex(tmp_path / "s", read_only=True) as idx:
        n = idx.query_file(tmp_path / "q.parquet", tmp_path / "r.parquet", batch_size=7)
        expected = [
            _expected_row(i, q, r) for i, (q, r) in enumerate(zip(queries, idx.query(queries), strict=True))
        ]
    assert n == len(queries)
    assert _file_rows(tmp_path / "r.parquet") == expected
    assert any(e["found"] for e in expected) and not all(e["found"] for e in expected)


def test_iter_query_pulls_one_batch_at_a_time(tmp_path: Path) -> None:
    queries = _store(tmp_path / "s")
    pulled = 0

    def source() -> Iterator[Query]:
        nonlocal pulled
        for q in queries:
            pulled += 1
            yield q

    with WebIndex(tmp_path / "s", read_only=True) as idx:
        stream = idx.iter_query(source(), batch_size=10)
        first = next(stream)
        assert pulled == 10  # not the whole input
        rest = list(stream)
        assert [q for q, _ in [first, *rest]] == queries
        assert [r for _, r in [first, *rest]] == idx.query(queries)


def test_cli_query_output_parquet(tmp_path: Path) -> None:
    queries = _store(tmp_path / "s")
    write_queries(tmp_path / "q.parquet", queries)
    result = CliRunner().invoke(
        app,
        [
            "query",
            "--store",
            str(tmp_path / "s"),
            "--from",
            str(tmp_path / "q.parquet"),
            "-o",
            str(tmp_path / "r.parquet"),
        ],
    )
    assert result.exit_code == 0, result.output
    with WebIndex(tmp_path / "s", read_only=True) as idx:
        expected = [
            _expected_row(i, q, r) for i, (q, r) in enumerate(zip(queries, idx.query(queries), strict=True))
        ]
    assert _file_rows(tmp_path / "r.parquet") == expected
