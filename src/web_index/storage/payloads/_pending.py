"""Payloads a bulk load is told of instead of given: a response whose body is
that of another response the same load took, in the same partition (a WARC
revisit whose original the import read a moment before).

The load spills such a row with an empty ``data`` and, in ``payload_ref``,
:data:`PENDING` and its holder's request id (``_load._partition_tables``).
Whoever reads a partition's rows back from the spill (``_load_work``) fills
the row in from its holder before anything else sees it: the holder's body
and digests, and no reference. Sharing then makes it a reference, as it does
any fresh row whose payload another row holds; a partition that does not
share keeps the copy. So a pending row is never written as one, and the
revisit costs no second load and no rewrite of the partition that load would
have compacted.

A pending row whose holder is not in its partition's rows (a caller's
mistake) is a :class:`StoreError` naming both: the load commits nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from web_index.errors import StoreError
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["HOLDER_COLUMNS", "PENDING", "Values", "fill_pending", "holder_values", "pending_holders"]

# A reference proper starts with its holder's attempt time (digits): never with this.
PENDING = "pending "
_FILLED = (BODY_COLUMN, *DIGEST_COLUMNS)
HOLDER_COLUMNS = ("request_id", "chain_index", REF_COLUMN, *_FILLED)  # what holder_values reads
Values = tuple[bytes, bytes, bytes]  # a holder's body, SHA-1 and SHA-256


def pending_holders(table: pa.Table) -> set[str]:
    """The request ids of the holders the pending rows of ``table`` name."""
    return {ref.removeprefix(PENDING) for ref in _pending_refs(table) if ref is not None}


def holder_values(tables: Iterable[pa.Table], wanted: set[str]) -> dict[str, Values]:
    """The body and digests of each holder in ``wanted`` (request ids) among the
    rows of ``tables``: the first response of its chain, holding its body."""
    out: dict[str, Values] = {}
    if not wanted:
        return out
    for table in tables:
        columns = (table.column(c).to_pylist() for c in ("request_id", "chain_index", REF_COLUMN))
        rows = [
            i
            for i, (rid, chain, ref) in enumerate(zip(*columns, strict=True))
            if rid in wanted and not chain and ref is None
        ]
        if rows:
            held = table.take(rows)
            values = (held.column(c).to_pylist() for c in ("request_id", *_FILLED))
            for rid, body, sha1, sha256 in zip(*values, strict=True):
                out[rid] = (body, sha1, sha256)
    return out


def fill_pending(
    table: pa.Table,
    holders: Mapping[str, Values] | None = None,
    *,
    where: str,
    order: pa.Array[Any] | None = None,
) -> pa.Table:
    """``table`` with each pending row given its holder's body and digests, and no
    reference; ``holders``: their values, if not among ``table``'s own rows.
    ``order``: the rows wanted, as indices into ``table`` (a merge's, sorted, each
    record once): taken, each body copied once, a pending row's from its holder's.
    ``where``: the partition, for an error."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if order is not None and holders is None:
        return _taken_filled(table, order, where)
    refs = _pending_refs(table)
    named = [ref.removeprefix(PENDING) for ref in refs if ref is not None]
    if not named:
        return table
    if holders is None:
        holders = holder_values([table], set(named))
    if missing := [h for h in named if h not in holders]:
        at = next(i for i, ref in enumerate(refs) if ref == PENDING + missing[0])
        raise _no_holder(table, at, missing[0], where)
    mask = pa.array([ref is not None for ref in refs], pa.bool_())
    values = [holders[h] for h in named]
    for n, name in enumerate((*_FILLED, REF_COLUMN)):
        column = table.column(name).combine_chunks()
        given = pa.array([v[n] for v in values] if n < len(_FILLED) else [None] * len(values), column.type)
        at = table.schema.get_field_index(name)  # its field kept whole: a stream's batches share a schema
        table = table.set_column(at, table.schema.field(at), pc.replace_with_mask(column, mask, given))
    return table


def _taken_filled(table: pa.Table, order: pa.Array[Any], where: str) -> pa.Table:
    """``table.take(order)``, each pending row's body and digests taken from its holder's row
    (the first response of its chain among the rows taken, holding its body): one copy of
    the bodies, where a take then a fill made two (a merged partition of an import that
    read revisits with their originals)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    refs = _pending_refs(table)
    rows = order.to_numpy()
    taken = (refs[i] for i in rows)
    pending = [(j, ref.removeprefix(PENDING)) for j, ref in enumerate(taken) if ref is not None]
    if not pending:
        return table.take(order)
    wanted = {h for _, h in pending}
    columns = (table.column(c).to_pylist() for c in ("request_id", "chain_index", REF_COLUMN))
    ids, chains, own = columns
    held = {ids[i]: i for i in rows if ids[i] in wanted and not chains[i] and own[i] is None}
    if missing := [(j, h) for j, h in pending if h not in held]:
        j, h = missing[0]
        raise _no_holder(table, int(rows[j]), h, where)
    source = rows.copy()
    at = np.fromiter((j for j, _ in pending), dtype=np.int64, count=len(pending))
    source[at] = [held[h] for _, h in pending]
    mask = np.zeros(len(rows), dtype=bool)
    mask[at] = True
    arrays = []
    for name in table.column_names:
        column = table.column(name).take(source if name in _FILLED else order)
        if name == REF_COLUMN:
            column = pc.if_else(pa.array(mask), pa.nulls(len(rows), column.type), column)
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=table.schema)


def _no_holder(table: pa.Table, row: int, holder: str, where: str) -> StoreError:
    return StoreError(
        f"{where}: record {table.column('request_id')[row].as_py()} takes its payload from record "
        f"{holder}, which this load does not hold in the same partition"
    )


def _pending_refs(table: pa.Table) -> list[str | None]:
    """Each row's pending reference (``None`` for any other row)."""
    if REF_COLUMN not in table.column_names or table.column(REF_COLUMN).null_count == table.num_rows:
        return [None] * table.num_rows
    return [
        ref if ref is not None and ref.startswith(PENDING) else None
        for ref in table.column(REF_COLUMN).to_pylist()
    ]
