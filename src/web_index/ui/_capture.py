"""A capture's page, at ``/ui/{coll}/{timestamp}/{url}`` as the Wayback
Machine's: the redirect chain hop by hop, the archived page in a sandboxed
frame, its title and extracted text, links to the raw memento, the WARC
record and the CDX line, and the previous and next captures of the URL."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from web_index.archive import parse_cdx_query, url_for_path
from web_index.crawl import extract, is_html
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.models import Page, PageKey, from_us
from web_index.ui._captures import captures_of, closest, moment, neighbour
from web_index.ui._render import (
    UI_PREFIX,
    UiError,
    capture_path,
    compare_path,
    history_path,
    page,
    store_of,
    target_url,
)

__all__ = ["capture"]

TEXT_SHOWN = 20_000  # characters of extracted text on the page; the frame shows the rest


def _chain(index: WebIndex, fields: dict[str, Any]) -> Page | None:
    """The stored attempt the capture is a response of (its whole chain)."""
    if not all(k in fields for k in ("request_id", "attempt_us", "page")):
        return None
    key = PageKey(
        url=fields["page"], timestamp=from_us(fields["attempt_us"]), request_id=fields["request_id"]
    )
    (found,) = index.query([key])
    return found if isinstance(found, Page) else None


async def capture(request: Request) -> Response:
    name, stamp = request.path_params["coll"], request.path_params["stamp"]
    coll, index = store_of(request, name)
    asked = target_url(request, f"{UI_PREFIX}/{name}/{stamp}/")
    try:
        query = parse_cdx_query({"url": [asked], "closest": [stamp], "matchType": ["exact"], "limit": ["1"]})
    except InvalidRecordError as exc:
        raise UiError(400, f"{asked!r}: {exc.problem}") from None
    assert query.closest is not None
    everything = await captures_of(coll, index, query.url, near=query.closest)
    at = closest(everything, query.closest)
    if at is None:
        raise UiError(404, f"{query.url} was never captured in {name}")
    fields = everything[at]
    if fields["timestamp"] != stamp or fields["url"] != asked:  # the closest: its own address
        return RedirectResponse(capture_path(name, fields), status_code=302)
    before = await neighbour(coll, everything, at, later=False)
    after = await neighbour(coll, everything, at, later=True)
    chain = await asyncio.to_thread(_chain, index, fields) if index is not None else None
    loaded = await coll.load(replace(query, closest=moment(fields)), live=False)
    title, text = "", ""
    if loaded is not None:
        body = loaded.response.data or b""
        ctype = loaded.response.headers.get("content-type")
        if is_html(ctype, body):
            got = await asyncio.to_thread(extract, body, ctype, fields["url"])
            if got is not None:
                title, text = got.title, got.text
    ts = fields["timestamp"]
    look = urlencode({"url": fields["url"], "closest": ts, "matchType": "exact"})
    return page(
        request,
        "capture.html",
        title=f"{title or fields['url']} · {moment(fields):%Y-%m-%d %H:%M:%S} · web-index",
        coll=name,
        fields=fields,
        looked_up=fields["url"],
        page_title=title,
        text=text[:TEXT_SHOWN],
        text_cut=len(text) > TEXT_SHOWN,
        chain=chain.responses if chain is not None else None,
        position=fields.get("position"),
        frame=f"{UI_PREFIX}/{name}/{ts}if_/{url_for_path(fields['url'])}",
        raw=f"/{name}/{ts}id_/{url_for_path(fields['url'])}",
        record=f"/{name}/resource?{look}",
        cdx=f"/{name}/cdx?{look}&limit=1&output=json",
        history=history_path(name, fields["url"]),
        before=capture_path(name, before) if before else None,
        compare=compare_path(name, fields["url"], before["timestamp"], ts) if before else None,
        after=capture_path(name, after) if after else None,
    )
