from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from web_index.errors import InvalidRecordError
from web_index.models._fields import field_names
from web_index.models._queries import KIND_OF, KINDS, Query, query_from_dict
from web_index.models._time import clamp_us, from_us

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "QUERY_SCHEMA",
    "iter_queries",
    "queries_of",
    "query_schema",
    "query_table",
    "read_queries",
    "write_queries",
]


# The schema is built on first use (``QUERY_SCHEMA`` too, through
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
    first = 0
    for batch in file.iter_batches(batch_size=batch_size):
        yield from queries_of(batch, path, range(first, first + batch.num_rows))
        first += batch.num_rows


_TIME_FIELDS = ("timestamp", "not_before", "not_after")


def queries_of(
    rows: pa.RecordBatch | pa.Table, source: object = "queries", numbers: Sequence[int] | None = None
) -> list[Query]:
    """The queries of a table of query rows (the columns of :data:`QUERY_SCHEMA`, or
    any subset :func:`iter_queries` reads); ``source`` names it in errors, and
    ``numbers`` each row's number in it (by default its position in ``rows``)."""
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
    # Column by column, each row's query made by its class: a dict per row from
    # ``to_pylist()`` through query_from_dict cost a third more (6 µs a query).
    names = table.column_names
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    timed = frozenset(times)
    out: list[Query] = []
    each = zip(*columns, strict=True) if columns else itertools.repeat((), table.num_rows)
    for values in each:
        # A query time beyond datetime's years 1-9999 answers as the nearest one
        # that is not (no stored record is near either end).
        row = {
            n: from_us(clamp_us(v)) if n in timed else v
            for n, v in zip(names, values, strict=True)
            if v is not None
        }
        try:
            out.append(_query_of(row))
        except InvalidRecordError as exc:
            n = len(out) if numbers is None else numbers[len(out)]
            where = os.fspath(source) if isinstance(source, os.PathLike) else source
            raise InvalidRecordError(f"{where}, row {n}", str(exc)) from None
    return out


def _query_of(row: dict[str, Any]) -> Query:
    """``query_from_dict(row)`` for a row without nulls; a row of a known kind whose fields
    are its class's made by the class at once."""
    kind = row.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is not None:
        del row["kind"]
        if row.keys() <= field_names(cls):
            try:
                query: Query = cls(**row)
            except TypeError:  # a field missing: said as query_from_dict says it
                pass
            else:
                return query
        row["kind"] = kind
    return query_from_dict(row)


def query_table(queries: Iterable[Query]) -> pa.Table:
    """Queries as a :data:`QUERY_SCHEMA` table (what :func:`write_queries` writes)."""
    import pyarrow as pa

    return pa.Table.from_pylist([_row(q) for q in queries], schema=query_schema())


def read_queries(path: str | os.PathLike[str]) -> list[Query]:
    """All queries of a Parquet file, in file order."""
    return list(iter_queries(path))


if TYPE_CHECKING:
    QUERY_SCHEMA: pa.Schema


def __getattr__(name: str) -> Any:
    if name == "QUERY_SCHEMA":
        return query_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
