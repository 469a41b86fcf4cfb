"""A window's answered batches, spooled as they come and merged back into input order.

Each batch's results are in input order; the batches come in partition order (or
in any order, from workers). They wait in an Arrow IPC file (LZ4 buffers), and the
merge walks every batch's rows at once, a row group of the output at a time: here,
or in the workers of this machine, each a run of the output's row groups into a
piece of the result file (``_result_file``).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["OUTPUT_ROWS", "Spool", "merge_to_file", "result_writer", "spool_file"]

_MERGE_BUDGET = 64 * 1024 * 1024  # bytes of spooled results the merge holds at once
OUTPUT_ROWS = 4096  # rows per row group of the result file (as write_results writes them)


# A batch's spooled rows: the spool file they are in (an index into ``Spool.files``), its
# record batches holding them, and the first position of each of those.
_Run = tuple[int, range, list[int]]


class Spool:
    """A window's answered batches, each in input order, waiting to be merged back into
    the window's order: Arrow IPC files (LZ4 buffers), written and read back without
    Parquet's encoding of the nested responses (which cost ~7% of a million-query run).
    The batches answered here go into one file; a worker process writes each of its
    batches to a file of its own (:func:`spool_file`), which is added as it is.

    Each batch is cut into record batches small enough that the merge, which holds one
    of each answered batch at once, stays under ``_MERGE_BUDGET``."""

    def __init__(self, path: Path, batches: int) -> None:
        self.path = path
        self.budget = max(1, _MERGE_BUDGET // batches)  # bytes of one batch held by the merge
        self.files: list[Path] = [path]
        self.runs: list[_Run] = []
        self._sink: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._written = 0

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        if self._writer is not None and self._sink is not None and not self._sink.closed:
            self._writer.close()
            self._sink.close()

    def add(self, table: pa.Table) -> None:
        """Spool one batch's rows (in input order), in any order of batches."""
        import pyarrow as pa

        if self._writer is None:
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = _new_writer(self._sink)
        first = self._written
        parts = _parts(table, self.budget)
        for part in parts:
            self._writer.write_batch(part)
            self._written += 1
        self.runs.append((0, range(first, self._written), _firsts(parts)))

    def add_file(self, path: Path, firsts: list[int]) -> None:
        """Spool the batch a worker wrote to ``path`` with :func:`spool_file` (this
        spool's ``budget``; ``firsts``: what it returned), in any order of batches."""
        self.files.append(path)
        self.runs.append((len(self.files) - 1, range(len(firsts)), firsts))

    def merge(self, start: int, count: int, writer: pq.ParquetWriter) -> None:
        """Write the window's rows (positions ``start .. start+count-1``, each once) in position order."""
        self._close()
        merge_runs(self.files, self.runs, start, start + count, writer)

    def pieces(self, start: int, count: int, n: int) -> list[tuple[list[Path], list[_Run], int, int]]:
        """The arguments of :func:`merge_to_file` for each of ``n`` runs of the window's
        positions (fewer if it is short), cut where the output's row groups are: files
        merged apart that, appended in order, are the file :meth:`merge` would write."""
        self._close()
        groups = -(-count // OUTPUT_ROWS)
        n = max(1, min(n, groups))
        cuts = [start + min(count, OUTPUT_ROWS * (groups * k // n)) for k in range(n + 1)]
        return [(self.files, self.runs, lo, hi) for lo, hi in itertools.pairwise(cuts)]


def merge_runs(files: list[Path], runs: list[_Run], lo: int, hi: int, writer: pq.ParquetWriter) -> None:
    """Write the spooled rows of positions ``lo .. hi-1`` (each once) in position order."""
    import pyarrow as pa

    # One row group is encoded on a thread (pyarrow's writer releases the GIL) while the
    # next is gathered and put in order here: the encoding (one thread: pyarrow writes a
    # file's columns one after the other) is what the merge waits for.
    with contextlib.ExitStack() as opened:
        readers: dict[int, pa.ipc.RecordBatchFileReader] = {}
        for f in sorted({f for f, _, _ in runs}):
            # Not mapped: the pages read would count as this process's memory.
            source = opened.enter_context(pa.OSFile(str(files[f]), "rb"))
            readers[f] = pa.ipc.open_file(source)
        cursors = [_Cursor(readers[f], batches, firsts, lo) for f, batches, firsts in runs]
        encoder = opened.enter_context(ThreadPoolExecutor(1, thread_name_prefix="wi-merge"))
        written: Future[None] | None = None
        for at in range(lo, hi, OUTPUT_ROWS):
            end = min(at + OUTPUT_ROWS, hi)
            pieces = [piece for c in cursors for piece in c.take_below(end)]
            table = _in_order(pa.Table.from_batches(pieces), at, end)
            if written is not None:
                written.result()
            written = encoder.submit(writer.write_table, table)
        if written is not None:
            written.result()


def merge_to_file(files: list[Path], runs: list[_Run], lo: int, hi: int, path: Path) -> None:
    """In a worker of this machine: :func:`merge_runs` into a result file of its own at
    ``path`` (written again whole by a retry)."""
    with result_writer(path) as writer:
        merge_runs(files, runs, lo, hi, writer)


def result_writer(path: Path) -> pq.ParquetWriter:
    """A writer of a result file, or of a piece of one: every piece written alike, so that
    pieces appended in order (``storage``'s ``append_parquet``) are one file."""
    import pyarrow.parquet as pq

    from web_index.models import RESULT_SCHEMA

    return pq.ParquetWriter(path, RESULT_SCHEMA, compression="zstd")


def spool_file(table: pa.Table, path: Path, budget: int) -> list[int]:
    """One batch's rows (in input order) as a spool file of its own, for :meth:`Spool.add_file`
    of a spool whose ``budget`` this is; the first position of each of its record batches."""
    import pyarrow as pa

    parts = _parts(table, budget)
    with pa.OSFile(str(path), "wb") as sink, _new_writer(sink) as writer:
        for part in parts:
            writer.write_batch(part)
    return _firsts(parts)


def _firsts(parts: list[pa.RecordBatch]) -> list[int]:
    return [cast(int, part.column(0)[0].as_py()) for part in parts]


def _new_writer(sink: pa.OSFile) -> pa.ipc.RecordBatchFileWriter:
    import pyarrow as pa

    from web_index.models import RESULT_SCHEMA

    return pa.ipc.new_file(sink, RESULT_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4"))


def _parts(table: pa.Table, budget: int) -> list[pa.RecordBatch]:
    """``table`` in record batches of about ``budget`` bytes (16 to ``OUTPUT_ROWS`` rows)."""
    row_bytes = max(1, table.nbytes // max(1, table.num_rows))
    return table.to_batches(max_chunksize=max(16, min(OUTPUT_ROWS, budget // row_bytes)))


def _in_order(table: pa.Table, lo: int, hi: int) -> pa.Table:
    """The rows of positions ``lo .. hi-1``, each once, in position order: a permutation
    inverted, not a sort."""
    import numpy as np

    if table.num_rows != hi - lo:
        raise AssertionError(f"bulk merge: {table.num_rows} rows for positions {lo}..{hi - 1}")
    at = table.column("query").to_numpy() - lo
    order = np.full(hi - lo, -1, dtype=np.int64)
    if at.size and (at.min() < 0 or at.max() >= hi - lo):
        raise AssertionError(f"bulk merge: a position outside {lo}..{hi - 1}")
    order[at] = np.arange(hi - lo, dtype=np.int64)
    if (order < 0).any():
        raise AssertionError(f"bulk merge: positions {lo}..{hi - 1} not each once")
    return table.take(order)


class _Cursor:
    """One batch's spooled rows (sorted by position), a record batch at a time, from
    the first that holds a position at ``lo`` or above (``firsts``: each one's first)."""

    def __init__(
        self, spool: pa.ipc.RecordBatchFileReader, batches: range, firsts: list[int], lo: int
    ) -> None:
        self.spool = spool
        skip = max(0, bisect.bisect_right(firsts, lo) - 1)  # those before hold positions below lo only
        self.batches = iter(batches[skip:])
        self.batch: pa.RecordBatch | None = None
        self.positions: list[int] = []  # the batch's, as numbers once
        self.at = 0  # the batch's first row not yet taken
        self.lo = lo

    def take_below(self, end: int) -> list[pa.RecordBatch]:
        """Remove and return the rows whose position is below ``end`` (and at ``lo`` or above)."""
        out: list[pa.RecordBatch] = []
        while True:
            if self.batch is None:
                b = next(self.batches, None)
                if b is None:
                    return out
                self.batch = self.spool.get_batch(b)
                self.positions = cast(list[int], self.batch.column(0).to_pylist())  # "query": sorted
                self.at = bisect.bisect_left(self.positions, self.lo)
            below = bisect.bisect_left(self.positions, end, self.at)
            if below > self.at:
                out.append(self.batch.slice(self.at, below - self.at))
            if below < len(self.positions):
                self.at = below
                return out
            self.batch = None
