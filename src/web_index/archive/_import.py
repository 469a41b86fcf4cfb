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

from web_index.archive._import_cluster import import_on_cluster
from web_index.archive._import_report import ImportReport
from web_index.archive._import_run import Run, import_files
from web_index.archive._import_workers import import_on_workers
from web_index.archive._revisits import Waiting
from web_index.archive._sources import ArchiveFile, archive_files
from web_index.errors import InvalidRecordError, WarcError
from web_index.index import WebIndex

__all__ = ["ImportReport", "import_warcs"]


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
    scheduler: str | None = None,
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
    (:meth:`WebIndex.bulk_load`), which on a local store also read the files, one each
    at a time (a record in two files is stored once, counted stored once).

    ``scheduler`` (``tcp://host:port``): each file is imported by a worker of that Dask
    cluster, which writes straight to the store (its location: an ``s3://`` URL, or a folder
    every worker sees at the same path, as are the files), then committed once here and
    compacted on the cluster (docs/scale.md); ``jobs`` does not apply (the cluster's workers
    are the processes). A file of a worker that dies is imported again; a problem in one file
    (without ``skip_invalid``) stops that file, and is raised once the other files are committed.
    """
    report = ImportReport()
    run = Run(index, calibre, batch, report, jobs, skip_invalid)
    files: list[ArchiveFile] = []
    for p in paths:
        files += [p] if isinstance(p, ArchiveFile) else archive_files([p])
    if scheduler is not None:
        if not bulk:
            raise InvalidRecordError("scheduler", "a cluster's import is a bulk load: leave bulk on")
        return import_on_cluster(
            index,
            files,
            scheduler,
            calibre=calibre,
            skip_invalid=skip_invalid,
            batch=batch,
            on_progress=on_progress,
        )
    if not bulk:
        import_files(run, files, on_progress)
        return report
    with Waiting() as run.deferred:  # revisits, till what they refer to is written
        try:
            with index.bulk_load(jobs=jobs) as run.load:
                if run.load.has_workers and len(files) > 1 and index._reopenable:
                    import_on_workers(run, files, on_progress)
                else:
                    import_files(run, files, on_progress)
        except WarcError:
            run.store_deferred()  # every record before the problem is stored
            raise
        run.store_deferred()
    return report
