"""The progress of a long load on a terminal (``import-warc``, ``import-wacz``, ``insert``):
bytes, MB/s, records a second and the time left, from the start."""

from __future__ import annotations

import time
from typing import NamedTuple

from rich.progress import BarColumn, DownloadColumn, Progress, ProgressColumn, Task, TextColumn
from rich.text import Text

from web_index.cli._app import err

__all__ = ["Pace", "pace", "paced_progress"]


class Pace(NamedTuple):
    """A load's rates since it started, and the time left at them."""

    mb_per_s: float
    records_per_s: float
    # "H:MM:SS left"; "-:--:-- left" before the first byte; "writing" once all are read;
    # "" when the input's size is not known (a pipe)
    left: str


def pace(done: int, records: int, elapsed: float, total: int | None) -> Pace:
    """The load's pace after ``elapsed`` seconds, ``done`` of ``total`` bytes read
    (``total`` ``None``: not known).

    From the start, not rich's speed columns: those average the last few updates, and an
    import's come a file at a time from its workers (a 100 MB file done in one update
    read as tens of GB/s, and the time left as nothing)."""
    elapsed = max(elapsed, 1e-9)
    speed = done / elapsed
    if total is None:
        left = ""
    elif not done:
        left = "-:--:-- left"
    elif done >= total:  # what is left is the commit, which says nothing until it is done
        left = "writing"
    else:
        left = f"{_clock((total - done) / speed)} left"
    return Pace(speed / 1e6, records / elapsed, left)


def paced_progress(what: str, counted: str, started: float) -> Progress:
    """A progress bar on stderr (shown only on a terminal) for a task with the fields
    ``pace`` (a :class:`Pace`) and those ``counted`` names, e.g.
    ``"{task.fields[records]:,} records"``; its clock runs from ``started``."""
    return Progress(
        TextColumn(f"[bold]{what}"),
        BarColumn(bar_width=20),
        DownloadColumn(),
        TextColumn("{task.fields[pace].mb_per_s:.1f} MB/s"),
        TextColumn(f"{counted}, {{task.fields[pace].records_per_s:,.0f}}/s"),
        _Elapsed(started),
        TextColumn("{task.fields[pace].left}"),
        console=err,
        disable=not err.is_terminal,
    )


class _Elapsed(ProgressColumn):
    """The time since ``started``, ticking: rich's own column stops once every byte is
    read, and the commit comes after."""

    def __init__(self, started: float) -> None:
        super().__init__()
        self.started = started

    def render(self, task: Task) -> Text:
        return Text(_clock(time.monotonic() - self.started), style="progress.elapsed")


def _clock(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
