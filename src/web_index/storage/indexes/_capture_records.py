"""Responses from index lines: the find-then-read path's last step.

An index's line of format 2 (:class:`StoredCapture`) holds every value of the
response but its body, and the body's place in the compacted file of the
line's partition; loading it is one positioned read of that place, one zstd
frame, a slice, and the body's SHA-1 compared with the line's digest. Nothing
else is looked up: not the month index, not the query engine, not the file's
footer. A single lookup comes with its line (:func:`capture_response`); a
batch that found its winners' rows through the month index reads their lines
by row (:func:`row_captures`), then their bodies (:func:`bodies_by_place`), each
page once however many of its bodies it wants.

A line with no values (buffered, of a part file) or a place that no longer
holds its body (the file compacted again, a byte flipped) gives nothing here:
the caller loads that record the way it is queried, which finds it wherever it
is now or fails naming the damaged file. Never a wrong body.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence

from web_index.models import RecordType, Response, base32_sha1, from_us, payload_sha1, restored_response
from web_index.storage._layout import Partition
from web_index.storage.backends import Backend
from web_index.storage.indexes._capture_lines import StoredCapture, parse_stored_capture
from web_index.storage.indexes._captures import CaptureIndex
from web_index.storage.pages import BodyPlace, PlaceError, page_values, value_at
from web_index.urls import key_and_domain

__all__ = ["bodies_by_place", "capture_response", "row_captures", "stored_response"]

_MONTH = re.compile(r"[0-9]{4}/[0-9]{2}")
_Pages = dict[tuple[str, int], bytes]  # (file, a page's offset in it) -> its values, decompressed
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


def row_captures(index: CaptureIndex, rows: Iterable[int]) -> dict[int, StoredCapture]:
    """The lines of these rows of the compacted file ``index`` covers, parsed; a row
    without a line, or whose line names another row, is left out."""
    fields: dict[int, StoredCapture] = {}
    # Lines in their order, so that rows whose lines share a block read it once.
    for row, line in index.row_lines(rows):
        found = parse_stored_capture(line)
        if found.row == row:
            fields[row] = found
    return fields


def bodies_by_place(backend: Backend, wanted: Sequence[tuple[str, StoredCapture]]) -> list[bytes | None]:
    """The body each ``(compacted file's path, its line)`` names, in order: ``None``
    for one its place does not hold (see the module's docstring). Wants in their
    pages' order decompress a page once for its bodies. Positioned reads, zstd and
    SHA-1, which let other threads run: a batch spreads its wants over threads."""
    pages: _Pages = {}
    return [_body(backend, path, fields, pages) for path, fields in wanted]


def _body(backend: Backend, path: str, fields: StoredCapture, pages: _Pages) -> bytes | None:
    """The body a line's place holds, if its SHA-1 is the line's digest."""
    if fields.body is None:
        return None
    if fields.held is not None:  # a payload another month's file holds (storage/payloads/_refs.py)
        if not _MONTH.fullmatch(fields.held):
            return None
        path = _held_path(path, fields.held)
    want = base32_sha1(fields.digest)
    at, _size, _raw, value = fields.body
    for fresh in (False, True):
        # A descriptor kept open may be of the file before a compaction: once more, anew.
        try:
            # The place itself (a tuple built) only for a page not read yet: most bodies share one.
            values = pages.get((path, at))
            if values is None:
                place = fields.place
                assert place is not None  # it has a body
                values = _page(backend, path, pages, place, fresh=fresh)
            data = value_at(values, value)
        except (PlaceError, FileNotFoundError):
            return None
        if payload_sha1(data) == want:
            return data
        pages.pop((path, at), None)
    return None


def _page(backend: Backend, path: str, pages: _Pages, place: BodyPlace, *, fresh: bool) -> bytes:
    """The values of the page ``place`` is in, read now and kept in ``pages``."""
    if len(pages) >= _PAGES_KEPT:
        pages.clear()
    read = functools.partial(backend.read_range, path, fresh=fresh)
    values = pages[(path, place.at)] = page_values(read, place)
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
