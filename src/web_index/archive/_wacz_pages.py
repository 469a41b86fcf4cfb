"""A WACZ package's page lists: ``pages/pages.jsonl`` and ``pages/extraPages.jsonl``.

A page is an HTML capture answered 200. Entry pages (a host's ``/``) go to
``pages.jsonl``, the list ReplayWeb.page opens on; every other page to
``extraPages.jsonl``, which it searches. When no entry page was written, the
others are the page list: it must not be empty for lack of a ``/``.

Each list's first line is a header (readers skip line 1 whatever it holds;
py-wacz wants ``format`` and ``id`` in it). A page line has ``id`` (the
attempt's request id: ReplayWeb.page keys pages on it, so two pages must not
share one), ``url``, ``ts`` (the second of the capture, as its CDXJ line
has it), ``title`` and, with ``text``, the start of the page's text, which
is what a package's full-text search reads. The store keeps no extracted
text beside a capture (a search pack holds only a crawl's), so the text is
taken from the body: the plain text, not the main content, which is slower
to find.
"""

from __future__ import annotations

import json
import tempfile
import uuid
from datetime import UTC
from typing import IO
from urllib.parse import urlsplit

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from web_index.archive._export import Written
from web_index.archive._wacz_zip import ZipOut
from web_index.fetch import decode_body
from web_index.storage import capture_mime

__all__ = ["PageLists"]

_TEXT_CHARS = 4000  # a page's text kept: search reads the first MiB of the list only
_HTML = ("text/html", "application/xhtml+xml")


class PageLists:
    """The pages among an export's captures, spilled to temporary files until written."""

    def __init__(self, text: bool) -> None:
        self.text = text
        self.entry = tempfile.TemporaryFile()  # noqa: SIM115 (closed by write or close)
        self.extra = tempfile.TemporaryFile()  # noqa: SIM115
        self.entries = self.extras = 0

    def add(self, capture: Written) -> None:
        response = capture.response
        if response.status_code != 200 or not response.data or capture_mime(response.headers) not in _HTML:
            return
        try:
            ident = uuid.UUID(capture.page.request_id).hex
        except ValueError:
            ident = capture.page.request_id
        page: dict[str, object] = {
            "id": ident if response.is_final else f"{ident}-{capture.position}",
            "url": capture.target,
            "ts": response.timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        kind = next((v for k, v in response.headers.items() if k.lower() == "content-type"), None)
        html, _ = decode_body(response.data, kind)
        tree = HTMLTree.parse(html)
        page["title"] = " ".join((tree.title or "").split()) or capture.target
        if self.text:
            text = extract_plain_text(tree, main_content=False, list_bullets=False, alt_texts=False)
            page["text"] = text[:_TEXT_CHARS]
        parts = urlsplit(capture.target)
        entry = parts.path in ("", "/") and not parts.query
        (self.entry if entry else self.extra).write(json.dumps(page, ensure_ascii=False).encode() + b"\n")
        if entry:
            self.entries += 1
        else:
            self.extras += 1

    def write(self, out: ZipOut) -> int:
        """Write the lists into ``out``; returns the pages written."""
        lists = [("pages/pages.jsonl", "pages", "All Pages", self.entry)]
        if self.entries and self.extras:
            lists.append(("pages/extraPages.jsonl", "extra-pages", "Extra Pages", self.extra))
        elif not self.entries:
            lists = [("pages/pages.jsonl", "pages", "All Pages", self.extra)]
        for path, ident, title, lines in lists:
            header = {"format": "json-pages-1.0", "id": ident, "title": title, "hasText": self.text}
            out.open(path, stored=False)
            out.write(json.dumps(header).encode() + b"\n")
            lines.seek(0)
            _copy(lines, out)
            out.end()
        self.close()
        return self.entries + self.extras

    def close(self) -> None:
        self.entry.close()
        self.extra.close()


def _copy(source: IO[bytes], out: ZipOut) -> None:
    while chunk := source.read(1 << 20):
        out.write(chunk)
