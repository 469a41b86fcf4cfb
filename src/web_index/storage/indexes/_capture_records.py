"""Responses from index lines: the find-then-read path's last step.

An index's line of format 2 (:class:`StoredCapture`) holds every value of the
response but its body, and the body's place in the compacted file of the
line's partition; loading it is one positioned read of that place, one zstd
frame, a slice, and the body's SHA-1 compared with the line's digest. Nothing
else is looked up: not the month index, not the query engine, not the file's
footer. A single lookup comes with its line (:func:`capture_response`); a
batch that found its winners' rows through the month index reads their lines
by row (:func:`rows_by_place`), each page once however many of its bodies it
wants.

A line with no values (buffered, of a part file) or a place that no longer
holds its body (the file compacted again, a byte flipped) gives nothing here:
the caller loads that record the way it is queried, which finds it wherever it
is now or fails naming the damaged file. Never a wrong body.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from web_index.models import RecordType, Response, base32_sha1, from_us, payload_sha1, restored_response
from web_index.storage._layout import Partition
from web_index.storage.backends import Backend
from web_index.storage.indexes._capture_lines import StoredCapture, parse_stored_capture
from web_index.storage.indexes._captures import CaptureIndex
from web_index.storage.pages import BodyPlace, PlaceError, page_values, value_at
from web_index.urls import key_and_domain

__all__ = ["capture_response", "rows_by_place", "stored_response"]

_MONTH = re.compile(r"[0-9]{4}/[0-9]{2}")
_Pages = dict[int, bytes]  # a page's offset in its file -> its values, decompressed
_PAGES_KEPT = 64


def capture_response(backend: Backend, type: RecordType, line: bytes) -> Response | None:
    """The response an index's ``line`` stands for, or ``None`` when the line
    cannot give it alone (see the module's docstring)."""
    fields = parse_stored_capture(line)
    if fields.row < 0:
        return None
    data: bytes | None = None
    if type is RecordType.GET:
        data = _body(backend, _compacted_path(type, fields), fields, {})
        if data is None:
            return None
    return stored_response(fields, data)


def rows_by_place(
    backend: Backend, index: CaptureIndex, type: RecordType, path: str, rows: Iterable[int]
) -> dict[int, tuple[StoredCapture, Response]]:
    """The line and response of each of these rows of the compacted file at
    ``path``, read through its capture index ``index``; a row it cannot give
    (no line, or a place that does not hold the body) is left out."""
    fields: dict[int, StoredCapture] = {}
    # Lines in their order, so that rows whose lines share a block read it once; then bodies in
    # the rows' order, which is their pages' (a page is decompressed once for its bodies).
    for row, line in index.row_lines(rows):
        found = parse_stored_capture(line)
        if found.row == row:
            fields[row] = found
    pages: _Pages = {}
    out: dict[int, tuple[StoredCapture, Response]] = {}
    bodies = type is RecordType.GET
    for row, stored in sorted(fields.items()):
        data = None
        if bodies:
            data = _body(backend, path, stored, pages)
            if data is None:
                continue
        out[row] = (stored, stored_response(stored, data))
    return out


def _body(backend: Backend, path: str, fields: StoredCapture, pages: _Pages) -> bytes | None:
    """The body a line's place holds, if its SHA-1 is the line's digest."""
    if fields.body is None:
        return None
    if fields.held is not None:  # a payload another month's file holds (storage/payloads/_refs.py)
        if not _MONTH.fullmatch(fields.held):
            return None
        path = _held_path(path, fields.held)
        pages = {}  # another file's offsets
    want = base32_sha1(fields.digest)
    at, _size, _raw, value = fields.body
    for fresh in (False, True):
        # A descriptor kept open may be of the file before a compaction: once more, anew.
        try:
            # The place itself (a tuple built) only for a page not read yet: most bodies share one.
            values = pages.get(at)
            if values is None:
                place = fields.place
                assert place is not None  # it has a body
                values = _page(backend, path, pages, place, fresh=fresh)
            data = value_at(values, value)
        except (PlaceError, FileNotFoundError):
            return None
        if payload_sha1(data) == want:
            return data
        pages.pop(at, None)
    return None


def _page(backend: Backend, path: str, pages: _Pages, place: BodyPlace, *, fresh: bool) -> bytes:
    """The values of the page ``place`` is in, read now and kept in ``pages``."""
    if len(pages) >= _PAGES_KEPT:
        pages.clear()
    read = functools.partial(backend.read_range, path, fresh=fresh)
    values = pages[place.at] = page_values(read, place)
    return values


def _held_path(path: str, month: str) -> str:
    """The compacted file of the month ``month`` (``yyyy/mm``) beside the one at ``path``."""
    kind, _year, _month, name = path.split("/")
    return f"{kind}/{month}/{name}"


def _compacted_path(type: RecordType, fields: StoredCapture) -> str:
    """The compacted file a line's record is in: its attempt's partition's."""
    start = from_us(fields.attempt_us)
    return Partition(type, start.year, start.month, key_and_domain(fields.page)[1]).compacted_path


def stored_response(fields: StoredCapture, data: bytes | None) -> Response:
    """The response of a line of format 2, with its body ``data``."""
    name, version, calibre = fields.fetcher
    return restored_response(  # Response's fields in order: checked when stored, read back intact
        fields.page if fields.src is None else fields.src,
        fields.url if fields.req is None else fields.req,
        int(fields.status),
        fields.headers,
        from_us(fields.at),
        name,
        version,
        calibre,
        data,
        fields.retry,
        fields.final,
        fields.request_id,
    )
