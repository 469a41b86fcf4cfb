"""WACZ packages into the store: the WARC members of each package, through the
WARC import itself (so a record becomes just what it becomes from a WARC file,
and a second import stores nothing), once every package given has passed its
checks. Only the WARCs are read: the package's CDXJ index and pages are made
from them, and the store has no place for a page's title beside its capture.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from web_index.archive._import import ImportReport, import_warcs
from web_index.archive._sources import ArchiveFile, wacz_files
from web_index.index import WebIndex

__all__ = ["import_wacz"]


def import_wacz(
    index: WebIndex,
    paths: Iterable[str | os.PathLike[str]],
    *,
    calibre: int = 10,
    skip_invalid: bool = False,
    batch: int = 500,
    on_progress: Callable[[ImportReport], None] | None = None,
    bulk: bool = True,
    jobs: int = 1,
    scheduler: str | None = None,
) -> ImportReport:
    """Import every WARC record of the WACZ packages ``paths`` (local files)
    into ``index``, as :func:`import_warcs` imports WARC files; the report's
    ``files`` counts the WARC members.

    Every package is checked whole first (its ZIP directory, ``datapackage.json``
    and its digest, each listed member's size and hash, each WARC member's first
    bytes): a package that fails raises :class:`~web_index.errors.WaczError`
    before anything is stored. A problem inside a WARC then is a
    :class:`~web_index.errors.WarcError`, named ``<package>!<member>@<offset>``,
    as with :func:`import_warcs`. ``jobs``: the bulk load's processes; ``scheduler``: a Dask
    cluster's workers read the members instead (the packages where every worker reads them).
    """
    files: list[ArchiveFile] = []
    for path in paths:
        files += wacz_files(path)
    return import_warcs(
        index,
        files,
        calibre=calibre,
        skip_invalid=skip_invalid,
        batch=batch,
        on_progress=on_progress,
        bulk=bulk,
        jobs=jobs,
        scheduler=scheduler,
    )
