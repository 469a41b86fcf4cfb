"""The store out as WARC/1.1: ``.warc.gz`` files and a sorted CDXJ index.

Every stored response of a chain (redirects too) becomes a ``request``
record (reconstructed: method, path, ``Host``; the store keeps no request
headers) and a ``response`` record holding the status, header fields and body
(see ``_http`` for the fields an export must change to carry a decoded body),
dated when that response arrived. A body whose payload was written already
in this export becomes a ``revisit`` record (identical-payload-digest) that
refers to the first one by its URI, date and record id. Each file starts with
a ``warcinfo`` record; a file is closed once its records (its ``warcinfo``
aside) fill ``max_file_bytes``. Each record is its own gzip member, so that a
reader can seek to it: the CDXJ lines (pywb's form, one per response or
revisit, sorted) give its offset and length.

Record ids are derived from the request id, the position in the chain and
the record's kind: exporting the same records again writes the same ids, and
importing the files again stores nothing twice. The response records are
built by ``_warc_write``, which the server's Resource API shares.

``export_warcs`` and the WACZ export (``_wacz``) share one record stream:
``export_records`` walks the selection and hands each file's bytes to a sink
(files in a folder, or members of a ZIP), so both write the same records.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Protocol, TypeVar
from urllib.parse import urlsplit

import surt

from web_index._version import __version__
from web_index.archive._cdx_query import CdxQuery
from web_index.archive._selection import Selection, cdx_selection
from web_index.archive._sorted_lines import SortedLines
from web_index.archive._warc_write import capture_ident, record_id, response_record, warc_date, warc_record
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.models import Page, RecordType, Response, sha1_text
from web_index.storage import capture_mime
from web_index.urls import target_uri

__all__ = [
    "ExportReport",
    "Tally",
    "WarcSink",
    "Written",
    "data_kind",
    "export_records",
    "export_warcs",
]


@dataclass
class Tally:
    """What an export counted, whatever it wrote into."""

    attempts: int = 0
    responses: int = 0
    revisits: int = 0
    bytes: int = 0  # of the WARC files


@dataclass
class ExportReport(Tally):
    """What an export wrote."""

    files: list[Path] = field(default_factory=list)
    cdxj: Path | None = None


_T = TypeVar("_T", bound=Tally)


def export_warcs(
    index: WebIndex,
    out: Path,
    *,
    type: RecordType | str = RecordType.GET,
    domain: str | None = None,
    url_prefix: str | None = None,
    start: datetime | str | None = None,
    end: datetime | str | None = None,
    name: str = "web-index",
    max_file_bytes: int = 1 << 30,
    matching: Sequence[CdxQuery] = (),
    on_progress: Callable[[ExportReport], None] | None = None,
) -> ExportReport:
    """Write the stored ``type`` (``get`` or ``head``) attempts that the filters
    (as :meth:`WebIndex.scan` takes them) keep into ``out`` (a folder, made if
    missing) as ``<name>-00000.warc.gz``, ``-00001``, … and ``<name>.cdxj``.
    ``matching``: of those, only the attempts whose URL and time one of these CDX queries
    matches (``url``, ``matchType``, ``from``, ``to``, as the CDX API matches a capture)."""
    kind = data_kind(type)
    selection = Selection(domain, url_prefix, start, end)
    if matching:
        selection = cdx_selection(matching, selection)
    out.mkdir(parents=True, exist_ok=True)
    for taken in (out / f"{name}-00000.warc.gz", out / f"{name}.cdxj"):
        if taken.exists():
            raise FileExistsError(f"{taken} exists: choose another name or folder")
    report = ExportReport()
    lines = SortedLines()
    sink = _FolderSink(out, report)
    try:
        export_records(
            index,
            sink,
            lines,
            report,
            type=kind,
            selection=selection,
            name=name,
            max_file_bytes=max_file_bytes,
            digest_prefix="",  # pywb's form: the bare base32
            on_progress=on_progress,
        )
        sink.close()
        report.cdxj = out / f"{name}.cdxj"
        with report.cdxj.open("xb") as fh:
            fh.writelines(line + b"\n" for line in lines.sorted())
    finally:
        sink.close()
        lines.close()  # the spilled runs, when the export stopped early
    return report


@dataclass(frozen=True)
class Written:
    """A response written by ``export_records``: what a page list needs of it."""

    page: Page
    position: int
    response: Response
    target: str  # the WARC-Target-URI
    revisit: bool


class WarcSink(Protocol):
    """Where an export's WARC files go, one at a time."""

    def open(self, filename: str) -> None:
        """Start the file ``filename`` (closing the one before)."""

    def write(self, data: bytes) -> None:
        """Append ``data`` to the open file."""


