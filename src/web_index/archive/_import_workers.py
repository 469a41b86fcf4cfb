"""``import_warcs(jobs=N)`` of several files: each file read by a worker process of the
bulk load, the load's commit done once here.

Reading was the import's serial part: the records inflated and parsed, their HTTP messages
decoded and checked, the chunks sorted and spilled, all in this process while the load's
workers waited for the commit (22 of the 36 s of the 1 GiB benchmark with two workers). Now
each worker reads a file as a one-process import does (what the store holds skipped, a
request giving its response's method, a revisit of a capture of the same file told its
payload) into a load of its own that never commits: it hands over its spilled chunks, which
this process's load absorbs, in the files' order, and commits with the rest. What a file's
revisits refer to elsewhere waits, as in a one-process import, for the commit.

A record in two files read at once is in both workers' chunks; the commit keeps one copy
(its partition's rows are deduplicated) and this process counts the second as already
stored, by the request ids each worker took. Without ``skip_invalid`` a problem stops its
file (what came before it there is stored), the files after it are dropped, and it is
raised once the load has committed, as a one-process import does.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from web_index._bulk_load import BulkLoad
from web_index.archive._import_file import FileRead, portable, read_file
from web_index.archive._import_run import ImportReport, Run
from web_index.archive._sources import ArchiveFile
from web_index.errors import WarcError
from web_index.index import WebIndex
from web_index.storage import Chunks

if TYPE_CHECKING:
    import numpy as np

__all__ = ["import_on_workers"]

_NEVER = 1 << 62  # a worker's load never commits: it hands over


@dataclass
class _Read:
    """What a worker made of one file."""

    read: FileRead
    chunks: Chunks
    taken: bytes  # the request ids it took, as sorted 8-byte digests (uint64)


def import_on_workers(
    run: Run, files: Sequence[ArchiveFile], on_progress: Callable[[ImportReport], None] | None
) -> None:
    """Import ``files`` into ``run.load`` (a bulk load with workers), each file read by one."""
    import numpy as np

    load, index, report = run.load, run.index, run.report
    assert load is not None and run.deferred is not None
    location = index.location if "://" in index.location else str(Path(index.location).resolve())
    work = functools.partial(
        _read_one, location, index._buffer_location, (run.calibre, run.skip_invalid, run.batch)
    )
    taken = np.empty(0, dtype=np.uint64)
    problem: WarcError | None = None
    for read in load.on_workers(work, [portable(f) for f in files]):
        if problem is not None:  # a file after the problem: not stored
            read.chunks.discard()
            continue
        load.absorb(read.chunks)
        ids = np.frombuffer(read.taken, dtype=np.uint64)
        again = int(np.isin(ids, taken, assume_unique=True).sum())
        taken = np.union1d(taken, ids)
        done = read.read.report
        done.stored -= again  # the copy an earlier file gave is the one kept
        done.already_stored += again
        if done.problems and not run.skip_invalid:
            problem = done.problems.pop(0)
        report.include(done)
        run.deferred.add(read.read.revisits)
        if on_progress is not None:
            on_progress(report)
    if problem is not None:
        raise problem


def _read_one(location: str, buffer: str | None, settings: tuple[int, bool, int], file: ArchiveFile) -> _Read:
    """In a worker: one file read into a load that hands its chunks over."""

    def handed(load: BulkLoad, whole: bool) -> Chunks:
        chunks = load.hand_over()
        if not whole:
            chunks.discard()
        return chunks

    def new_load(index: WebIndex) -> BulkLoad:
        return BulkLoad(index._store, index.limits, commit_bytes=_NEVER)

    read, chunks = read_file(location, buffer, settings, file, new_load, handed)
    taken, read.taken = _digests(read.taken), set()  # sent as digests
    return _Read(read, chunks, taken)


def _digests(ids: Iterable[str]) -> bytes:
    import numpy as np

    values: np.ndarray = np.fromiter(
        (int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(), "little") for i in ids),
        dtype=np.uint64,
    )
    values.sort()
    return values.tobytes()
