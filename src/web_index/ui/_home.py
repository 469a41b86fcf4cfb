"""The home page (a lookup form and the collections) and a lookup's answer."""

from __future__ import annotations

from collections import Counter

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from web_index.archive import CdxQuery, parse_cdx_query
from web_index.errors import InvalidRecordError
from web_index.ui._render import UiError, history_path, one_page, page, page_number, store_of

__all__ = ["home", "lookup"]

URLS_A_PAGE = 100
# A prefix, host or domain lookup lists the URLs of at most this many captures.
LOOKUP_CAPTURES = 100_000


async def home(request: Request) -> Response:
    return page(request, "home.html", title="web-index")


async def lookup(request: Request) -> Response:
    """``?url=`` a URL (its history), or a host, ``prefix*`` or ``*.domain``
    (the URLs under it, with their counts), as the CDX API takes them."""
    asked = request.query_params.get("url", "").strip()
    coll_name = request.query_params.get("coll") or request.app.state.store_collection
    coll, _ = store_of(request, coll_name)
    if not asked:
        raise UiError(400, "url: give a URL, a host (example.com), a prefix (example.com/blog/*) or *.domain")
    params = {"url": [asked]}
    if "/" not in asked.split("://", 1)[-1].rstrip("*") and not asked.startswith("*."):
        params["matchType"] = ["host"]  # a bare host, as the form's hint says
    try:
        query = parse_cdx_query(params)
    except InvalidRecordError as exc:
        raise UiError(400, f"{asked!r} is not a URL, host, prefix or domain: {exc.problem}") from None
    if query.match_type == "exact":
        return RedirectResponse(history_path(coll_name, query.url), status_code=303)
    number = page_number(request)
    captures = await coll.find(CdxQuery(url=query.url, match_type=query.match_type, limit=LOOKUP_CAPTURES))
    counts = Counter(fields["url"] for fields, _ in captures)
    urls = sorted(counts)
    shown, paging = one_page(request, number, urls, URLS_A_PAGE)
    return page(
        request,
        "lookup.html",
        title=f"{asked} · web-index",
        asked=asked,
        coll=coll_name,
        match=query.match_type,
        rows=[(u, counts[u], history_path(coll_name, u)) for u in shown],
        total=len(urls),
        captures=len(captures),
        cut=len(captures) >= LOOKUP_CAPTURES,
        pager=paging,
    )
