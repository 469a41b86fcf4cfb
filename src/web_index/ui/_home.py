"""The home page (a lookup form and the collections) and a lookup's answer."""

from __future__ import annotations

import asyncio
from collections import Counter
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from web_index.archive import CdxQuery, parse_cdx_query
from web_index.errors import InvalidRecordError
from web_index.models import AttemptMetadata
from web_index.ui._browse import attempts_under, holdings, recent_captures
from web_index.ui._render import (
    UiError,
    capture_path,
    domain_path,
    history_path,
    kept,
    one_page,
    page,
    page_number,
    store_of,
)
from web_index.ui._save import save_form

__all__ = ["home", "lookup"]

URLS_A_PAGE = 100
DOMAINS_A_PAGE = 50
# A prefix, host or domain lookup lists the URLs of at most this many captures.
LOOKUP_CAPTURES = 100_000


async def home(request: Request) -> Response:
    """The lookup form, what the server's own store holds (its domains, the most
    recently fetched first, paged, and its newest captures), the collections."""
    name = request.app.state.store_collection
    _, index = store_of(request, name)
    number = page_number(request)
    held = await kept(request, f"holdings {name}", lambda: holdings(index)) if index is not None else []
    shown, paging = one_page(request, number, held, DOMAINS_A_PAGE)
    # Its newest captures are read from the domains' files: kept as long as the holdings.
    recent = []
    if index is not None and number == 0:
        store = index
        recent = await kept(request, f"recent {name}", lambda: recent_captures(store, held))
    form = save_form(request, name)
    response = page(
        request,
        "home.html",
        title="web-index",
        held=[(h, _urls_of(name, h.domain), domain_path(name, h.domain)) for h in shown],
        domains=len(held),
        recent=[(m, _capture_of(name, m)) for m in recent],
        pager=paging,
        save=form,
    )
    return form.remembered(request, response) if form is not None else response


def _urls_of(coll: str, domain: str) -> str:
    """Where a registrable domain's URLs are listed: a lookup of ``*.domain``;
    for an address, whose hosts have ports a domain lookup does not match (as
    pywb's), its page."""
    if domain.replace(".", "").isdigit() or ":" in domain:
        return domain_path(coll, domain)
    return f"/lookup?{urlencode({'url': f'*.{domain}'})}"


def _capture_of(coll: str, m: AttemptMetadata) -> str:
    """The capture a successful attempt stored: the one nearest its start (the page redirects there)."""
    assert m.timestamp is not None
    return capture_path(coll, {"timestamp": f"{m.timestamp:%Y%m%d%H%M%S}", "url": m.url})


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
    index = coll.store
    tried = await asyncio.to_thread(attempts_under, index, query.url, query.match_type) if index else {}
    urls = sorted(counts.keys() | tried.keys())
    shown, paging = one_page(request, number, urls, URLS_A_PAGE)
    return page(
        request,
        "lookup.html",
        title=f"{asked} · web-index",
        asked=asked,
        coll=coll_name,
        match=query.match_type,
        rows=[(u, counts[u], tried.get(u), history_path(coll_name, u)) for u in shown],
        total=len(urls),
        captures=len(captures),
        attempts=sum(n for n, _ in tried.values()),
        failed=sum(f for _, f in tried.values()),
        from_store=index is not None,
        cut=len(captures) >= LOOKUP_CAPTURES,
        pager=paging,
    )
