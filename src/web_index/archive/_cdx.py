"""CDX captures of a web index: what a query finds, filtered, ordered and
limited as pywb's CDX server does it, and written in its output forms.

A capture is one response the store holds: each response of an attempt's
redirect chain is a capture of its own URL (as the WARC export writes each as
a record), so replaying a redirect finds the page it led to. Failed attempts,
which have no response, are not captures (the JSON query API and
``WebIndex.query`` give their metadata records). GET responses are listed by
default, HEAD responses with ``type=head``. A capture from the store has no
``filename``, ``offset`` or ``length``: there is no WARC file to read it from
(the mementos serve it); ``source`` is the collection's name and
``source_type`` is ``web-index``.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import NamedTuple

from web_index.archive._cdx_query import CDX_FIELDS, CdxQuery
from web_index.errors import InvalidRecordError, InvalidURLError
from web_index.index import WebIndex
from web_index.models import Response, base32_sha1
from web_index.storage import CaptureFields, parse_capture_line
from web_index.urls import surt_prefixes

__all__ = [
    "PAGE_SIZE",
    "Capture",
    "Memento",
    "capture_moment",
    "cdx_lines",
    "cdx_page",
    "closest_capture",
    "closest_memento",
    "find_captures",
    "key_range",
    "num_pages",
    "ordered",
    "wanted_fields",
]

PAGE_SIZE = 1000  # captures a page of results (page=, showNumPages)
_TEXT_FIELDS = CDX_FIELDS[:9]  # the 9-field CDX line, which pywb parses back

Capture = tuple[dict[str, str], datetime]  # the fields, and the moment for closest
_Where = tuple[CaptureFields, str]  # a capture's line, and its fields


def capture_moment(timestamp: str) -> datetime:
    """A CDX timestamp (up to 14 digits, padded with the earliest moment) as a
    time; a ``ValueError`` if it is not one."""
    digits = timestamp[:14]
    p = digits + "19700101000000"[len(digits) :]
    if not (p.isascii() and p.isdigit()):  # int() would take "+1" or "1_0"
        raise ValueError(f"{timestamp!r} is not a CDX timestamp")
    # Not strptime: a CDX answer parses one a line, and strptime costs 30 us to this 2 us.
    return datetime(
        int(p[:4]), int(p[4:6]), int(p[6:8]), int(p[8:10]), int(p[10:12]), int(p[12:14]), tzinfo=UTC
    )


@functools.lru_cache(maxsize=1024)  # a query's from and to: most often pywb's padding, every lookup
def _moment(ts: str) -> datetime | None:
    try:
        return capture_moment(ts)
    except ValueError:  # pywb's padding makes 20240231235959 of "202402"
        return None


def key_range(query: CdxQuery) -> tuple[str, Callable[[str], bool]]:
    """Where in a SURT-sorted index ``query``'s captures start (every matching
    ``urlkey`` starts with it), and the test a ``urlkey`` must pass.

    Matching is on the SURT key, as in pywb: it drops the scheme and a
    leading ``www.``, so ``example.com/`` finds ``https://www.example.com/`` too.
    """
    prefixes = surt_prefixes(query.url, query.match_type)
    if query.match_type == "exact":
        key = prefixes[0][:-1]  # without the space that ends a key in a line
        return key, lambda k: k == key
    # A domain has two prefixes, ``host)`` and ``host,``: its keys start with ``host``.
    start = prefixes[0][:-1] if len(prefixes) > 1 else prefixes[0]
    return start, lambda k: k.startswith(prefixes)


def find_captures(index: WebIndex, query: CdxQuery, *, source: str) -> list[Capture]:
    """Every capture ``query`` asks for, in its order, up to its ``limit``.

    In key order (no ``closest``, not ``reverse``) the store's captures come
    sorted already: they are read only until the limit is reached."""
    if query.closest is not None:
        near: Iterator[Capture] = (capture for capture, _ in _nearest(index, query, source, query.closest))
        if query.collapse is not None:  # collapsing a prefix of the order gives a prefix of the whole's
            near = _collapsed(near, *query.collapse)
        return list(itertools.islice(near, query.limit))
    found: Iterator[Capture] = (capture for capture, _ in _matching(index, query, source, query.reverse))
    if query.collapse is not None:
        found = _collapsed(found, *query.collapse)
    return list(itertools.islice(found, query.limit))


class Memento(NamedTuple):
    """A capture and the stored response it is, with what names its WARC
    records: the attempt's request id and the response's position in its chain."""

    response: Response
    capture: Capture
    request_id: str
    position: int
    sha1: bytes | None = None  # the body's: the store's digest of it, as its capture line says


def closest_capture(index: WebIndex, query: CdxQuery, *, source: str) -> Memento | None:
    """The capture ``query`` asks for (its match, dates, filters and record
    type) closest to its ``closest``, the latest without one, with its
    response; ``None`` if there is none. Of equally close ones, the first in
    ``find_captures``'s order."""
    # Whole seconds, as captures are: the windows round it then bound exactly what they hold.
    if query.closest is None and query.match_type == "exact":
        # The latest: one key's captures are in time order, read from the newest month.
        found = _matching(index, query, source, reverse=True)
    else:
        found = _nearest(index, query, source, query.closest or datetime.now(UTC).replace(microsecond=0))
    for capture, (where, line) in found:
        response = index.capture_response(line, type=query.type)
        if response is not None:
            sha1 = None if response.data is None else base32_sha1(where.digest)
            return Memento(response, capture, where.request_id, where.position, sha1)
    return None


