"""Merging sorted files into one sorted, deduplicated stream, in bounded memory.

Compaction rolls a partition's files (each sorted by the type's sort key) into
one. Reading them whole held the partition in memory several times over; this
merge holds one row group of each input and one row group of output at a time.

It works in rounds. Each input has a chunk in hand (a row group, in order).
The smallest of the chunks' *last* keys is a watermark: no row still unread in
any input can sort before it, so every row in hand up to it can be written
now. Those rows (from every input) are put in order by their keys alone and
taken once; the input whose chunk ended at the watermark then reads its next
row group. A record kept in two files (a part absorbed by a compaction that
died before deleting it) sorts next to its copy and is written once.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from web_index.models import RecordType
from web_index.storage._schema import SORT_KEYS, TS_COLUMN
from web_index.storage._tables import conform

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["FRESH", "merge_sorted", "sort_keys"]

# The column merge_sorted adds when told which inputs are fresh (a compaction's parts).
FRESH = "_fresh"

Key = tuple[Any, ...]


class _Input:
    """One sorted input: the chunk in hand, its keys, and how much of it is written."""

    def __init__(self, chunks: Iterator[pa.Table], type: RecordType, fresh: bool | None) -> None:
        self._chunks = chunks
        self._type = type
        self._fresh = fresh
        self.table: pa.Table | None = None
        self.keys: list[Key] = []
        self.pos = 0
        self._next()

    def _next(self) -> None:
        self.table, self.keys, self.pos = None, [], 0
        for table in self._chunks:  # skip empty chunks
            if table.num_rows:
                self.table = conform(self._type, table)
                if self._fresh is not None:
                    import pyarrow as pa

                    flags = pa.array([self._fresh] * table.num_rows, pa.bool_())
                    self.table = self.table.append_column(FRESH, flags)
                self.keys = sort_keys(self._type, self.table)
                return

    def take_through(self, watermark: Key) -> tuple[pa.Table, list[Key]] | None:
        """The rows in hand up to ``watermark`` and their keys; reads the next
        chunk once these run out."""
        assert self.table is not None
        start = self.pos
        end = bisect.bisect_right(self.keys, watermark, lo=start)
        if end == start:
            return None
        taken = (self.table.slice(start, end - start), self.keys[start:end])
        self.pos = end
        if end == len(self.keys):
            self._next()
        return taken


def sort_keys(type: RecordType, table: pa.Table) -> list[Key]:
    """Each row's sort key as a tuple (times as microseconds)."""
    import pyarrow as pa

    columns = [table.column(k) for k in SORT_KEYS[type]]
    ts = SORT_KEYS[type].index(TS_COLUMN[type])
    columns[ts] = columns[ts].cast(pa.int64())
    return list(zip(*(c.to_pylist() for c in columns), strict=True))


def merge_sorted(
    type: RecordType,
    inputs: Sequence[Iterable[pa.Table]],
    group_rows: Callable[[int, int], int],
    *,
    fresh: Sequence[bool] | None = None,
) -> Iterator[pa.Table]:
    """Tables holding every record of the sorted ``inputs`` once, in sort order,
    each of ``group_rows(rows held, bytes held)`` rows (the last one shorter).
    Each input is a sequence of tables (its row groups) already sorted by the
    type's sort key.

    ``fresh`` (one flag an input) adds the column :data:`FRESH`: whether a row
    came only from fresh inputs. A record in a fresh and in a stale input (a part
    that a compaction which died had absorbed) is stale: it may already be
    referred to as it is."""
    import pyarrow as pa

    flags = [None] * len(inputs) if fresh is None else list(fresh)
    sources = [_Input(iter(chunks), type, flag) for chunks, flag in zip(inputs, flags, strict=True)]
    identity = slice(2, None)  # request id (and chain index) within the sort key
    last: Key | None = None  # identity of the last row written
    out: list[pa.Table] = []
    held = 0
    while True:
        live = [s for s in sources if s.table is not None]
        if not live:
            break
        watermark = min(s.keys[-1] for s in live)
        pieces: list[pa.Table] = []
        round_keys: list[Key] = []
        for s in live:
            taken = s.take_through(watermark)
            if taken is not None:
                pieces.append(taken[0])
                round_keys.extend(taken[1])
        order = sorted(range(len(round_keys)), key=round_keys.__getitem__)
        both = pa.concat_tables(pieces)
        is_fresh = both.column(FRESH).to_pylist() if fresh is not None else None
        kept: list[int] = []
        stale: set[int] = set()  # kept rows whose other copy was stale
        for i in order:
            ident = round_keys[i][identity]
            if ident != last:
                kept.append(i)
                last = ident
            elif is_fresh is not None and not is_fresh[i]:
                stale.add(len(kept) - 1)
        if not kept:
            continue
        merged = both.take(pa.array(kept, type=pa.int64()))
        if stale:
            assert is_fresh is not None
            flags_kept = [is_fresh[i] and n not in stale for n, i in enumerate(kept)]
            at = merged.schema.get_field_index(FRESH)
            merged = merged.set_column(at, FRESH, pa.array(flags_kept, pa.bool_()))
        out.append(merged)
        held += merged.num_rows
        target = max(1, group_rows(held, sum(t.nbytes for t in out)))
        while held >= target:
            table = pa.concat_tables(out)
            yield table.slice(0, target)
            rest = table.slice(target)
            out, held = ([rest] if rest.num_rows else []), rest.num_rows
    if held:
        yield pa.concat_tables(out)
