"""WARC records into the store: what each record type becomes.

* ``response`` (an HTTP response): a ``get`` attempt (``head`` if its
  ``request`` record says HEAD), timestamp ``WARC-Date``, one response with
  the status and header fields as sent and the body as the fetchers store
  it: de-chunked, and gzip/deflate content codings decoded (``_http``); the
  fields an export renamed (``x-web-index-original-*``) are restored.
* ``revisit``: the same, with the body of the capture it refers to
  (``WARC-Refers-To``, else ``-Target-URI``, ``-Date`` and its payload
  digest: ``_revisits``), found in the store (the
  batch waiting is stored first; in a bulk load, the revisits wait until the
  load has committed); one that cannot be resolved is counted.
* ``resource`` (a file without HTTP: a screenshot, a PDF from a crawler):
  a ``get`` attempt with a 200 response whose only header is its
  ``Content-Type``.
* a record whose target is not an ``http(s)`` URL (``dns:`` lookups that
  crawlers archive): counted, not stored;
* ``request``: gives its response's method; ``warcinfo``: the fetcher's
  name and version (``software``) for the records after it; ``metadata``,
  ``conversion`` and ``continuation``: counted, not stored.

Every attempt's ``request_id`` is derived from its ``WARC-Record-ID`` (a
UUIDv7 whose time is the capture's), so importing a file again finds each
record stored already and stores nothing twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from web_index.archive._arc_read import read_arc
from web_index.archive._import_run import ImportReport, Run
from web_index.archive._revisits import Waiting
from web_index.archive._sources import ArchiveFile, archive_files
from web_index.archive._warc_fields import warcinfo_software
from web_index.archive._warc_read import read_warc
from web_index.errors import WarcError
from web_index.index import WebIndex

__all__ = ["ImportReport", "import_warcs"]

_DEFAULT_FETCHER = ("warc-import", "unknown")


def import_warcs(
    index: WebIndex,
    paths: Iterable[str | os.PathLike[str] | ArchiveFile],
    *,
    calibre: int = 10,
    skip_invalid: bool = False,
    batch: int = 500,
    on_progress: Callable[[ImportReport], None] | None = None,
    bulk: bool = True,
    jobs: int = 1,
) -> ImportReport:
    """Import every record of the WARC (and ARC) files ``paths`` into ``index``:
    files, folders, ``s3://`` prefixes (see :func:`archive_files`).

    Without ``skip_invalid`` the first problem (a record cut short, no
    ``WARC-Date``, a response that is not HTTP, a truncated file) raises it as
    a :class:`WarcError` after storing every record before it; with it, each
    problem is reported in the result and the import goes on.

    With ``bulk`` (the default) the records go into compacted Parquet through a
    :meth:`WebIndex.bulk_load`, visible once it commits (at the end, or every
    few GiB); without it, into the insert buffer, each batch visible at once
    and left to ``flush()`` and ``compact()``. ``jobs``: the bulk load's processes
    (:meth:`WebIndex.bulk_load`).
    """
    report = ImportReport()
    run = Run(index, calibre, batch, report, jobs, skip_invalid)
    files: list[ArchiveFile] = []
    for p in paths:
        files += [p] if isinstance(p, ArchiveFile) else archive_files([p])
    if not bulk:
        _import_files(run, files, on_progress)
        return report
    with Waiting() as run.deferred:  # revisits, till what they refer to is written
        try:
            with index.bulk_load(jobs=jobs) as run.load:
                _import_files(run, files, on_progress)
        except WarcError:
            run.store_deferred()  # every record before the problem is stored
            raise
        run.store_deferred()
    return report


def _import_files(
    run: Run,
    files: list[ArchiveFile],
    on_progress: Callable[[ImportReport], None] | None,
) -> None:
    report = run.report
    finished = 0  # bytes of the files done
    for file in files:
        report.files += 1
        with file.local() if file.is_arc else file.open() as source:
            _import_file(run, file, source, finished, on_progress)
        run.store()
        finished += file.size
        report.bytes = finished
        if on_progress is not None:
            on_progress(report)


def _import_file(
    run: Run,
    file: ArchiveFile,
    source: Path | IO[bytes],
    finished: int,
    on_progress: Callable[[ImportReport], None] | None,
) -> None:
    report = run.report
    fetcher = _DEFAULT_FETCHER
    records = read_arc(source, file.name) if isinstance(source, Path) else read_warc(source, file.name)
    for item in records:
        report.records += 1
        if isinstance(item, WarcError):
            run.fail(item)
            continue
        if item.type == "warcinfo":
            fetcher = warcinfo_software(item.block) or fetcher
            report.skip("warcinfo")
        elif item.type == "request":
            run.request(item)
        elif item.type in ("response", "revisit", "resource"):
            run.capture(item, fetcher)
        else:
            report.skip(item.type)
        if on_progress is not None and report.records % 256 == 0:
            report.bytes = finished + item.offset
            on_progress(report)