def export_records(
    index: WebIndex,
    sink: WarcSink,
    lines: SortedLines,
    report: _T,
    *,
    type: RecordType,
    selection: Selection,
    name: str,
    max_file_bytes: int,
    digest_prefix: str,
    on_progress: Callable[[_T], None] | None = None,
    on_capture: Callable[[Written], None] | None = None,
) -> None:
    """Write the selection's records into ``sink``'s files (``<name>-00000.warc.gz``…),
    their CDXJ lines into ``lines`` (unsorted), and count them in ``report``."""
    writer = _Writer(sink, name, max_file_bytes, report, lines, digest_prefix)
    chosen = selection
    for page in index.scan(
        type, domain=chosen.domain, url_prefix=chosen.url_prefix, start=chosen.start, end=chosen.end
    ):
        assert isinstance(page, Page)
        if chosen.keep is not None and not chosen.keep(page):
            continue
        report.attempts += 1
        for position, response in enumerate(page.responses):
            revisit, target = writer.write_capture(page, position, response, type)
            if on_capture is not None:
                on_capture(Written(page, position, response, target, revisit))
        if on_progress is not None and report.attempts % 256 == 0:
            on_progress(report)
    if on_progress is not None:
        on_progress(report)


def data_kind(type: RecordType | str) -> RecordType:
    """``type`` as a kind of record an export writes: get or head."""
    kind = RecordType.parse(type)
    if kind.is_metadata:
        raise InvalidRecordError("type", f"export writes data records: get or head, not {kind.value}")
    return kind


class _FolderSink:
    def __init__(self, out: Path, report: ExportReport) -> None:
        self.out, self.report = out, report
        self.file: IO[bytes] | None = None

    def open(self, filename: str) -> None:
        self.close()
        path = self.out / filename
        self.file = path.open("xb")  # never over a file already there
        self.report.files.append(path)

    def write(self, data: bytes) -> None:
        assert self.file is not None
        self.file.write(data)

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None


class _Writer:
    def __init__(
        self,
        sink: WarcSink,
        name: str,
        max_file_bytes: int,
        report: Tally,
        lines: SortedLines,
        digest_prefix: str,
    ) -> None:
        self.sink, self.name, self.max_bytes, self.report = sink, name, max_file_bytes, report
        self.lines, self.digest_prefix = lines, digest_prefix
        self.filename: str | None = None
        self.size = 0  # of the open file: the sink may have no tell()
        # Of its warcinfo record, which is dated when written: left out of the bound, so that where
        # a file ends depends on the records alone (two exports of the same records split alike).
        self.info_size = 0
        self.files = 0
        self.warcinfo = ""
        # payload SHA-1 -> (target URI, WARC-Date, WARC-Record-ID) of the record holding it
        self.written: dict[bytes, tuple[str, str, str]] = {}

    def write_capture(
        self, page: Page, position: int, response: Response, kind: RecordType
    ) -> tuple[bool, str]:
        if self.filename is None or self.size - self.info_size >= self.max_bytes:
            self._next_file()
        ident = capture_ident(page.request_id, position)
        target = target_uri(response.request_url)
        response_id = record_id(ident, "response")
        when = warc_date(response.timestamp)
        method = "HEAD" if kind is RecordType.HEAD else "GET"
        self._write(self._request(target, method, when, ident, response_id))
        record, sha1, revisit = response_record(
            response, warc_record_id=response_id, warcinfo_id=self.warcinfo, written=self.written
        )
        if revisit:
            self.report.revisits += 1
        else:
            if sha1 is not None and response.data:
                self.written[sha1] = (target, when, response_id)
            self.report.responses += 1
        offset, length = self._write(record)
        fields = {
            "url": target,
            "mime": "warc/revisit" if revisit else capture_mime(response.headers),
            "status": str(response.status_code),
            "digest": self.digest_prefix + sha1_text(sha1).removeprefix("sha1:") if sha1 is not None else "-",
            "length": str(length),
            "offset": str(offset),
            "filename": self.filename or "",
        }
        stamp = response.timestamp.astimezone(UTC).strftime("%Y%m%d%H%M%S")
        self.lines.add(f"{surt.surt(target)} {stamp} {json.dumps(fields, ensure_ascii=False)}")
        return revisit, target

    def _request(self, url: str, method: str, when: str, ident: str, response_id: str) -> bytes:
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        block = f"{method} {target} HTTP/1.1\r\nhost: {parts.netloc.rsplit('@', 1)[-1]}\r\n\r\n".encode(
            "utf-8", "surrogateescape"
        )
        fields = [
            ("WARC-Date", when),
            ("WARC-Target-URI", url),
            ("WARC-Warcinfo-ID", self.warcinfo),
            ("WARC-Concurrent-To", response_id),
            ("Content-Type", "application/http; msgtype=request"),
        ]
        return warc_record("request", record_id(ident, "request"), fields, block)

    def _next_file(self) -> None:
        self.filename = f"{self.name}-{self.files:05d}.warc.gz"
        self.files += 1
        self.sink.open(self.filename)
        self.size = 0
        self.warcinfo = record_id(self.filename, "warcinfo")
        fields = [
            ("WARC-Date", warc_date(datetime.now(UTC))),
            ("WARC-Filename", self.filename),
            ("Content-Type", "application/warc-fields"),
        ]
        block = (
            f"software: web-index/{__version__}\r\nformat: WARC File Format 1.1\r\n"
            "conformsTo: https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\n"
        )
        self.info_size = self._write(warc_record("warcinfo", self.warcinfo, fields, block.encode()))[1]

    def _write(self, record: bytes) -> tuple[int, int]:
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # one gzip member a record
        member = packer.compress(record) + packer.flush()
        offset = self.size
        self.sink.write(member)
        self.size += len(member)
        self.report.bytes += len(member)
        return offset, len(member)
