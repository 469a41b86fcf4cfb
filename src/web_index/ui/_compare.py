"""Two captures of a URL side by side: ``/ui/{coll}/compare?url=&a=&b=`` (two
timestamps): a line diff of their extracted text, and their status and header
fields, each field marked as the same, changed, or on one side only."""

from __future__ import annotations

import asyncio
import difflib
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from web_index.archive import Collection, parse_cdx_query
from web_index.crawl import extract, is_html
from web_index.errors import InvalidRecordError
from web_index.ui._captures import captures_of, closest, moment
from web_index.ui._render import UiError, capture_path, history_path, page, store_of

__all__ = ["compare"]

MAX_LINES = 5_000  # of text a side: a diff is quadratic at worst


@dataclass(frozen=True, slots=True)
class Side:
    fields: dict[str, Any]
    status: int
    headers: dict[str, str]
    lines: list[str]


async def _side(coll: Collection, fields: dict[str, Any], query: Any) -> Side:
    loaded = await coll.load(replace(query, closest=moment(fields)), live=False)
    if loaded is None:
        raise UiError(404, f"the capture of {fields['url']} at {fields['timestamp']} could not be loaded")
    response = loaded.response
    body, ctype = response.data or b"", response.headers.get("content-type")
    text = ""
    if is_html(ctype, body):
        got = await asyncio.to_thread(extract, body, ctype, fields["url"])
        text = got.text if got is not None else ""
    lines = [line for line in text.splitlines() if line.strip()][:MAX_LINES]
    return Side(fields, response.status_code, dict(response.headers), lines)


def _stamp(request: Request, name: str) -> str:
    raw = request.query_params.get(name, "")
    if not (raw.isdigit() and 1 <= len(raw) <= 14):
        raise UiError(400, f"{name}: {raw!r} is not a timestamp of 1 to 14 digits")
    return raw


def _headers(a: dict[str, str], b: dict[str, str]) -> list[tuple[str, str | None, str | None, str]]:
    rows = []
    for name in sorted(set(a) | set(b)):
        left, right = a.get(name), b.get(name)
        kind = "same" if left == right else "changed" if left is not None and right is not None else "one"
        rows.append((name, left, right, kind))
    return rows


async def compare(request: Request) -> Response:
    name = request.path_params["coll"]
    coll, index = store_of(request, name)
    asked = request.query_params.get("url", "").strip()
    first, second = _stamp(request, "a"), _stamp(request, "b")
    try:
        query = parse_cdx_query({"url": [asked], "matchType": ["exact"], "closest": [first]})
    except InvalidRecordError as exc:
        raise UiError(400, f"url: {asked!r}: {exc.problem}") from None
    captures = None
    chosen = []
    for stamp in (first, second):
        when = parse_cdx_query({"url": [asked], "closest": [stamp]}).closest
        assert when is not None
        if captures is None or captures.cut:  # the captures near the first moment only: ask again
            captures = await captures_of(coll, index, query.url, near=when)
        at = closest(captures, when)
        if at is None:
            raise UiError(404, f"{query.url} was never captured in {name}")
        chosen.append(captures[at])
    a, b = [await _side(coll, fields, query) for fields in chosen]
    diff = [
        (line[0], line[2:])
        for line in difflib.ndiff(a.lines, b.lines)
        if line[:1] in ("-", "+", " ")  # ndiff's "?" hints are for terminals
    ]
    return page(
        request,
        "compare.html",
        title=f"{query.url} · compare · web-index",
        coll=name,
        url=query.url,
        a=a,
        b=b,
        links=(capture_path(name, a.fields), capture_path(name, b.fields)),
        history=history_path(name, query.url),
        headers=_headers(a.headers, b.headers),
        diff=diff,
        changed=sum(1 for op, _ in diff if op != " "),
    )
