"""Site search: ``/ui/search?site=&q=``, the crawled sites' published databases
searched as ``GET /search`` searches them (the same backend: the store's packs,
or a pipeline's searchers), hits paged with their snippets highlighted, and
each site's crawl status."""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from web_index.crawl import Broker, MessageError, check_site, site_files
from web_index.errors import SearchError, SearchUnavailableError
from web_index.ui._render import UiError, history_path, page, page_number, pager, served

__all__ = ["search"]

HITS_A_PAGE = 20
# Sites whose newest database is fetched to show its pages and build time
# before anyone searches it; a store with more lists the rest's sizes only.
SITES_DESCRIBED = 50
_MARK = re.compile(r"(<mark>.*?</mark>)", re.S)
_QUEUES = ("index", "crawl", "timer", "pack")


def snippet_parts(snippet: str) -> list[tuple[bool, str]]:
    """A snippet (HTML: the page's text escaped, matches in ``<mark>``) as
    plain-text parts, each marked or not: the template escapes them again, so
    nothing in a page's text is ever taken for markup."""
    parts = []
    for part in _MARK.split(snippet):
        if part.startswith("<mark>") and part.endswith("</mark>"):
            parts.append((True, html.unescape(part[6:-7])))
        elif part:
            parts.append((False, html.unescape(part)))
    return parts


def _status(request: Request) -> list[dict[str, Any]]:
    """Each site with a published database: its generation and size, and the
    pages in it and when it was built, from this server's copy of its newest
    (fetched here for the first :data:`SITES_DESCRIBED` sites, as a search would)."""
    files = site_files(served(request).index)
    backend = request.app.state.searches
    packs = backend.packs  # None when searches go to a pipeline's searchers
    out = []
    for n, site in enumerate(files.sites()):
        if packs is not None and n < SITES_DESCRIBED:
            with contextlib.suppress(SearchError, MessageError):
                packs.ensure(site, max_age=backend.refresh)
        generation = files.latest(site)
        if generation is None:
            continue
        info = packs.info(site) if packs is not None else None
        out.append(
            {
                "site": site,
                "generation": generation,
                "bytes": files.pack_size(site, generation),
                "pages": info.pages if info is not None else None,
                "built": info.built if info is not None else None,
            }
        )
    return out


def _queued(broker: Broker) -> dict[str, int]:
    return {queue: broker.counts(queue).pending for queue in _QUEUES}


async def search(request: Request) -> Response:
    backend = request.app.state.searches
    site = request.query_params.get("site", "").strip()
    if backend.packs is not None and site:  # the copy searched below, however far down the list
        with contextlib.suppress(SearchError, MessageError):
            await asyncio.to_thread(backend.packs.ensure, site, max_age=backend.refresh)
    sites = await asyncio.to_thread(_status, request)
    router = backend.router
    queued = await asyncio.to_thread(_queued, router.broker) if router is not None else None
    query = request.query_params.get("q", "").strip()
    context: dict[str, Any] = {"title": "Site search · web-index", "sites": sites, "site": site, "q": query}
    context["queued"] = queued
    if not site or not query:
        if site or query:
            raise UiError(400, "site and q: choose a site and type some words")
        return page(request, "search.html", results=None, **context)
    try:
        site = check_site(site)
    except MessageError as exc:
        raise UiError(400, f"site: {exc}") from None
    number = page_number(request)
    try:
        found = await backend.search(site, query, HITS_A_PAGE, number * HITS_A_PAGE)
    except SearchUnavailableError as exc:
        raise UiError(503, str(exc)) from None
    except (SearchError, ValueError) as exc:
        raise UiError(400, str(exc)) from None
    store = served(request).store
    # A hit links into the archive (the URL's history), never to the live page.
    hits = [
        {
            "url": h.url,
            "title": h.title,
            "parts": snippet_parts(h.snippet),
            "link": history_path(store, h.url),
        }
        for h in found.hits
    ]
    context["title"] = f"{query} · {site} · web-index"
    return page(
        request,
        "search.html",
        results={"total": found.total, "hits": hits, "first": number * HITS_A_PAGE + 1},
        pager=pager(request, number, found.total, HITS_A_PAGE) if found.total else None,
        **context,
    )
