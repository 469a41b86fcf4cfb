"""``import_warcs(jobs=N)`` of several files: the files read by the worker processes of the
bulk load, the load's commit done once here.

Reading was the import's serial part: the records inflated and parsed, their HTTP messages
decoded and checked, the chunks sorted and spilled, all in this process while the load's
workers waited for the commit (22 of the 36 s of the 1 GiB benchmark with two workers). Now
each task, a run of the files in their order (at least ``_TASK_BYTES`` of them, less when
that gives a worker fewer than two, or one file), is read by a worker as a one-process
import reads it (what the store holds skipped, a request giving its response's method, a
revisit of a capture the task read told its payload) into a load of its own that never
commits: it hands over its spilled chunks, which this process's load absorbs, in the tasks'
order, and commits with the rest.

What differs from one process is what crosses a task's edge: a revisit of a capture that
another task read waits, as one of a capture stored before the import does, and is stored
by a load of its own once the commit has made its capture readable; a request record at the
end of one task and its response at the start of the next are not paired (the response is
taken for a GET). A record in two tasks is in both workers' chunks: the commit keeps one copy
(a partition's rows are deduplicated) and this process counts the second as already stored,
by the request ids each worker took. Without ``skip_invalid`` a problem stops its file (what
came before it is stored), no file after it is read or stored, and it is raised once the load
has committed, as with one process.

The spill on disk may pass the load's ``commit_bytes`` by what the tasks in flight hold: a
task's chunks are absorbed whole, and up to ``jobs + 1`` tasks are read ahead.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from web_index._bulk_load import BulkLoad
from web_index._on_cluster import shared_location
from web_index.archive._import_file import FileRead, ReadSettings, portable, read_files
from web_index.archive._import_report import ImportReport
from web_index.archive._import_run import Run
from web_index.archive._sources import ArchiveFile
from web_index.index import WebIndex
from web_index.storage import Chunks

if TYPE_CHECKING:
    import numpy as np

__all__ = ["import_on_workers"]

# A task reads files until it has this many bytes of them: each task's chunks are spill files
# of their own, kept open till the commit, so thousands of small files in a task each would
# be thousands of open files (and as many small Arrow files to merge).
_TASK_BYTES = 64 << 20


@dataclass
class _Read:
    """What a worker made of a task: its files' report, revisits and spilled chunks; or the
    error that stopped it (raised here only if no problem came before it)."""

    read: FileRead | None
    chunks: Chunks | None
    taken: bytes  # the request ids it took, as sorted 8-byte digests (uint64)
    error: BaseException | None = None


def import_on_workers(
    run: Run, files: Sequence[ArchiveFile], on_progress: Callable[[ImportReport], None] | None
) -> None:
    """Import ``files`` into ``run.load`` (a bulk load with workers), a task at a time each."""
    load, index, report, deferred = run.load, run.index, run.report, run.deferred
    assert load is not None and deferred is not None
    location = shared_location(index.location)
    settings = ReadSettings(run.calibre, run.skip_invalid, run.batch, index.limits)
    work = functools.partial(_read_task, location, index._buffer_location, settings)
    taken = _Taken()

    # Two tasks or more a worker when the files allow (a few small files still spread).
    size = load.task_bytes(sum(f.size for f in files), _TASK_BYTES)

    def take(read: _Read) -> BaseException | None:
        assert read.read is not None
        done = read.read.report
        again = taken.add(read.taken)
        done.stored -= again  # the copy an earlier task gave is the one kept
        done.already_stored += again
        problem = done.problems.pop(0) if done.problems and not run.skip_invalid else None
        report.include(done)
        waiting = [(c, rid) for c, rid in read.read.revisits if not taken.holds(rid)]
        report.already_stored += len(read.read.revisits) - len(waiting)  # an earlier task stored it
        deferred.add(waiting)
        if on_progress is not None:
            on_progress(report)
        return problem

    tasks = ([portable(f) for f in task] for task in _tasks(files, size))
    load.absorb_each(work, tasks, take)  # no file after a problem is read


def _tasks(files: Sequence[ArchiveFile], size: int) -> Iterator[list[ArchiveFile]]:
    """The files in runs of at least ``size`` bytes (the last may hold less)."""
    task: list[ArchiveFile] = []
    held = 0
    for f in files:
        task.append(f)
        held += f.size
        if held >= size:
            yield task
            task, held = [], 0
    if task:
        yield task


def _read_task(location: str, buffer: str | None, settings: ReadSettings, files: list[ArchiveFile]) -> _Read:
    """In a worker: files read into a load that hands its chunks over."""

    def handed(load: BulkLoad, whole: bool) -> Chunks:
        chunks = load.hand_over()
        if not whole:
            chunks.discard()
        return chunks

    def new_load(index: WebIndex) -> BulkLoad:
        return BulkLoad.handing_over(index._store, index.limits)

    try:
        read, chunks, taken = read_files(location, buffer, settings, files, new_load, handed)
    except Exception as exc:  # said in order, or not at all after a problem (see import_on_workers)
        return _Read(None, None, b"", exc)
    return _Read(read, chunks, _digests(taken))


def _digest(request_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(request_id.encode(), digest_size=8).digest(), "little")


def _digests(ids: Iterable[str]) -> bytes:
    import numpy as np

    values: np.ndarray = np.fromiter((_digest(i) for i in ids), dtype=np.uint64)
    values.sort()
    return values.tobytes()


class _Taken:
    """The request ids the tasks took so far, as sorted runs of digests whose sizes at
    least double down the list (merged as they fill, as a log-structured merge does): a
    task's ids are looked up and added in time that grows with the log of all of them."""

    def __init__(self) -> None:
        self._runs: list[np.ndarray] = []

    def add(self, digests: bytes) -> int:
        """Add a task's digests (sorted, :func:`_digests`); return how many were there."""
        import numpy as np

        ids = np.frombuffer(digests, dtype=np.uint64)
        there = np.zeros(len(ids), dtype=bool)
        for held in self._runs:
            at = np.searchsorted(held, ids).clip(0, len(held) - 1)
            there |= held[at] == ids
        new = ids[~there]
        while self._runs and len(self._runs[-1]) <= 2 * len(new):
            new = np.sort(np.concatenate([self._runs.pop(), new]), kind="stable")
        if len(new):
            self._runs.append(new)
        return int(there.sum())

    def holds(self, request_id: str) -> bool:
        import numpy as np

        digest = np.uint64(_digest(request_id))
        for held in self._runs:
            at = int(np.searchsorted(held, digest))
            if at < len(held) and held[at] == digest:
                return True
        return False
