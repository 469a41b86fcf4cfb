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

import ipaddress
import json
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

import surt

from web_index.archive._cdx_query import CDX_FIELDS, CdxQuery
from web_index.archive._http import target_uri
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.models import Page, Response, payload_sha1, sha1_text
from web_index.urls import host_of, url_key

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
# A redirect chain's later responses come after its start; none takes this long.
_CHAIN_SPAN = timedelta(hours=1)

Capture = tuple[dict[str, str], datetime]  # the fields, and the moment for closest


def _capture(response: Response, url: str, key: str, source: str) -> Capture:
    moment = response.timestamp.astimezone(UTC).replace(microsecond=0)  # CDX counts whole seconds
    mime = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    data = response.data
    fields = {
        "urlkey": key,
        "timestamp": moment.strftime("%Y%m%d%H%M%S"),
        "url": url,
        "mime": mime or "unk",
        "status": str(response.status_code),
        "digest": "-" if data is None else sha1_text(payload_sha1(data)).removeprefix("sha1:"),
        "source": source,
        "source_type": "web-index",
    }
    return fields, moment


def capture_moment(timestamp: str) -> datetime:
    """A CDX timestamp (up to 14 digits, padded with the earliest moment) as a time."""
    digits = timestamp[:14]
    padded = digits + "19700101000000"[len(digits) :]
    return datetime.strptime(padded, "%Y%m%d%H%M%S").replace(tzinfo=UTC)


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
    key = surt.surt(query.url)
    if query.match_type == "exact":
        return key, lambda k: k == key
    if query.match_type == "prefix":
        return key, lambda k: k.startswith(key)
    host = key.split(")", 1)[0]
    if query.match_type == "host":
        return host + ")", lambda k: k.startswith(host + ")")
    return host, lambda k: k.startswith((host + ")", host + ","))


def _scans(query: CdxQuery) -> tuple[list[tuple[str | None, str | None]], Callable[[str], bool]]:
    """The scans (``url_prefix``, ``domain``) of the store that hold what
    ``query`` asks for, and the test a capture's ``urlkey`` must pass. The
    store keys URLs with their scheme and ``www.``, so an exact or prefix query
    scans each of the four forms; a host or domain query scans the partition."""
    _, wanted = key_range(query)
    if query.match_type in ("exact", "prefix"):
        return _forms(query.url), wanted
    return [(None, host_of(query.url))], wanted


def _forms(url: str) -> list[tuple[str | None, str | None]]:
    parts = urlsplit(url_key(url))
    host = parts.netloc.removeprefix("www.")
    rest = urlunsplit(("", "", parts.path, parts.query, ""))
    try:  # an address has no "www." form
        ipaddress.ip_address(parts.hostname or "")
        hosts = [host]
    except ValueError:
        hosts = [host, "www." + host]
    return [(f"{scheme}://{h}{rest}", None) for scheme in ("http", "https") for h in hosts]


def find_captures(index: WebIndex, query: CdxQuery, *, source: str) -> list[Capture]:
    """Every capture ``query`` asks for, in its order, up to its ``limit``."""
    found = [m.capture for m in _matching(index, query, source)]
    return ordered(found, query)


class Memento(NamedTuple):
    """A capture and the stored response it is, with what names its WARC
    records: the attempt's request id and the response's position in its chain."""

    response: Response
    capture: Capture
    request_id: str
    position: int


def closest_capture(index: WebIndex, query: CdxQuery, *, source: str) -> Memento | None:
    """The capture ``query`` asks for (its match, dates, filters and record
    type) closest to its ``closest``, the latest without one, with its
    response; ``None`` if there is none. Of equally close ones, the first in
    ``find_captures``'s order."""
    when = query.closest or datetime.now(UTC)
    best: tuple[tuple[float, str, str], Memento] | None = None
    for memento in _matching(index, query, source):
        rank = _nearness(memento.capture, when)
        if best is None or rank < best[0]:
            best = (rank, memento)
    return None if best is None else best[1]


def closest_memento(
    index: WebIndex, url: str, when: datetime, *, source: str
) -> tuple[Response, Capture] | None:
    """The response captured for ``url`` closest to ``when`` (of equally close
    ones, the earlier), with its capture; ``None`` if there is none."""
    found = closest_capture(index, CdxQuery(url=url, closest=when), source=source)
    return None if found is None else (found.response, found.capture)


def _matching(index: WebIndex, query: CdxQuery, source: str) -> Iterator[Memento]:
    try:
        scans, wanted = _scans(query)
    except InvalidRecordError as exc:
        raise InvalidRecordError("url", exc.problem) from None
    found = False
    for url_prefix, domain in scans:
        for hit in _scan(index, query, source, url_prefix, domain, wanted):
            found = True
            yield hit
    if not found and query.match_type in ("exact", "prefix"):
        # Not the start of any attempt: perhaps a later response of a redirect
        # chain, stored under the URL that was asked for first. The partition holds it.
        yield from _scan(index, query, source, None, host_of(query.url), wanted)


def _scan(
    index: WebIndex,
    query: CdxQuery,
    source: str,
    url_prefix: str | None,
    domain: str | None,
    wanted: Callable[[str], bool],
) -> Iterator[Memento]:
    start, end = _moment(query.start), _moment(query.end)
    pages = index.scan(
        query.type,
        url_prefix=url_prefix,
        domain=domain,
        start=None if start is None else start - _CHAIN_SPAN,
        end=None if end is None else end + timedelta(seconds=1),  # its fractions of a second too
    )
    for page in pages:
        assert isinstance(page, Page)
        for position, response in enumerate(page.responses):
            url = target_uri(response.request_url)
            key = surt.surt(url)
            if not wanted(key):
                continue
            fields, moment = _capture(response, url, key, source)
            if wanted_fields(query, fields):
                yield Memento(response, (fields, moment), page.request_id, position)


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
        found = _collapsed(found, *query.collapse)
    return found[: query.limit]


def _collapsed(found: list[Capture], field: str, width: int | None) -> list[Capture]:
    kept: list[Capture] = []
    last: str | None = None
    for capture in found:
        value = capture[0].get(field, "-")[:width]
        if value != last:
            kept.append(capture)
            last = value
    return kept


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
