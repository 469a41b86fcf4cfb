"""Identical payloads stored once: what a compaction (and a bulk load's
commit) writes as a reference instead of a second copy.

A ``get`` row whose body is at least :data:`MIN_SHARED_BYTES` long and whose
SHA-256 a stored row of the same domain already holds is written with an empty
body and a ``payload_ref`` naming that row (``storage.payloads``), as a
WARC revisit record names its original. The search is for the payloads of the
rows being written only: the partition's compacted file first, then the
domain's compacted files of the other months (newest first, digest columns
only), stopping once each is found; then the rows being written, in order, so
that a payload stored twice in one compaction is stored once.

Only *fresh* rows (from parts, or a bulk load's) ever become references, and
only to rows that hold their body in a compacted file: a row already in a
compacted file is written again as it was. A holder therefore never stops
holding its payload, and a reference made once stays true. A reference to
another file names a row that file held before this one is written, so the
payload is durable before any reference to it; one in the same file is
written with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from web_index.errors import CorruptFileError
from web_index.storage._layout import Partition
from web_index.storage._merge import FRESH
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN
from web_index.storage.backends import Backend
from web_index.storage.payloads._refs import holder_ref

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["MIN_SHARED_BYTES", "find_holders", "part_digests", "share_payloads", "wanted_payloads"]

# Shorter bodies stay in their row: a reference (~100 bytes before compression)
# and the read of another row cost more than they save.
MIN_SHARED_BYTES = 256
_SHA256 = DIGEST_COLUMNS[1]
_IDENTITY = ["url_key", "attempt_timestamp", "request_id", "chain_index"]


def wanted_payloads(tables: Iterable[pa.Table]) -> set[bytes]:
    """The SHA-256s of the bodies in ``tables`` (``get`` rows, or their digest
    column alone; short bodies' too: those are passed over when written)."""
    out: set[bytes] = set()
    for table in tables:
        if _SHA256 in table.column_names:
            out.update(sha for sha in table.column(_SHA256).to_pylist() if sha is not None)
    return out


def part_digests(handles: Iterable[pq.ParquetFile]) -> Iterator[pa.Table]:
    """The digest column of each of these files' row groups (of those that have one)."""
    for handle in handles:
        if _SHA256 in handle.schema_arrow.names:
            yield handle.read(columns=[_SHA256], use_threads=False)


def find_holders(
    backend: Backend,
    partition: Partition,
    months: Sequence[tuple[int, int]],
    wanted: set[bytes],
    own: pq.ParquetFile | None = None,
) -> dict[bytes, str]:
    """The stored row holding each of the ``wanted`` payloads, as the
    reference that names it: searched in ``own`` (the partition's compacted
    file, if open), then in the compacted files of the partition's domain in
    ``months`` (newest first). Files that cannot be read are passed over: a
    payload not found is stored again, never referred to wrongly."""
    found: dict[bytes, str] = {}
    if not wanted:
        return found
    if own is not None:
        _search(own, wanted, found)
    for year, month in sorted(months, reverse=True):
        if len(found) == len(wanted):
            break
        if (year, month) == (partition.year, partition.month):
            continue
        path = Partition(partition.type, year, month, partition.domain).compacted_path
        try:
            _search(backend.open_parquet(path), wanted, found)
        except (FileNotFoundError, CorruptFileError, OSError):
            continue
    return found


def _search(handle: pq.ParquetFile, wanted: set[bytes], found: dict[bytes, str]) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    names = handle.schema_arrow.names
    if _SHA256 not in names:
        return  # a file of format 2: it has no digests to match
    look = [_SHA256] + ([REF_COLUMN] if REF_COLUMN in names else [])
    value_set = pa.array(sorted(wanted - found.keys()), pa.binary(32))
    for g in range(handle.metadata.num_row_groups):
        if len(found) == len(wanted):
            return
        table = handle.read_row_group(g, columns=look, use_threads=False)
        hits = [
            int(i)
            for i in pc.indices_nonzero(pc.is_in(table.column(_SHA256), value_set=value_set)).to_numpy()
        ]
        if not hits:
            continue
        ids = handle.read_row_group(g, columns=_IDENTITY, use_threads=False)
        ids = ids.set_column(1, "attempt_timestamp", ids.column(1).cast(pa.int64()))
        shas = table.column(_SHA256)
        refs = table.column(REF_COLUMN) if REF_COLUMN in names else None
        for i in hits:
            sha = shas[i].as_py()
            if sha in found:
                continue
            ref = None if refs is None else refs[i].as_py()
            found[sha] = (
                ref if ref is not None else holder_ref(*(ids.column(c)[i].as_py() for c in _IDENTITY))
            )


def share_payloads(
    tables: Iterable[pa.Table], holders: dict[bytes, str], wanted: set[bytes]
) -> Iterator[pa.Table]:
    """``tables`` (``get`` rows in order, with :data:`~web_index.storage._merge.FRESH`
    or all fresh) with each fresh row whose payload is one of ``wanted`` and
    ``holders`` names (or an earlier row of ``tables`` holds) written as a
    reference to it. ``holders`` gains the payloads first held here."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for table in tables:
        fresh = table.column(FRESH).to_pylist() if FRESH in table.column_names else None
        if fresh is not None:
            table = table.drop_columns([FRESH])
        if not table.num_rows or not wanted:
            yield table
            continue
        long = pc.greater_equal(pc.binary_length(table.column(BODY_COLUMN)), pa.scalar(MIN_SHARED_BYTES))
        candidates = pc.and_(long, pc.is_null(table.column(REF_COLUMN)))
        at = [int(i) for i in pc.indices_nonzero(candidates).to_numpy()]
        shas = table.column(_SHA256).take(at).to_pylist() if at else []
        picked = [(i, sha) for i, sha in zip(at, shas, strict=True) if sha in wanted]
        made: dict[int, str] = {}
        if picked:
            ids = table.select(_IDENTITY).take([i for i, _ in picked])
            ids = ids.set_column(1, "attempt_timestamp", ids.column(1).cast(pa.int64()))
            columns = [c.to_pylist() for c in ids.columns]
            for (i, sha), identity in zip(picked, zip(*columns, strict=True), strict=True):
                own = holder_ref(*identity)
                held = holders.setdefault(sha, own)
                if held != own and (fresh is None or fresh[i]):
                    made[i] = held
        if not made:
            yield table
            continue
        mask = pa.array([i in made for i in range(table.num_rows)], pa.bool_())
        rows = sorted(made)
        data = pc.replace_with_mask(
            table.column(BODY_COLUMN).combine_chunks(), mask, pa.array([b""] * len(rows), pa.large_binary())
        )
        ref = pc.replace_with_mask(
            table.column(REF_COLUMN).combine_chunks(), mask, pa.array([made[i] for i in rows], pa.string())
        )
        body_at, ref_at = (table.schema.get_field_index(c) for c in (BODY_COLUMN, REF_COLUMN))
        table = table.set_column(body_at, table.schema.field(body_at), data)
        yield table.set_column(ref_at, table.schema.field(ref_at), ref)
