"""What a bulk load's chunk becomes before it is spilled: one sorted table a partition
(``_load.Spill.add``), and a spill's chunks as another process takes them over
(:class:`Chunks`: an import's files read by the load's workers, ``Spill.hand_over``)."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from web_index.models import (
    GET_COLUMNS,
    HEAD_COLUMNS,
    METADATA_COLUMNS,
    AttemptRows,
    RecordType,
    payload_digests,
)
from web_index.storage._layout import Partition
from web_index.storage._load_work import Run
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN, SORT_KEYS
from web_index.storage._tables import columns_to_table
from web_index.storage.payloads import PENDING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Chunks", "partition_tables"]

_ROW_BYTES = 512  # a row's bytes besides its body, about: what a run's size counts it for

_COLUMNS = {
    RecordType.GET: GET_COLUMNS,
    RecordType.HEAD: HEAD_COLUMNS,
    RecordType.GET_METADATA: METADATA_COLUMNS,
    RecordType.HEAD_METADATA: METADATA_COLUMNS,
}


class Chunks(NamedTuple):
    """A spill's chunks as one process hands them to another: the spill files (paths in the
    store's spool folder), each partition's run in each (the index of its file), how many
    attempts and bytes."""

    files: tuple[str, ...]
    runs: tuple[tuple[Partition, int, Run], ...]
    attempts: int
    bytes: int

    def discard(self) -> None:
        """Remove the spill files (chunks handed over, then not wanted)."""
        for name in self.files:
            Path(name).unlink(missing_ok=True)


def partition_tables(
    attempts: Sequence[AttemptRows], payload_of: Mapping[str, str]
) -> Iterator[tuple[Partition, pa.Table, int]]:
    """One table per partition, each sorted by the type's sort key with each
    record once (the last given wins, as in a flush): slices of one table a type;
    and its bytes, about (its bodies', and ``_ROW_BYTES`` a row). A ``get``
    response whose request id ``payload_of`` names is pending (``payloads/_pending.py``)."""
    by_type: dict[RecordType, dict[tuple[Any, ...], tuple[tuple[str, int, int], tuple[Any, ...]]]] = {}
    for a in attempts:
        where = (a.domain, a.year, a.month)
        by_type.setdefault(a.method.metadata, {})[(where, a.request_id)] = (where, a.metadata)
        if a.responses:
            data = by_type.setdefault(a.method, {})
            for r in a.responses:
                data[(where, a.request_id, r[4])] = (where, r)  # 4: chain_index
    for type in sorted(by_type, key=lambda t: t.value):
        names = _COLUMNS[type]
        sort_key = row_key_of(names, SORT_KEYS[type])
        # One flat tuple a row: comparing nested ones took twice as long (a chunk's sorts were
        # a sixth of its spill, profiled).
        rows = sorted(by_type[type].values(), key=lambda wr: wr[0] + sort_key(wr[1]))
        values = zip(*(r for _, r in rows), strict=True)
        columns: dict[str, Sequence[Any]] = dict(zip(names, values, strict=True))
        sizes = [0] * (len(rows) + 1)
        if BODY_COLUMN in columns:
            bodies = columns[BODY_COLUMN]
            pairs = [payload_digests(body or b"") for body in bodies]
            columns[DIGEST_COLUMNS[0]] = [p[0] for p in pairs]
            columns[DIGEST_COLUMNS[1]] = [p[1] for p in pairs]
            sizes = list(itertools.accumulate((len(body or b"") for body in bodies), initial=0))
            if payload_of:
                columns[REF_COLUMN] = [
                    PENDING + payload_of[rid] if chain == 0 and rid in payload_of else None
                    for rid, chain in zip(columns["request_id"], columns["chain_index"], strict=True)
                ]
        table = columns_to_table(type, columns)
        start = 0
        for (domain, year, month), group in itertools.groupby(w for w, _ in rows):
            n = sum(1 for _ in group)
            nbytes = sizes[start + n] - sizes[start] + _ROW_BYTES * n
            yield Partition(type, year, month, domain), table.slice(start, n), nbytes
            start += n


def row_key_of(names: Sequence[str], keys: Sequence[str]) -> Callable[[tuple[Any, ...]], Any]:
    return operator.itemgetter(*(names.index(k) for k in keys))
