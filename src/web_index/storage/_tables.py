"""Arrow tables of one record type: built from Python values, brought to the type's exact
schema, sorted with each record once. What a partition's files are written from."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from web_index.models import RecordType, payload_digests
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN, SORT_KEYS, schemas

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "columns_to_table",
    "conform",
    "record_order",
    "rows_to_table",
    "sort_dedupe",
    "sorted_unique",
]


def rows_to_table(type: RecordType, rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Rows (as validation builds them: no digests) as a table of the type's schema."""
    names = [f.name for f in schemas()[type] if f.name not in DIGEST_COLUMNS]
    return columns_to_table(type, {name: [row.get(name) for row in rows] for name in names})


def columns_to_table(type: RecordType, columns: Mapping[str, Sequence[Any]]) -> pa.Table:
    """Columns of Python values (timestamps as microseconds) as a table of the
    type's schema; a column not given is null, and payload digests not given are
    computed (see :func:`conform`)."""
    import pyarrow as pa

    schema = schemas()[type]
    n = len(next(iter(columns.values()))) if columns else 0
    arrays = []
    names = []
    for field in schema:
        values = columns.get(field.name)
        if values is None:
            if field.name in DIGEST_COLUMNS:
                continue
            values = [None] * n
        if pa.types.is_timestamp(field.type):
            arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
        elif field.name == BODY_COLUMN:
            arrays.append(_bodies_array(values, field.type))
        else:
            arrays.append(pa.array(values, type=field.type))
        names.append(field.name)
    return conform(type, pa.Table.from_arrays(arrays, names=names))


def _bodies_array(bodies: Sequence[bytes | None], type: pa.DataType) -> pa.Array[Any]:
    """Bodies as one Arrow array made of their bytes joined: ``pa.array`` grows its buffer
    by doubling, and 70 MiB of bodies peaked at 186 MiB (a bulk load's chunk is 64 MiB)."""
    import itertools

    import numpy as np
    import pyarrow as pa

    if None in bodies:
        return pa.array(bodies, type=type)
    offsets = np.fromiter(
        itertools.accumulate((len(b) for b in bodies), initial=0),  # type: ignore[arg-type]
        dtype=np.int64 if pa.types.is_large_binary(type) else np.int32,
        count=len(bodies) + 1,
    )
    data = b"".join(bodies)  # type: ignore[arg-type]
    return pa.Array.from_buffers(type, len(bodies), [None, pa.py_buffer(offsets.data), pa.py_buffer(data)])


def conform(type: RecordType, table: pa.Table) -> pa.Table:
    """``table`` with the type's exact schema: the payload digests of a ``get``
    table that has none (rows from the buffer, a file written before digests
    were stored) computed from its bodies, and every column cast (files read
    back ``binary``/``string`` where the schema says ``large_*``)."""
    import pyarrow as pa

    schema = schemas()[type]
    if table.schema.equals(schema, check_metadata=True):
        # Already exact (a bulk load's spilled runs, merged): the select and cast below
        # would give it back unchanged, for ~85 us a call, thousands of calls a load.
        return table
    if type is RecordType.GET and DIGEST_COLUMNS[0] not in table.column_names:
        # Never null: a get row has a body (b"" at least).
        pairs = [payload_digests(body or b"") for body in table.column(BODY_COLUMN).to_pylist()]
        table = table.append_column(
            DIGEST_COLUMNS[0], pa.array([p[0] for p in pairs], type=pa.binary(20))
        ).append_column(DIGEST_COLUMNS[1], pa.array([p[1] for p in pairs], type=pa.binary(32)))
    if type is RecordType.GET and REF_COLUMN not in table.column_names:
        # Rows from the buffer, or a file written before references: each holds its body.
        table = table.append_column(REF_COLUMN, pa.nulls(table.num_rows, pa.string()))
    return table.select(schema.names).cast(schema)


def sort_dedupe(type: RecordType, table: pa.Table) -> pa.Table:
    """``table`` sorted by the type's sort key, each record once, with one copy
    of its bodies: the order is found on the key columns alone, then taken.

    (A polars round trip copied the bodies at each step: compacting one 64 MiB
    body peaked at 12.5 times its size.)
    """
    return conform(type, table.take(record_order(type, table)))


def record_order(type: RecordType, table: pa.Table) -> pa.Array[Any]:
    """The rows of :func:`sort_dedupe`'s table, as indices into ``table``."""
    keys = SORT_KEYS[type]
    # One record is one identity (request id, chain index), and its copies sort
    # next to each other (same URL key and time).
    return unique_order(table, keys, keys[2:])


def sorted_unique(table: pa.Table, keys: Sequence[str], identity: Sequence[str]) -> pa.Table:
    """``table`` sorted by ``keys``, keeping the first of each run of rows with
    equal ``identity`` columns (never null), in one take of every column."""
    return table.take(unique_order(table, keys, identity))


def unique_order(table: pa.Table, keys: Sequence[str], identity: Sequence[str]) -> pa.Array[Any]:
    """The rows of :func:`sorted_unique`'s table, as indices into ``table``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    order = pc.sort_indices(table.select(keys), sort_keys=[(k, "ascending") for k in keys])
    ids = table.select(identity).take(order)
    n = len(order)
    if n > 1:
        repeated: pa.BooleanArray | None = None  # row i+1 is row i again
        for name in ids.column_names:
            column = ids.column(name).combine_chunks()
            equal = pc.equal(column.slice(1), column.slice(0, n - 1))
            repeated = equal if repeated is None else pc.and_(repeated, equal)
        if repeated is not None and pc.any(repeated).as_py():
            keep = pa.concat_arrays([pa.array([True]), pc.invert(repeated)])
            order = pc.filter(order, keep)
    return order
