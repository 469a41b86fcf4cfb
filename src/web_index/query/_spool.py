"""A window's answered batches, spooled as they come and merged back into input order.

Each batch's results are in input order; the batches come in partition order (or
in any order, from workers). They wait in an Arrow IPC file (LZ4 buffers), and the
merge walks every batch's rows at once, a row group of the output at a time.
"""

from __future__ import annotations

import bisect
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["OUTPUT_ROWS", "Spool"]

_MERGE_BUDGET = 64 * 1024 * 1024  # bytes of spooled results the merge holds at once
OUTPUT_ROWS = 4096  # rows per row group of the result file (as write_results writes them)


class Spool:
    """A window's answered batches, each in input order, waiting to be merged back into
    the window's order: an Arrow IPC file (LZ4 buffers), written and read back without
    Parquet's encoding of the nested responses (which cost ~7% of a million-query run).

    Each batch is cut into record batches small enough that the merge, which holds one
    of each answered batch at once, stays under ``_MERGE_BUDGET``."""

    def __init__(self, path: Path, batches: int) -> None:
        import pyarrow as pa

        from web_index.models import RESULT_SCHEMA

        self.path = path
        self.budget = max(1, _MERGE_BUDGET // batches)  # bytes of one batch held by the merge
        self.runs: list[range] = []  # each answered batch's record batches in the file
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_file(
            self._sink, RESULT_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")
        )
        self._written = 0

    def __enter__(self) -> Spool:
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        if not self._sink.closed:
            self._writer.close()
            self._sink.close()

    def add(self, table: pa.Table) -> None:
        """Spool one batch's rows (in input order), in any order of batches."""
        row_bytes = max(1, table.nbytes // max(1, table.num_rows))
        first = self._written
        for part in table.to_batches(max_chunksize=max(16, min(OUTPUT_ROWS, self.budget // row_bytes))):
            self._writer.write_batch(part)
            self._written += 1
        self.runs.append(range(first, self._written))

    def merge(self, start: int, count: int, writer: pq.ParquetWriter) -> None:
        """Write the window's rows (positions ``start .. start+count-1``, each once) in position order."""
        import pyarrow as pa

        self._close()
        # One row group is sorted and encoded on a thread (both release the GIL) while the
        # next is gathered here: the merge runs while the workers are idle.
        with (
            pa.OSFile(str(self.path), "rb") as source,  # not mapped: read pages would count as memory
            ThreadPoolExecutor(1, thread_name_prefix="wi-merge") as encoder,
        ):
            spool = pa.ipc.open_file(source)
            cursors = [_Cursor(spool, run) for run in self.runs]
            written: Future[None] | None = None
            for lo in range(start, start + count, OUTPUT_ROWS):
                hi = min(lo + OUTPUT_ROWS, start + count)
                pieces = [piece for c in cursors for piece in c.take_below(hi)]
                table = pa.Table.from_batches(pieces)
                if table.num_rows != hi - lo:
                    raise AssertionError(f"bulk merge: {table.num_rows} rows for positions {lo}..{hi - 1}")
                if written is not None:
                    written.result()
                written = encoder.submit(_write_in_order, writer, table)
            if written is not None:
                written.result()


def _write_in_order(writer: pq.ParquetWriter, table: pa.Table) -> None:
    import pyarrow.compute as pc

    writer.write_table(table.take(pc.sort_indices(table, [("query", "ascending")])))


class _Cursor:
    """One batch's spooled rows (sorted by position), a record batch at a time."""

    def __init__(self, spool: pa.ipc.RecordBatchFileReader, batches: range) -> None:
        self.spool = spool
        self.batches = iter(batches)
        self.batch: pa.RecordBatch | None = None
        self.positions: list[int] = []  # the batch's, as numbers once
        self.at = 0  # the batch's first row not yet taken

    def take_below(self, end: int) -> list[pa.RecordBatch]:
        """Remove and return the rows whose position is below ``end``."""
        out: list[pa.RecordBatch] = []
        while True:
            if self.batch is None:
                b = next(self.batches, None)
                if b is None:
                    return out
                self.batch = self.spool.get_batch(b)
                self.positions = cast(list[int], self.batch.column(0).to_pylist())  # "query": sorted
                self.at = 0
            below = bisect.bisect_left(self.positions, end, self.at)
            if below > self.at:
                out.append(self.batch.slice(self.at, below - self.at))
            if below < len(self.positions):
                self.at = below
                return out
            self.batch = None
