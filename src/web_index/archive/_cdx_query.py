"""A CDX server query, from its parameters (pywb's CDX server API).

The parameters and their meanings are pywb's, so that the clients written for
it (pywb's own ``cdx+`` index source, cdx_toolkit, scripts) work unchanged:
``url``, ``matchType`` (or a ``*`` wildcard when it is absent), ``from`` and
``to`` (1 to 14 digits, padded as pywb pads them), ``closest``, ``sort``
(``closest`` or ``reverse``) and ``reverse``, ``limit``, ``filter`` (any number:
``[!][=|~]field:value``), ``fl``, ``output``, ``page``, ``showNumPages`` and
``type``, a web-index addition that picks the record type listed, and
``collapse`` (``field`` or ``field:N``: of neighbouring lines whose field, or
its first N characters, is the same, only the first is kept). A bad value
is an :class:`~web_index.errors.InvalidRecordError` naming the parameter.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, unquote

import regex as _regex

from web_index.errors import InvalidRecordError
from web_index.models import RecordType
from web_index.urls import key_and_domain

__all__ = [
    "CDX_FIELDS",
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "OUTPUTS",
    "CdxFilter",
    "CdxQuery",
    "parse_cdx_query",
    "url_in_path",
]

# Every field a capture has, in the order of the text output (the 9-field CDX
# line pywb and wayback tools parse, then where it came from).
CDX_FIELDS = (
    "urlkey", "timestamp", "url", "mime", "status", "digest", "length", "offset", "filename",
    "source", "source_type", "live_url",
)  # fmt: skip
# pywb's names for them (and the classic CDX names that cdx_toolkit may send).
_ALIASES = {
    "u": "url", "original": "url", "statuscode": "status", "s": "status", "mimetype": "mime",
    "m": "mime", "l": "length", "o": "offset", "d": "digest", "t": "timestamp", "k": "urlkey",
    "f": "filename",
}  # fmt: skip
OUTPUTS = ("cdxj", "json", "text", "link")
MATCH_TYPES = ("exact", "prefix", "host", "domain")
DEFAULT_LIMIT = 10_000
MAX_LIMIT = 100_000
_TYPES = (RecordType.GET, RecordType.HEAD)
_DIGITS = re.compile(r"[0-9]{1,14}")
_LOW, _HIGH = "10000101000000", "29991231235959"  # pywb's padding of a partial timestamp
MAX_FILTER_CHARS = 1000
REGEX_SECONDS = 0.05  # a line; Python's re has no timeout, the regex package has


@dataclass(frozen=True, slots=True)
class CdxFilter:
    """One ``filter``: ``field`` (``None``: the whole text line) holds ``value``
    exactly (``=``), matches it as a regex from its start (``~``), or contains
    it (neither); ``negate`` (a leading ``!``) inverts that."""

    field: str | None
    value: str
    mode: str
    negate: bool
    regex: Any = None  # a regex.Pattern: matched with a timeout, so no pattern can hold a thread
    text: str = ""  # as given: what a remote CDX server is asked

    def matches(self, text: str) -> bool:
        if self.mode == "=":
            hit = text == self.value
        elif self.regex is not None:
            try:
                hit = self.regex.match(text, timeout=REGEX_SECONDS) is not None
            except TimeoutError:
                raise InvalidRecordError(
                    "filter", f"{self.value!r} took over {REGEX_SECONDS} s on one line: simplify it"
                ) from None
        else:
            hit = self.value in text
        return hit != self.negate


@dataclass(frozen=True, slots=True)
class CdxQuery:
    """A parsed CDX query; timestamps are 14-digit strings, compared as text."""

    url: str
    match_type: str = "exact"
    start: str = _LOW
    end: str = _HIGH
    closest: datetime | None = None
    reverse: bool = False
    limit: int = DEFAULT_LIMIT
    filters: tuple[CdxFilter, ...] = ()
    fields: tuple[str, ...] | None = None
    output: str = "cdxj"
    page: int | None = None
    show_num_pages: bool = False
    type: RecordType = RecordType.GET
    collapse: tuple[str, int | None] | None = None


def _one(params: Mapping[str, Sequence[str]], name: str) -> str | None:
    values = params.get(name)
    return values[-1] if values else None


def _timestamp(name: str, value: str, pad: str) -> str:
    if not _DIGITS.fullmatch(value):
        raise InvalidRecordError(name, f"{value!r} is not a timestamp of 1 to 14 digits")
    return value + pad[len(value) :]


def _closest(value: str) -> datetime:
    # As pywb: a partial timestamp stands for the last moment it covers
    # ("2014" is the end of 2014), a day past the month's end for its last.
    padded = _timestamp("closest", value, _HIGH)
    year, month = int(padded[:4]), int(padded[4:6])
    if not 1 <= month <= 12 or year < 1:
        raise InvalidRecordError("closest", f"{value!r} is not a date")
    day = int(padded[6:8])
    if day > 28:  # the month's length looked up only past the days every month has (1 us)
        day = min(day, calendar.monthrange(year, month)[1])
    hour, minute, second = int(padded[8:10]), int(padded[10:12]), int(padded[12:14])
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        raise InvalidRecordError("closest", f"{value!r} is not a date") from None


def _field(name: str, where: str) -> str:
    field = _ALIASES.get(name, name)
    if field not in CDX_FIELDS:
        raise InvalidRecordError(where, f"unknown field {name!r}; fields are {', '.join(CDX_FIELDS)}")
    return field


def _filter(text: str) -> CdxFilter:
    if len(text) > MAX_FILTER_CHARS:
        raise InvalidRecordError("filter", f"longer than {MAX_FILTER_CHARS} characters")
    negate = text.startswith("!")
    rest = text[negate:]
    mode = rest[:1] if rest[:1] in ("=", "~") else ""
    rest = rest[len(mode) :]
    name, sep, value = rest.partition(":")
    field = _field(name, "filter") if sep else None
    value = value if sep else rest
    regex = None
    if mode == "~":
        try:
            regex = _regex.compile(value)
        except _regex.error as exc:
            raise InvalidRecordError("filter", f"{value!r} is not a regular expression: {exc}") from None
    return CdxFilter(field, value, mode, negate, regex, text)


def _int(params: Mapping[str, Sequence[str]], name: str, low: int, high: int) -> int | None:
    raw = _one(params, name)
    if raw is None or raw == "":
        return None
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise InvalidRecordError(name, f"{raw!r} is not a whole number from {low} to {high}")
    return int(raw)


def _collapse(value: str | None) -> tuple[str, int | None] | None:
    if not value:
        return None
    name, sep, width = value.partition(":")
    if sep and not (width.isdigit() and 0 < int(width) <= 1000):
        raise InvalidRecordError("collapse", f"{width!r} is not a number of characters from 1 to 1000")
    return _field(name.strip(), "collapse"), int(width) if sep else None


def url_in_path(rest: str, query: str) -> str:
    """The URL an archive path ends with (``/{coll}/{timestamp}/URL``), given the
    path after its prefix, raw, and the request's own query: the form pywb's
    ``cdx+`` and ``memento+`` sources ask for. cdx_toolkit sends the URL
    percent-encoded (``http%3A//...``), decoded once here, and some clients
    fold its ``//``."""
    if rest[:7].lower() == "http%3a" or rest[:8].lower() == "https%3a":
        rest = unquote(rest)
    rest = re.sub(r"^(https?:/)(?=[^/])", r"\1/", rest)
    return f"{rest}?{query}" if query else rest


# What a browser changes in a path before it asks for it: a dot segment ("." or "..", or
# either as %2e) removes itself and maybe the segment before, and a backslash is a slash.
_MOVES_PATH = re.compile(r"[/\\](?:\.|%2e){1,2}(?:[/\\?#]|$)|\\", re.IGNORECASE)


def url_for_path(url: str) -> str:
    """``url`` as an archive path ends with it, :func:`url_in_path`'s inverse: as it is, or
    percent-encoded whole where a browser would resolve it into another path (an archived
    ``http://x/../../store/...`` turned into a link to another page of this server)."""
    if _MOVES_PATH.search(url) is None or not url[:5].lower().startswith("http"):
        return url
    return quote(url, safe="")


def _flag(params: Mapping[str, Sequence[str]], name: str) -> bool:
    return (_one(params, name) or "").lower() in ("1", "true", "yes", "on")


def parse_cdx_query(params: Mapping[str, Sequence[str]]) -> CdxQuery:
    """The query that ``params`` (each name's values, in order) ask for."""
    url = (_one(params, "url") or "").strip()
    if not url:
        raise InvalidRecordError("url", "required")
    match_type = _one(params, "matchType") or _one(params, "matchtype")
    if match_type is None:  # pywb: wildcards only when no matchType is given
        if url.startswith("*."):
            url, match_type = url[2:], "domain"
        elif url.endswith("*"):
            url, match_type = url[:-1], "prefix"
        else:
            match_type = "exact"
    elif match_type not in MATCH_TYPES:
        raise InvalidRecordError("matchType", f"{match_type!r} is not one of {', '.join(MATCH_TYPES)}")
    if "://" not in url:  # as pywb: a bare host or path is an http URL
        url = "http://" + url
    try:
        key_and_domain(url)  # what a lookup needs of it: a URL in normal form costs a regex
    except InvalidRecordError as exc:
        raise InvalidRecordError("url", exc.problem) from None
    start = _one(params, "from") or _one(params, "from_ts")
    end = _one(params, "to")
    closest = _one(params, "closest")  # empty, as pywb's cdx+ source sends it: absent
    sort = _one(params, "sort") or ""
    if sort not in ("", "closest", "reverse"):
        raise InvalidRecordError("sort", f"{sort!r} is not closest or reverse")
    output = _one(params, "output") or "cdxj"
    if output not in OUTPUTS:
        raise InvalidRecordError("output", f"{output!r} is not one of {', '.join(OUTPUTS)}")
    fl = _one(params, "fl") or _one(params, "fields")
    type_name = _one(params, "type") or "get"
    try:
        kind = RecordType.parse(type_name)
    except Exception:
        kind = None
    if kind not in _TYPES:
        raise InvalidRecordError("type", f"{type_name!r} is not get or head")
    assert kind is not None
    return CdxQuery(
        url=url,
        match_type=match_type,
        start=_LOW if not start else _timestamp("from", start, _LOW),
        end=_HIGH if not end else _timestamp("to", end, _HIGH),
        closest=_closest(closest) if closest else None,
        reverse=sort == "reverse" or _flag(params, "reverse"),
        limit=_int(params, "limit", 1, MAX_LIMIT) or DEFAULT_LIMIT,
        filters=tuple(_filter(f) for f in params.get("filter", ())),
        fields=None if not fl else tuple(_field(f.strip(), "fl") for f in fl.split(",") if f.strip()),
        output=output,
        page=_int(params, "page", 0, 10**9),
        show_num_pages=_flag(params, "showNumPages"),
        type=kind,
        collapse=_collapse(_one(params, "collapse")),
    )
