"""Files of an import read by another process (a worker of the bulk load, a Dask worker)
into a load of that process's own, and what it hands back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from web_index._bulk_load import BulkLoad
from web_index.archive._import_report import ImportReport
from web_index.archive._import_run import Run, _Capture, import_files
from web_index.archive._revisits import Waiting
from web_index.archive._sources import ArchiveFile, archive_files
from web_index.errors import WarcError
from web_index.index import WebIndex
from web_index.ingest import Limits

__all__ = ["FileRead", "ReadSettings", "portable", "read_files", "worker_index"]

_T = TypeVar("_T")


class ReadSettings(NamedTuple):
    """What an import's reading of a file depends on besides the file: as the caller's."""

    calibre: int
    skip_invalid: bool
    batch: int
    limits: Limits


@dataclasses.dataclass
class FileRead:
    """What a process made of its files, as it goes back to the one that commits: their
    report, and the revisits that wait for what they refer to (in another file, or committed)."""

    report: ImportReport
    revisits: list[tuple[_Capture, str]]


def portable(file: ArchiveFile) -> ArchiveFile:
    """``file`` as a worker can open it: a local path made absolute; an object by its URL."""
    if file.path is not None:
        return dataclasses.replace(file, path=file.path.resolve(), backend=None)
    return ArchiveFile(file.name, file.size)


def read_files(
    location: str,
    buffer: str | None,
    settings: ReadSettings,
    files: Sequence[ArchiveFile],
    new_load: Callable[[WebIndex], BulkLoad],
    end: Callable[[BulkLoad, bool], _T],
) -> tuple[FileRead, _T, set[str]]:
    """``files`` (:func:`portable`), in order, read as a one-process import reads them into
    ``new_load(index)`` of the store at ``location``; then ``end(load, True)``, or
    ``end(load, False)`` before an error other than the first problem of a file (which
    the report holds, the files after it not read) is raised. Also the request ids the
    load took, for the caller to send on in the form it needs, or not at all."""
    files = [f if f.path is not None or f.member is not None else archive_files([f.name])[0] for f in files]
    index = worker_index(location, buffer, settings.limits)
    report = ImportReport()
    run = Run(index, settings.calibre, settings.batch, report, 1, settings.skip_invalid)
    with Waiting[tuple[_Capture, str]]() as deferred:
        run.deferred = deferred
        run.load = load = new_load(index)
        try:
            import_files(run, list(files), None)
        except WarcError as exc:  # the records before it are kept; said once the rest is committed
            report.problems.append(exc)
        except BaseException:
            end(load, False)
            raise
        kept = end(load, True)
        revisits = [waiting for part in deferred.slices(4096) for waiting in part]
    return FileRead(report, revisits), kept, run.taken


_opened: dict[tuple[str, str | None, Limits], WebIndex] = {}


def worker_index(location: str, buffer: str | None, limits: Limits | None = None) -> WebIndex:
    """The store a worker process imports into, opened once for its life (a handle a
    ``limits``: what an import checks is the caller's)."""
    key = (location, buffer, limits or Limits())
    if key not in _opened:
        _opened[key] = WebIndex(location, buffer=buffer, create=False, limits=key[2])
    return _opened[key]
