from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from web_index.models._queries import KIND_OF, Query, query_from_dict

__all__ = ["QUERY_SCHEMA", "iter_queries", "read_queries", "write_queries"]

_TS = pa.timestamp("us", tz="UTC")
_FIELDS: list[pa.Field[Any]] = [
    pa.field("kind", pa.string(), nullable=False),
    pa.field("type", pa.string(), nullable=False),
    pa.field("url", pa.string(), nullable=False),
    pa.field("timestamp", _TS),
    pa.field("request_id", pa.string()),
    pa.field("not_before", _TS),
    pa.field("not_after", _TS),
    pa.field("calibre", pa.uint8()),
    pa.field("calibre_strict", pa.bool_()),
]
QUERY_SCHEMA = pa.schema(_FIELDS)


def _row(query: Query) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(QUERY_SCHEMA.names)
    row["kind"] = KIND_OF[type(query)]
    for name in QUERY_SCHEMA.names[1:]:
        if hasattr(query, name):
            row[name] = getattr(query, name)
    row["type"] = query.type.value
    return row


def write_queries(path: str | os.PathLike[str], queries: Iterable[Query], *, batch_size: int = 65_536) -> int:
    """Write queries to a Parquet file (native UTC timestamps); return how many.

    Streams in batches, so a generator of millions of queries never sits in
    memory at once.
    """
    count = 0
    with pq.ParquetWriter(os.fspath(path), QUERY_SCHEMA, compression="zstd") as writer:
        batch: list[dict[str, Any]] = []
        for query in queries:
            batch.append(_row(query))
            if len(batch) >= batch_size:
                writer.write_table(pa.Table.from_pylist(batch, schema=QUERY_SCHEMA))
                count += len(batch)
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=QUERY_SCHEMA))
            count += len(batch)
    return count


def iter_queries(path: str | os.PathLike[str], *, batch_size: int = 65_536) -> Iterator[Query]:
    """Stream queries from a Parquet file written by :func:`write_queries`.

    Also reads files whose timestamps are ISO 8601 strings (the standard's
    serialised form) and files without a ``kind`` column.
    """
    file = pq.ParquetFile(os.fspath(path))
    for batch in file.iter_batches(batch_size=batch_size):
        for row in batch.to_pylist():
            for name in ("timestamp", "not_before", "not_after"):
                value = row.get(name)
                if isinstance(value, datetime) and value.tzinfo is None:
                    raise ValueError(f"{path}: column {name} holds naive timestamps")
            yield query_from_dict(row)


def read_queries(path: str | os.PathLike[str]) -> list[Query]:
    """All queries of a Parquet file, in file order."""
    return list(iter_queries(path))
