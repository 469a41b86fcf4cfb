"""Answering a stream of queries into a Parquet file of results, in bounded memory.

One batch is planned by partition (see ``_engine``), but a stream cut into
batches in input order makes every batch touch the same files again: a million
queries in batches of 20,000 over the S benchmark store read each data file
about seven times. So the stream is taken a *window* at a time; a window's
queries are answered in partition order (type, then domain), so that each batch
covers a narrow run of domains and each file is read about once per window; and
the results, spooled to a temporary Parquet file, are merged back into input
order.

Memory is bounded by the window (its queries, as objects), one batch of
results, and the merge, which holds at most one row group of each batch's
spool, sized so that all of them together stay under ``_MERGE_BUDGET``.
"""

from __future__ import annotations

import bisect
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from web_index.errors import InvalidURLError
from web_index.models import RESULT_SCHEMA, Query
from web_index.models._io import result_table
from web_index.query._engine import Result
from web_index.urls import key_and_domain

__all__ = ["answer_to_file"]

_MERGE_BUDGET = 256 * 1024 * 1024  # bytes of spooled results the merge holds at once
_OUTPUT_ROWS = 4096  # rows per row group of the result file (as write_results writes them)


def answer_to_file(
    answer: Callable[[list[Query]], list[Result]],
    queries: Iterable[Query],
    destination: str | os.PathLike[str],
    *,
    batch_size: int = 20_000,
    window: int = 1_000_000,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Answer ``queries`` with ``answer`` (one batch at a time) into a Parquet file of
    :data:`~web_index.models.RESULT_SCHEMA` rows in input order; return how many.

    The file appears whole or not at all: it is written under a temporary name
    beside ``destination`` and renamed when complete, so an invalid query met
    half-way leaves no partial file. ``on_progress`` is called with the number
    of queries answered so far after each batch.
    """
    if batch_size < 1 or window < 1:
        raise ValueError("batch_size and window must be positive")
    dest = Path(destination)
    work = Path(tempfile.mkdtemp(prefix=".web-index-bulk-", dir=dest.parent))
    try:
        staged = work / "results.parquet"
        total = 0
        with pq.ParquetWriter(staged, RESULT_SCHEMA, compression="zstd") as writer:
            stream = iter(queries)
            while chunk := list(itertools.islice(stream, window)):
                _answer_window(answer, chunk, total, writer, work / "spool.parquet", batch_size, on_progress)
                total += len(chunk)
            if total == 0:
                writer.write_table(RESULT_SCHEMA.empty_table())
        staged.replace(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return total


def _partition(q: Query) -> tuple[str, str]:
    try:
        return q.type.value, key_and_domain(q.url)[1]
    except InvalidURLError:
        return q.type.value, ""  # answering it raises, naming the URL


def _answer_window(
    answer: Callable[[list[Query]], list[Result]],
    chunk: list[Query],
    start: int,
    writer: pq.ParquetWriter,
    spool: Path,
    batch_size: int,
    on_progress: Callable[[int], None] | None,
) -> None:
    """Answer one window in partition order, spool, and merge it into ``writer`` in input order."""
    keys = [_partition(q) for q in chunk]
    order = sorted(range(len(chunk)), key=keys.__getitem__)  # stable: input order within a partition
    del keys
    batches = [sorted(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]
    del order
    if len(batches) == 1:  # nothing to gain from spooling
        positions = batches[0]
        writer.write_table(_results(answer, chunk, positions, start), row_group_size=_OUTPUT_ROWS)
        if on_progress is not None:
            on_progress(start + len(chunk))
        return
    budget = max(1, _MERGE_BUDGET // len(batches))
    done = 0
    with pq.ParquetWriter(spool, RESULT_SCHEMA, compression="lz4") as spooler:
        for positions in batches:
            # Positions ascending within a batch: its rows are spooled in input order.
            table = _results(answer, chunk, positions, start)
            row_bytes = max(1, table.nbytes // max(1, table.num_rows))
            spooler.write_table(table, row_group_size=max(16, min(_OUTPUT_ROWS, budget // row_bytes)))
            done += len(positions)
            if on_progress is not None:
                on_progress(start + done)
    _merge(pq.ParquetFile(spool), [len(b) for b in batches], start, len(chunk), writer)


def _results(
    answer: Callable[[list[Query]], list[Result]], chunk: list[Query], positions: list[int], start: int
) -> pa.Table:
    batch = [chunk[i] for i in positions]
    got = answer(batch)
    return result_table(zip((start + i for i in positions), batch, got, strict=True))


class _Cursor:
    """One batch's spooled rows (sorted by position), a row group at a time."""

    def __init__(self, spool: pq.ParquetFile, groups: range) -> None:
        self.spool = spool
        self.groups = iter(groups)
        self.table: pa.Table | None = None

    def take_below(self, end: int) -> list[pa.Table]:
        """Remove and return the rows whose position is below ``end``."""
        out: list[pa.Table] = []
        while True:
            if self.table is None:
                g = next(self.groups, None)
                if g is None:
                    return out
                self.table = self.spool.read_row_group(g)
            positions = cast(list[int], self.table.column("query").to_pylist())  # sorted, never null
            below = bisect.bisect_left(positions, end)
            if below:
                out.append(self.table.slice(0, below))
            if below < self.table.num_rows:
                self.table = self.table.slice(below)
                return out
            self.table = None


def _merge(
    spool: pq.ParquetFile, sizes: Sequence[int], start: int, count: int, writer: pq.ParquetWriter
) -> None:
    """Write the window's rows (positions ``start .. start+count-1``, each once) in position order."""
    meta = spool.metadata
    cursors: list[_Cursor] = []
    g = 0
    for size in sizes:  # each batch's rows fill whole row groups of its own
        first, rows = g, 0
        while rows < size:
            rows += meta.row_group(g).num_rows
            g += 1
        cursors.append(_Cursor(spool, range(first, g)))
    for lo in range(start, start + count, _OUTPUT_ROWS):
        hi = min(lo + _OUTPUT_ROWS, start + count)
        pieces = [piece for c in cursors for piece in c.take_below(hi)]
        table = pa.concat_tables(pieces)
        if table.num_rows != hi - lo:
            raise AssertionError(f"bulk merge: {table.num_rows} rows for positions {lo}..{hi - 1}")
        writer.write_table(table.take(pc.sort_indices(table, [("query", "ascending")])))
