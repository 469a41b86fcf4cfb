"""The store out as WARC/1.1: ``.warc.gz`` files and a sorted CDXJ index.

Every stored response of a chain (redirects too) becomes a ``request``
record (reconstructed: method, path, ``Host``; the store keeps no request
headers) and a ``response`` record holding the status, header fields and body
(see ``_http`` for the fields an export must change to carry a decoded body),
dated when that response arrived. A body whose payload was written already
in this export becomes a ``revisit`` record (identical-payload-digest) that
refers to the first one. Each file starts with a ``warcinfo`` record; a file
is closed once it holds ``max_file_bytes``. Each record is its own gzip
member, so that a reader can seek to it: the CDXJ lines (pywb's form, one
per response or revisit, sorted) give its offset and length.

Record ids are derived from the request id, the position in the chain and
the record's kind: exporting the same records again writes the same ids, and
importing the files again stores nothing twice. The response records are
built by ``_warc_write``, which the server's Resource API shares.
"""

from __future__ import annotations

import io
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import surt
from fastwarc.warc import WarcRecord, WarcRecordType

from web_index._version import __version__
from web_index.archive._warc_write import (
    capture_ident,
    new_record,
    record_bytes,
    record_id,
    response_record,
    set_block,
    warc_date,
)
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.models import Page, RecordType, Response, sha1_text
from web_index.storage import capture_mime
from web_index.urls import target_uri

__all__ = ["ExportReport", "export_warcs"]


@dataclass
class ExportReport:
    """What an export wrote."""

    files: list[Path] = field(default_factory=list)
    cdxj: Path | None = None
    attempts: int = 0
    responses: int = 0
    revisits: int = 0
    bytes: int = 0  # of the WARC files


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
    on_progress: Callable[[ExportReport], None] | None = None,
) -> ExportReport:
    """Write the stored ``type`` (``get`` or ``head``) attempts that the filters
    (as :meth:`WebIndex.scan` takes them) keep into ``out`` (a folder, made if
    missing) as ``<name>-00000.warc.gz``, ``-00001``, … and ``<name>.cdxj``."""
    kind = RecordType.parse(type)
    if kind.is_metadata:
        raise InvalidRecordError("type", f"export writes data records: get or head, not {kind.value}")
    out.mkdir(parents=True, exist_ok=True)
    for taken in (out / f"{name}-00000.warc.gz", out / f"{name}.cdxj"):
        if taken.exists():
            raise FileExistsError(f"{taken} exists: choose another name or folder")
    report = ExportReport()
    writer = _Writer(out, name, max_file_bytes, report)
    for page in index.scan(kind, domain=domain, url_prefix=url_prefix, start=start, end=end):
        assert isinstance(page, Page)
        report.attempts += 1
        for position, response in enumerate(page.responses):
            writer.write_capture(page, position, response, kind)
        if on_progress is not None and report.attempts % 256 == 0:
            on_progress(report)
    writer.close()
    if on_progress is not None:
        on_progress(report)
    return report


class _Writer:
    def __init__(self, out: Path, name: str, max_file_bytes: int, report: ExportReport) -> None:
        self.out, self.name, self.max_bytes, self.report = out, name, max_file_bytes, report
        self.file: io.BufferedWriter | None = None
        self.path: Path | None = None
        self.warcinfo = ""
        self.cdx: list[str] = []
        self.written: dict[bytes, tuple[str, str]] = {}  # payload SHA-1 -> (target URI, WARC-Date)

    def write_capture(self, page: Page, position: int, response: Response, kind: RecordType) -> None:
        if self.file is None or self.file.tell() >= self.max_bytes:
            self._next_file()
        ident = capture_ident(page.request_id, position)
        target = target_uri(response.request_url)
        response_id = record_id(ident, "response")
        when = warc_date(response.timestamp)
        method = "HEAD" if kind is RecordType.HEAD else "GET"
        self._write(self._request(target, method, when, ident, response_id))
        record, sha1 = response_record(
            response, warc_record_id=response_id, warcinfo_id=self.warcinfo, written=self.written
        )
        revisit = record.record_type == WarcRecordType.revisit
        if revisit:
            self.report.revisits += 1
        else:
            if sha1 is not None and response.data:
                self.written[sha1] = (target, when)
            self.report.responses += 1
        offset, length = self._write(record)
        fields = {
            "url": target,
            "mime": "warc/revisit" if revisit else capture_mime(response.headers),
            "status": str(response.status_code),
            "digest": sha1_text(sha1).removeprefix("sha1:") if sha1 is not None else "-",
            "length": str(length),
            "offset": str(offset),
            "filename": self.path.name if self.path else "",
        }
        stamp = response.timestamp.astimezone(UTC).strftime("%Y%m%d%H%M%S")
        self.cdx.append(f"{surt.surt(target)} {stamp} {json.dumps(fields, ensure_ascii=False)}")

    def _request(self, url: str, method: str, when: str, ident: str, response_id: str) -> WarcRecord:
        parts = urlsplit(url)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        block = f"{method} {target} HTTP/1.1\r\nhost: {parts.netloc.rsplit('@', 1)[-1]}\r\n\r\n".encode(
            "utf-8", "surrogateescape"
        )
        record = new_record(WarcRecordType.request, record_id(ident, "request"))
        record.headers["WARC-Date"] = when
        record.headers["WARC-Target-URI"] = url
        record.headers["WARC-Warcinfo-ID"] = self.warcinfo
        record.headers["WARC-Concurrent-To"] = response_id
        record.headers["Content-Type"] = "application/http; msgtype=request"
        set_block(record, block)
        return record

    def _next_file(self) -> None:
        self._close_file()
        self.path = self.out / f"{self.name}-{len(self.report.files):05d}.warc.gz"
        self.file = self.path.open("xb")  # never over a file already there
        self.report.files.append(self.path)
        info = new_record(WarcRecordType.warcinfo, record_id(self.path.name, "warcinfo"))
        self.warcinfo = info.headers["WARC-Record-ID"]
        info.headers["WARC-Date"] = warc_date(datetime.now(UTC))
        info.headers["WARC-Filename"] = self.path.name
        info.headers["Content-Type"] = "application/warc-fields"
        info.set_bytes_content(
            f"software: web-index/{__version__}\r\nformat: WARC File Format 1.1\r\n"
            "conformsTo: https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\n".encode()
        )
        self._write(info)

    def _write(self, record: WarcRecord) -> tuple[int, int]:
        assert self.file is not None
        packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # one gzip member a record
        member = packer.compress(record_bytes(record)) + packer.flush()
        offset = self.file.tell()
        self.file.write(member)
        self.report.bytes += len(member)
        return offset, len(member)

    def _close_file(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def close(self) -> None:
        self._close_file()
        self.report.cdxj = self.out / f"{self.name}.cdxj"
        # pywb reads a CDXJ index by binary search: sorted as bytes, as `LC_ALL=C sort` would.
        self.cdx.sort(key=lambda line: line.encode("utf-8", "surrogateescape"))
        with self.report.cdxj.open("x", encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
            fh.writelines(line + "\n" for line in self.cdx)