def closest_memento(
    index: WebIndex, url: str, when: datetime, *, source: str
) -> tuple[Response, Capture] | None:
    """The response captured for ``url`` closest to ``when`` (of equally close
    ones, the earlier), with its capture; ``None`` if there is none."""
    found = closest_capture(index, CdxQuery(url=url, closest=when), source=source)
    return None if found is None else (found.response, found.capture)


# Half-widths of the windows round a closest query's target that _nearest reads after the
# first (_first_width) and before the query's whole range: most closest queries ask for a time
# near captures, and a window reads the months it overlaps, not all of them.
_WINDOWS = (timedelta(days=40), timedelta(days=400))


def _first_width(target: datetime) -> timedelta:
    """The widest window round ``target`` within its month, an hour short of the
    month's start (where the month before's chains end) and a second short of
    its end, at least a day: the one partition most lookups need."""
    if target.tzinfo is UTC:  # every lookup's (3 us a lookup when made each time)
        month, after = _utc_month(target.year, target.month)
    else:
        month, after = _month(target.replace(day=1, hour=0, minute=0, second=0, microsecond=0))
    if after is None:  # December 9999
        return _DAY
    return max(_DAY, min(target - month - _HOUR, after - target - _SECOND))


_DAY, _HOUR, _SECOND = timedelta(days=1), timedelta(hours=1), timedelta(seconds=1)


@functools.lru_cache(maxsize=1024)
def _utc_month(year: int, month: int) -> tuple[datetime, datetime | None]:
    return _month(datetime(year, month, 1, tzinfo=UTC))


def _month(start: datetime) -> tuple[datetime, datetime | None]:
    """A month's first moment and the next month's (``None`` past year 9999)."""
    try:
        return start, (start + timedelta(days=32)).replace(day=1)
    except OverflowError:
        return start, None


def _nearest(
    index: WebIndex, query: CdxQuery, source: str, target: datetime
) -> Iterator[tuple[Capture, _Where]]:
    """The store's captures ``query`` matches, nearest to ``target`` first (as
    ``ordered`` ranks them), read lazily through widening windows round it.

    Every capture within a window is nearer than any outside it, so each
    window's captures that the one before did not hold come next, sorted."""
    covered: timedelta | None = None
    first = _first_width(target)
    for width in (first, *(w for w in _WINDOWS if w > first), None):
        if width is None:
            found = _matching(index, query, source)
        else:
            start, end = _shifted(target, -width), _shifted(target, width)
            found = _matching(index, query, source, window_start=start, window_end=end)
        ring = [f for f in found if covered is None or abs(f[0][1] - target) > covered]
        ring.sort(key=lambda f: _nearness(f[0], target))
        yield from ring
        covered = width


def _shifted(moment: datetime, by: timedelta) -> datetime | None:
    try:
        return moment + by
    except OverflowError:  # past year 1 or 9999: no bound that way
        return None


