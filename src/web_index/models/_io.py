from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from web_index.models._queries import KIND_OF, Query, query_from_dict
from web_index.models._records import AttemptMetadata, Page
from web_index.models._time import clamp_us, from_us

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "QUERY_SCHEMA",
    "RESULT_SCHEMA",
    "iter_queries",
    "queries_of",
    "query_schema",
    "query_table",
    "read_queries",
    "result_schema",
    "result_table",
    "write_queries",
    "write_results",
]


# The schemas are built on first use (``QUERY_SCHEMA`` and ``RESULT_SCHEMA`` too, through
# ``__getattr__``): reading a capture imports no pyarrow (~45 MiB of a server worker).
@functools.cache
def query_schema() -> pa.Schema:
    """The columns of a Parquet file of queries (:data:`QUERY_SCHEMA`)."""
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    fields: list[pa.Field[Any]] = [
        pa.field("kind", pa.string(), nullable=False),
        pa.field("type", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("timestamp", ts),
        pa.field("request_id", pa.string()),
        pa.field("not_before", ts),
        pa.field("not_after", ts),
        pa.field("calibre", pa.uint8()),
        pa.field("calibre_strict", pa.bool_()),
    ]
    return pa.schema(fields)


# query_schema()'s names, which a query's row needs without pyarrow.
_QUERY_COLUMNS = (
    "kind",
    "type",
    "url",
    "timestamp",
    "request_id",
    "not_before",
    "not_after",
    "calibre",
    "calibre_strict",
)


def _row(query: Query) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(_QUERY_COLUMNS)
    row["kind"] = KIND_OF[type(query)]
    for name in _QUERY_COLUMNS[1:]:
        if hasattr(query, name):
            row[name] = getattr(query, name)
    row["type"] = query.type.value
    return row


def write_queries(path: str | os.PathLike[str], queries: Iterable[Query], *, batch_size: int = 65_536) -> int:
    """Write queries to a Parquet file (native UTC timestamps); return how many.

    Streams in batches, so a generator of millions of queries never sits in
    memory at once.
    """
    return _write_rows(path, query_schema(), map(_row, queries), batch_size)


def _write_rows(
    path: str | os.PathLike[str], schema: pa.Schema, rows: Iterable[dict[str, Any]], batch_size: int
) -> int:
    """Stream rows into a Parquet file ``batch_size`` at a time; return how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    count = 0
    with pq.ParquetWriter(os.fspath(path), schema, compression="zstd") as writer:
        batch: list[dict[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= batch_size:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def iter_queries(path: str | os.PathLike[str], *, batch_size: int = 65_536) -> Iterator[Query]:
    """Stream queries from a Parquet file written by :func:`write_queries`.

    Also reads files whose timestamps are ISO 8601 strings (the standard's
    serialised form) and files without a ``kind`` column.
    """
    import pyarrow.parquet as pq

    file = pq.ParquetFile(os.fspath(path))
    for batch in file.iter_batches(batch_size=batch_size):
        yield from queries_of(batch, path)


_TIME_FIELDS = ("timestamp", "not_before", "not_after")


def queries_of(rows: pa.RecordBatch | pa.Table, source: object = "queries") -> list[Query]:
    """The queries of a table of query rows (the columns of :data:`QUERY_SCHEMA`, or
    any subset :func:`iter_queries` reads); ``source`` names it in errors."""
    import pyarrow as pa

    # Timestamp columns come out as microseconds: pyarrow makes a zone-aware
    # datetime several times slower than from_us does (0.8 of 2.1 s a 100,000 queries).
    table: pa.Table = pa.Table.from_batches([rows]) if isinstance(rows, pa.RecordBatch) else rows
    times: list[str] = []
    for i, field in enumerate(table.schema):
        if field.name in _TIME_FIELDS and pa.types.is_timestamp(field.type):
            if field.type.tz is None:
                raise ValueError(f"{source}: column {field.name} holds naive timestamps")
            micros = table.column(i).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            table = table.set_column(i, field.name, micros)
            times.append(field.name)
    out: list[Query] = []
    for row in table.to_pylist():
        for name in times:
            value = row[name]
            if value is not None:
                # A query time beyond datetime's years 1-9999 answers as the
                # nearest one that is not (no stored record is near either end).
                row[name] = from_us(clamp_us(value))
        out.append(query_from_dict(row))
    return out


def query_table(queries: Iterable[Query]) -> pa.Table:
    """Queries as a :data:`QUERY_SCHEMA` table (what :func:`write_queries` writes)."""
    import pyarrow as pa

    return pa.Table.from_pylist([_row(q) for q in queries], schema=query_schema())


def read_queries(path: str | os.PathLike[str]) -> list[Query]:
    """All queries of a Parquet file, in file order."""
    return list(iter_queries(path))


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


if TYPE_CHECKING:
    QUERY_SCHEMA: pa.Schema
    RESULT_SCHEMA: pa.Schema
    """One row per query: ``query`` is its position in the input; ``found`` false
    leaves the rest null. Pages fill ``responses`` (chain order), metadata fills
    ``state``/``logs``/``traceback``/``run_time``."""


def __getattr__(name: str) -> Any:
    if name == "QUERY_SCHEMA":
        return query_schema()
    if name == "RESULT_SCHEMA":
        return result_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _result_row(position: int, query: Query, result: Page | AttemptMetadata | None) -> dict[str, Any]:
    row: dict[str, Any] = {"query": position, "type": query.type.value, "url": query.url, "found": False}
    if isinstance(result, Page):
        final = result.final
        row.update(
            found=True,
            request_id=result.request_id,
            timestamp=result.timestamp,
            fetcher_name=final.fetcher_name,
            fetcher_version=final.fetcher_version,
            fetcher_calibre=final.fetcher_calibre,
            responses=[
                {
                    "url": r.url,
                    "request_url": r.request_url,
                    "status_code": r.status_code,
                    "headers": list(r.headers.items()),
                    "timestamp": r.timestamp,
                    "data": r.data,
                    "retry_attempt": r.retry_attempt,
                    "is_final": r.is_final,
                }
                for r in result.responses
            ],
        )
    elif isinstance(result, AttemptMetadata):
        row.update(
            found=True,
            request_id=result.request_id,
            timestamp=result.timestamp,
            fetcher_name=result.fetcher_name,
            fetcher_version=result.fetcher_version,
            fetcher_calibre=result.fetcher_calibre,
            state=result.state.value,
            logs=result.logs,
            traceback=result.traceback,
            run_time=result.run_time,
        )
    return row


def write_results(
    path: str | os.PathLike[str],
    results: Iterable[tuple[Query, Page | AttemptMetadata | None]],
    *,
    batch_size: int = 4096,
) -> int:
    """Write ``(query, result)`` pairs to a Parquet file (:data:`RESULT_SCHEMA`), streaming.

    Rows are numbered in input order; return how many were written.
    """
    rows = (_result_row(n, query, result) for n, (query, result) in enumerate(results))
    return _write_rows(path, result_schema(), rows, batch_size)


def result_table(results: Iterable[tuple[int, Query, Page | AttemptMetadata | None]]) -> pa.Table:
    """``(position, query, result)`` triples as a :data:`RESULT_SCHEMA` table, in the order given."""
    import pyarrow as pa

    return pa.Table.from_pylist([_result_row(n, q, r) for n, q, r in results], schema=result_schema())
