"""The store out as a WACZ package: WARCs, their index and page lists in one ZIP.

The records are export-warc's (``export_records``), written straight into
STORED ``archive/`` members; CDXJ lines and page lines wait in temporary files
until the records are done, so memory stays bounded whatever the size. A
package written to a path is built under a temporary name beside it and
linked into place once whole: a failed or empty export leaves nothing, and
an existing file is never written over.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from web_index._version import __version__
from web_index.archive._cdx_query import CdxQuery
from web_index.archive._export import Tally, data_kind, export_records
from web_index.archive._selection import Selection, cdx_selection
from web_index.archive._sorted_lines import SortedLines
from web_index.archive._wacz_index import write_index
from web_index.archive._wacz_pages import PageLists
from web_index.archive._wacz_zip import WACZ_VERSION, ZipOut
from web_index.index import WebIndex
from web_index.models import RecordType

__all__ = ["WaczReport", "export_wacz"]

# A ZIP member past 2 GiB - 1 needs ZIP64 declared before it is written (zipfile refuses
# to close it otherwise), which a streamed member cannot know: a WARC member is cut at
# 1.5 GiB, and the record that crosses it (a body is at most 64 MiB) stays below.
_MAX_WARC_MEMBER = 3 << 29


@dataclass
class WaczReport(Tally):
    """What a WACZ export wrote."""

    path: Path | None = None  # None when written to a stream, or when nothing was written
    members: list[str] = field(default_factory=list)
    index_lines: int = 0
    zipnum: bool = False  # the index is ZipNum (index.cdx.gz + index.idx), not a plain index.cdx
    pages: int = 0
    size: int = 0  # of the package, when written to a path


def export_wacz(
    index: WebIndex,
    out: Path | str | IO[bytes],
    *,
    type: RecordType | str = RecordType.GET,
    domain: str | None = None,
    url_prefix: str | None = None,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
    title: str | None = None,
    description: str | None = None,
    name: str = "web-index",
    max_file_bytes: int = 1 << 30,
    text: bool = True,
    matching: CdxQuery | Sequence[CdxQuery] | None = None,
    on_progress: Callable[[WaczReport], None] | None = None,
) -> WaczReport:
    """Write the stored ``type`` attempts that the filters keep (as
    :func:`export_warcs` does) as a WACZ package to ``out``: a path (which must
    not exist; nothing is written when nothing matched) or a writable binary
    stream (written even when empty). ``title`` and ``description`` (Markdown)
    go into ``datapackage.json``; ``text``: page lines carry the page's text.
    ``matching``: only the attempts whose URL and time a CDX query (or one of several)
    matches, within the other filters (see :func:`export_warcs`); one query's ``type``
    replaces ``type``."""
    if isinstance(matching, CdxQuery):
        type, matching = matching.type, [matching]
    kind = data_kind(type)
    selection = Selection(domain, url_prefix, start, end)
    if matching:
        selection = cdx_selection(matching, selection)
    options = _Options(kind, selection, title, description, name, min(max_file_bytes, _MAX_WARC_MEMBER), text)
    if not isinstance(out, str | Path):
        return _write(index, out, options, on_progress)
    path = Path(out)
    if path.exists():
        raise FileExistsError(f"{path} exists: choose another name")
    partial = path.with_name(f".{path.name}.{secrets.token_hex(6)}.partial")
    try:
        with partial.open("xb") as fh:
            report = _write(index, fh, options, on_progress)
            fh.flush()
            os.fsync(fh.fileno())
        if report.responses + report.revisits:
            report.size = partial.stat().st_size
            _publish(partial, path)
            report.path = path
    finally:
        partial.unlink(missing_ok=True)
    return report


@dataclass(frozen=True)
class _Options:
    kind: RecordType
    selection: Selection
    title: str | None
    description: str | None
    name: str
    max_file_bytes: int
    text: bool


class _ArchiveSink:
    """export_records' files as the package's ``archive/`` members."""

    def __init__(self, out: ZipOut) -> None:
        self.out = out

    def open(self, filename: str) -> None:
        self.out.open(f"archive/{filename}", stored=True)

    def write(self, data: bytes) -> None:
        self.out.write(data)


def _write(
    index: WebIndex, sink: IO[bytes], options: _Options, on_progress: Callable[[WaczReport], None] | None
) -> WaczReport:
    created = datetime.now(UTC).replace(microsecond=0)
    report = WaczReport()
    out = ZipOut(sink, created)
    lines = SortedLines()
    pages = PageLists(options.text)
    try:
        export_records(
            index,
            _ArchiveSink(out),
            lines,
            report,
            type=options.kind,
            selection=options.selection,
            name=options.name,
            max_file_bytes=options.max_file_bytes,
            digest_prefix="sha1:",  # as cdxj-indexer writes it: a bare digest reads as SHA-256 to wabac.js
            on_progress=on_progress,
            on_capture=pages.add,
        )
        out.end()
        report.index_lines = lines.count
        indexes = write_index(out, lines)
        report.zipnum = indexes[0].endswith(".gz")
        report.pages = pages.write(out)
        package: dict[str, object] = {"profile": "data-package", "wacz_version": WACZ_VERSION}
        if options.title is not None:
            package["title"] = options.title
        if options.description is not None:
            package["description"] = options.description
        package["created"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
        package["software"] = f"web-index {__version__}"
        out.finish(package)
    except BaseException:
        with contextlib.suppress(Exception):  # the first failure is the one to tell
            out.abandon()
        raise
    finally:
        lines.close()
        pages.close()
    report.members = [r.path for r in out.resources]
    return report


def _publish(partial: Path, path: Path) -> None:
    """``partial`` as ``path``, unless ``path`` has come to exist meanwhile."""
    try:
        os.link(partial, path)  # fails on an existing file, where a rename would replace it
    except FileExistsError:
        raise FileExistsError(f"{path} exists: choose another name") from None
    except OSError:
        # A file system without hard links: check, then rename (a narrow race).
        if path.exists():
            raise FileExistsError(f"{path} exists: choose another name") from None
        partial.replace(path)