def _matching(
    index: WebIndex,
    query: CdxQuery,
    source: str,
    reverse: bool = False,
    window_start: datetime | None = None,
    window_end: datetime | None = None,
) -> Iterator[tuple[Capture, _Where]]:
    """The store's captures ``query`` matches (its key, dates and filters), in
    key order (descending if ``reverse``); only those from ``window_start`` to
    ``window_end`` (inclusive), if given."""
    start, end = _moment(query.start), _moment(query.end)
    if window_start is not None:
        start = window_start if start is None else max(start, window_start)
    if window_end is not None:
        end = window_end if end is None else min(end, window_end)
    if start is not None and end is not None and start > end:
        return
    try:
        lines = index.captures(
            query.url, match=query.match_type, type=query.type, start=start, end=end, reverse=reverse
        )
    except InvalidURLError as exc:
        raise InvalidRecordError("url", exc.problem) from None
    for line in lines:
        key, stamp, where = parse_capture_line(line)
        fields = {
            "urlkey": key,
            "timestamp": stamp,
            "url": where.url,
            "mime": where.mime,
            "status": where.status,
            "digest": where.digest,
            "source": source,
            "source_type": "web-index",
        }
        if wanted_fields(query, fields):
            yield (fields, capture_moment(stamp)), (where, line)


def wanted_fields(query: CdxQuery, fields: dict[str, str]) -> bool:
    """Whether a capture with ``fields`` is within the query's ``from``/``to``
    and passes its filters (the key is matched by whoever finds it)."""
    if not query.start <= fields["timestamp"] <= query.end:
        return False
    line = ""
    for f in query.filters:
        if f.field is None:
            line = line or " ".join(fields.get(name, "-") for name in CDX_FIELDS)
            text = line
        else:
            text = fields.get(f.field, "-")
        if not f.matches(text):
            return False
    return True


def ordered(found: list[Capture], query: CdxQuery) -> list[Capture]:
    """``found`` in the query's order (closest first, or by key and time,
    reversed on request), collapsed, cut at its ``limit``; sorted in place."""
    if query.closest is not None:
        target = query.closest
        found.sort(key=lambda c: _nearness(c, target))
    else:
        found.sort(key=lambda c: (c[0]["urlkey"], c[0]["timestamp"]), reverse=query.reverse)
    if query.collapse is not None:
        found = list(_collapsed(found, *query.collapse))
    return found[: query.limit]


def _collapsed(found: Iterable[Capture], field: str, width: int | None) -> Iterator[Capture]:
    last: str | None = None
    for capture in found:
        value = capture[0].get(field, "-")[:width]
        if value != last:
            yield capture
            last = value


def _nearness(capture: Capture, target: datetime) -> tuple[float, str, str]:
    fields, moment = capture
    return abs((moment - target).total_seconds()), fields["timestamp"], fields["urlkey"]


def num_pages(count: int) -> dict[str, int]:
    """``showNumPages``'s answer (pywb's form; cdx_toolkit reads ``blocks``)."""
    pages = math.ceil(count / PAGE_SIZE)
    return {"pages": pages, "pageSize": PAGE_SIZE, "blocks": pages}


def cdx_page(captures: list[Capture], page: int | None) -> list[Capture]:
    """The captures of ``page`` (all of them for ``None``); a page past the last
    is an error, as pywb's, so that clients paging through stop there."""
    if page is None:
        return captures
    last = math.ceil(len(captures) / PAGE_SIZE) - 1
    if page > max(last, 0):
        raise InvalidRecordError("page", f"Page {page} invalid: First Page is 0, Last Page is {last}")
    return captures[page * PAGE_SIZE : (page + 1) * PAGE_SIZE]


def cdx_lines(captures: list[Capture], query: CdxQuery) -> Iterator[str]:
    """The lines of ``query.output`` for ``captures``, each ending in a newline
    (``link``: entries joined by ``,`` and a newline)."""
    fields = query.fields
    for n, (c, moment) in enumerate(captures):
        if query.output == "cdxj":
            rest = {k: c[k] for k in (fields or CDX_FIELDS) if k in c and k not in ("urlkey", "timestamp")}
            yield f"{c['urlkey']} {c['timestamp']} {json.dumps(rest)}\n"
        elif query.output == "json":
            yield json.dumps({k: c[k] for k in (fields or CDX_FIELDS) if k in c}) + "\n"
        elif query.output == "text":
            yield " ".join(c.get(k, "-") for k in (fields or _TEXT_FIELDS)) + "\n"
        else:
            sep = ",\n" if n + 1 < len(captures) else "\n"
            date = format_datetime(moment, usegmt=True)
            yield f'<{c["url"]}>; rel="memento"; datetime="{date}"; collection="{c["source"]}"{sep}'
