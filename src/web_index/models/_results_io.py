"""Answers as Arrow: the columns of a Parquet file of results, laid out a batch at a time.

A batch of results is laid out column by column (the chains' responses and their
header fields flattened, with offsets) and handed to Arrow as whole columns: a row
dict per result and a nested one per response, converted by ``Table.from_pylist``,
cost ~4x more and were the largest part of a million-query bulk run.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from web_index.models._enums import RecordType
from web_index.models._queries import Query
from web_index.models._records import AttemptMetadata, Page

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["RESULT_SCHEMA", "result_schema", "result_table", "write_results"]


@functools.cache
def result_schema() -> pa.Schema:
    """The columns of a Parquet file of results (:data:`RESULT_SCHEMA`)."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    response = pa.struct(
        [
            pa.field("url", pa.string()),
            pa.field("request_url", pa.string()),
            pa.field("status_code", pa.int16()),
            pa.field("headers", pa.map_(pa.string(), pa.string())),
            pa.field("timestamp", ts),
            pa.field("data", pa.large_binary()),
            pa.field("retry_attempt", pa.uint8()),
            pa.field("is_final", pa.bool_()),
        ]
    )
    fields: list[pa.Field[Any]] = [
        pa.field("query", pa.int64(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("found", pa.bool_(), nullable=False),
        pa.field("request_id", pa.string()),
        pa.field("timestamp", ts),
        pa.field("fetcher_name", pa.string()),
        pa.field("fetcher_version", pa.string()),
        pa.field("fetcher_calibre", pa.uint8()),
        pa.field("responses", pa.list_(response)),
        pa.field("state", pa.string()),
        pa.field("logs", pa.large_string()),
        pa.field("traceback", pa.large_string()),
        pa.field("run_time", pa.float64()),
    ]
    return pa.schema(fields)


class _Columns:
    """One batch's result columns as Python lists, and its responses' (flattened)."""

    def __init__(self) -> None:
        # One list a result column, in result_schema()'s order but for ``responses``.
        self.top: dict[str, list[Any]] = {name: [] for name in result_schema().names if name != "responses"}
        self.chain_ends: list[int] = [0]
        self.no_chain: list[bool] = []
        self.resp: dict[str, list[Any]] = {
            name: []
            for name in (
                "url",
                "request_url",
                "status_code",
                "timestamp",
                "data",
                "retry_attempt",
                "is_final",
            )
        }
        self.header_ends: list[int] = [0]
        self.names: list[str] = []
        self.values: list[str] = []

    def add(self, position: int, type: RecordType, url: str, result: Page | AttemptMetadata | None) -> None:
        top = self.top
        top["query"].append(position)
        top["type"].append(type.value)
        top["url"].append(url)
        top["found"].append(result is not None)
        if isinstance(result, Page):
            final = result.final
            self._attempt(
                result.request_id,
                result.timestamp,
                final.fetcher_name,
                final.fetcher_version,
                final.fetcher_calibre,
            )
            for name in ("state", "logs", "traceback", "run_time"):
                top[name].append(None)
            resp = self.resp
            for r in result.responses:
                resp["url"].append(r.url)
                resp["request_url"].append(r.request_url)
                resp["status_code"].append(r.status_code)
                resp["timestamp"].append(r.timestamp)
                resp["data"].append(r.data)
                resp["retry_attempt"].append(r.retry_attempt)
                resp["is_final"].append(r.is_final)
                self.names += r.headers.keys()
                self.values += r.headers.values()
                self.header_ends.append(len(self.names))
            self.chain_ends.append(len(resp["url"]))
            self.no_chain.append(False)
            return
        if isinstance(result, AttemptMetadata):
            self._attempt(
                result.request_id,
                result.timestamp,
                result.fetcher_name,
                result.fetcher_version,
                result.fetcher_calibre,
            )
            top["state"].append(result.state.value)
            top["logs"].append(result.logs)
            top["traceback"].append(result.traceback)
            top["run_time"].append(result.run_time)
        else:
            for name in (
                "request_id",
                "timestamp",
                "fetcher_name",
                "fetcher_version",
                "fetcher_calibre",
                "state",
                "logs",
                "traceback",
                "run_time",
            ):
                top[name].append(None)
        self.chain_ends.append(self.chain_ends[-1])
        self.no_chain.append(True)

    def _attempt(self, request_id: Any, timestamp: Any, name: str, version: str, calibre: int) -> None:
        top = self.top
        top["request_id"].append(request_id)
        top["timestamp"].append(timestamp)
        top["fetcher_name"].append(name)
        top["fetcher_version"].append(version)
        top["fetcher_calibre"].append(calibre)

    def table(self) -> pa.Table:
        import pyarrow as pa

        schema = result_schema()
        response: Any = schema.field("responses").type.value_type
        fields = []
        for field in response:
            if field.name == "headers":
                # The stubs type a map's offsets as int64; Arrow's are int32.
                offsets: Any = pa.array(self.header_ends, pa.int32())
                names, values = pa.array(self.names, pa.string()), pa.array(self.values, pa.string())
                fields.append(pa.MapArray.from_arrays(offsets, names, values))
            else:
                fields.append(pa.array(self.resp[field.name], field.type))
        chains = pa.ListArray.from_arrays(
            pa.array(self.chain_ends, pa.int32()),
            pa.StructArray.from_arrays(fields, fields=list(response)),
            type=schema.field("responses").type,
            mask=pa.array(self.no_chain, pa.bool_()),
        )
        columns = [
            chains if field.name == "responses" else pa.array(self.top[field.name], field.type)
            for field in schema
        ]
        return pa.Table.from_arrays(columns, schema=schema)


def result_table(results: Iterable[tuple[int, RecordType, str, Page | AttemptMetadata | None]]) -> pa.Table:
    """``(position, type, url, result)`` of each query (the type and URL it asked for) as a
    :data:`RESULT_SCHEMA` table, in the order given."""
    columns = _Columns()
    for position, type, url, result in results:
        columns.add(position, type, url, result)
    return columns.table()


def write_results(
    path: str | os.PathLike[str],
    results: Iterable[tuple[Query, Page | AttemptMetadata | None]],
    *,
    batch_size: int = 4096,
) -> int:
    """Write ``(query, result)`` pairs to a Parquet file (:data:`RESULT_SCHEMA`), streaming.

    Rows are numbered in input order; return how many were written.
    """
    import pyarrow.parquet as pq

    count = 0
    pairs = iter(results)
    with pq.ParquetWriter(os.fspath(path), result_schema(), compression="zstd") as writer:
        while batch := list(itertools.islice(pairs, batch_size)):
            writer.write_table(result_table((count + n, q.type, q.url, r) for n, (q, r) in enumerate(batch)))
            count += len(batch)
        if count == 0:
            writer.write_table(result_schema().empty_table())
    return count


if TYPE_CHECKING:
    RESULT_SCHEMA: pa.Schema
    """One row per query: ``query`` is its position in the input; ``found`` false
    leaves the rest null. Pages fill ``responses`` (chain order), metadata fills
    ``state``/``logs``/``traceback``/``run_time``."""


def __getattr__(name: str) -> Any:
    if name == "RESULT_SCHEMA":
        return result_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
