"""The result file of a query file, as it is written: rows written here, then whole
pieces that worker processes wrote beside it, appended in turn.

A piece is a Parquet file of the same schema written by the same options
(``_spool.result_writer``): its row groups are joined to the file by their bytes
(``storage``'s ``append_parquet``), so that a file written by several processes,
each encoding its own rows, is the file one writer would have written.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

from web_index.query._spool import result_writer
from web_index.storage import append_parquet

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["ResultFile"]


class ResultFile:
    """A result file under construction in ``work``, its segments in output order."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._segments: list[Path] = []
        self._writer: pq.ParquetWriter | None = None
        self._names = itertools.count()

    @property
    def writer(self) -> pq.ParquetWriter:
        """The writer of the segment rows go to next (a new one after a piece)."""
        if self._writer is None:
            path = self.piece_path()
            self._writer = result_writer(path)
            self._segments.append(path)
        return self._writer

    def piece_path(self) -> Path:
        """A name in ``work`` for a piece not yet written."""
        return self.work / f"results-{next(self._names)}.parquet"

    def add(self, pieces: list[Path]) -> None:
        """Append these pieces, written whole, after what was written so far."""
        self._end()
        self._segments += pieces

    def finish(self) -> Path:
        """The whole file, its pieces appended to its first segment; one of no rows if nothing was written."""
        if not self._segments:
            from web_index.models import RESULT_SCHEMA

            self.writer.write_table(RESULT_SCHEMA.empty_table())
        self._end()
        first, rest = self._segments[0], self._segments[1:]
        append_parquet(first, rest)
        return first

    def close(self) -> None:
        """Close the writer, if one is open (the files are ``work``'s to remove)."""
        self._end()

    def _end(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
