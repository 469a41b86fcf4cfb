"""Lines sorted as bytes in bounded memory: an export's index lines, however many.

A CDXJ reader finds captures by binary search, so the index must be sorted as
bytes (what ``LC_ALL=C sort`` gives). An export holds one line per capture,
which for a large store is more than memory should hold: lines are kept in a
list up to ``run_lines``, then sorted and spilled to a temporary file, and
the runs are merged as they are read back.
"""

from __future__ import annotations

import heapq
import tempfile
from collections.abc import Iterator
from typing import IO

__all__ = ["SortedLines"]

_RUN_LINES = 50_000  # a run of CDXJ lines: some 15 MB in memory


class SortedLines:
    """Collect lines (no newline in them), then read them back sorted as UTF-8 bytes, once."""

    def __init__(self, run_lines: int = _RUN_LINES) -> None:
        self.run_lines = run_lines
        self.count = 0
        self._lines: list[bytes] = []
        self._runs: list[IO[bytes]] = []

    def add(self, line: str) -> None:
        # surrogateescape: a URL kept with undecodable bytes sorts by those bytes.
        self._lines.append(line.encode("utf-8", "surrogateescape"))
        self.count += 1
        if len(self._lines) >= self.run_lines:
            self._spill()

    def _spill(self) -> None:
        self._lines.sort()
        run = tempfile.TemporaryFile()  # noqa: SIM115 (read back in sorted(), closed there)
        run.writelines(line + b"\n" for line in self._lines)
        run.seek(0)
        self._runs.append(run)
        self._lines = []

    def sorted(self) -> Iterator[bytes]:
        """Every line, sorted, without its newline."""
        self._lines.sort()
        if not self._runs:
            yield from self._lines
            return
        readers = [(line.rstrip(b"\n") for line in run) for run in self._runs]
        try:
            yield from heapq.merge(*readers, self._lines)
        finally:
            self.close()

    def close(self) -> None:
        for run in self._runs:
            run.close()
        self._runs = []
