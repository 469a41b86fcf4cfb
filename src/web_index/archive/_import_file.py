"""One file of an import read by another process (a worker of the bulk load, a Dask
worker) into a load of that process's own, and what it hands back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TypeVar

from web_index._bulk_load import BulkLoad
from web_index.archive._import_run import ImportReport, Run, _Capture, import_files
from web_index.archive._revisits import Waiting
from web_index.archive._sources import ArchiveFile, archive_files
from web_index.errors import WarcError
from web_index.index import WebIndex

__all__ = ["FileRead", "portable", "read_file", "worker_index"]

_T = TypeVar("_T")


@dataclasses.dataclass
class FileRead:
    """What a process made of one file: its report, the revisits that wait for what they
    refer to (in another file, or committed), and the request ids its load took."""

    report: ImportReport
    revisits: list[tuple[_Capture, str]]
    taken: set[str]


def portable(file: ArchiveFile) -> ArchiveFile:
    """``file`` as a worker can open it: a local path made absolute; an object by its URL."""
    if file.path is not None:
        return dataclasses.replace(file, path=file.path.resolve(), backend=None)
    return ArchiveFile(file.name, file.size)


def read_file(
    location: str,
    buffer: str | None,
    settings: tuple[int, bool, int],
    file: ArchiveFile,
    new_load: Callable[[WebIndex], BulkLoad],
    end: Callable[[BulkLoad, bool], _T],
) -> tuple[FileRead, _T]:
    """``file`` (:func:`portable`) read as a one-process import reads it into
    ``new_load(index)`` of the store at ``location``, with ``settings`` (calibre,
    skip_invalid, batch); then ``end(load, True)``, or ``end(load, False)`` before an error
    other than the file's first problem (which the report holds) is raised."""
    if file.path is None and file.member is None:
        (file,) = archive_files([file.name])
    index = worker_index(location, buffer)
    calibre, skip_invalid, batch = settings
    report = ImportReport()
    run = Run(index, calibre, batch, report, 1, skip_invalid)
    with Waiting[tuple[_Capture, str]]() as deferred:
        run.deferred = deferred
        run.load = load = new_load(index)
        try:
            import_files(run, [file], None)
        except WarcError as exc:  # the records before it are kept; said once the rest is committed
            report.problems.append(exc)
        except BaseException:
            end(load, False)
            raise
        kept = end(load, True)
        revisits = [waiting for part in deferred.slices(4096) for waiting in part]
    return FileRead(report, revisits, run.taken), kept


_opened: dict[tuple[str, str | None], WebIndex] = {}


def worker_index(location: str, buffer: str | None) -> WebIndex:
    """The store a worker process imports into, opened once for its life."""
    key = (location, buffer)
    if key not in _opened:
        _opened[key] = WebIndex(location, buffer=buffer, create=False)
    return _opened[key]
