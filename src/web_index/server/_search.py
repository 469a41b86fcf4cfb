"""``GET /search?site=&q=[&limit=&offset=]``: a crawled site's pages ranked for a query.

Answers ``{"site", "query", "total", "offset", "limit", "hits": [{"url",
"title", "snippet", "score"}]}``; 400 naming a bad parameter, 404 for a
site with no published database, 503 when no searcher answered in time.
"""

from __future__ import annotations

import asyncio

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from web_index.crawl import LocalPacks, MessageError, SearchRouter, open_broker, site_asked, store_packs
from web_index.errors import SearchQueryError, SearchUnavailableError, SiteNotFoundError
from web_index.index import WebIndex
from web_index.search import MAX_LIMIT, MAX_OFFSET, SearchPage
from web_index.server._errors import ApiError, bad_parameter

__all__ = ["SearchBackend", "search"]


class SearchBackend:
    """Where searches go: the store's published databases, or a pipeline's searchers."""

    def __init__(self, index: WebIndex, *, queue: str | None, timeout: float, refresh: float) -> None:
        self.refresh = refresh
        self.router: SearchRouter | None = None
        self.packs: LocalPacks | None = None
        if queue is not None:
            self.router = SearchRouter(open_broker(queue), timeout=timeout)
        else:
            self.packs = store_packs(index)

    async def search(self, site: str, query: str, limit: int, offset: int) -> SearchPage:
        if self.router is not None:
            return await self.router.asearch(site, query, limit=limit, offset=offset)
        assert self.packs is not None
        return await asyncio.to_thread(self._local, site, query, limit, offset)

    def _local(self, site: str, query: str, limit: int, offset: int) -> SearchPage:
        assert self.packs is not None
        self.packs.ensure(site, max_age=self.refresh)
        return self.packs.search(site, query, limit=limit, offset=offset)

    def close(self) -> None:
        if self.router is not None:
            self.router.close()
            self.router.broker.close()
        if self.packs is not None:
            self.packs.close()


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise bad_parameter(name, f"{raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise bad_parameter(name, f"{value} is not between {low} and {high}")
    return value


def _text(request: Request, name: str) -> str:
    value = request.query_params.get(name, "").strip()
    if not value:
        raise bad_parameter(name, "required")
    return value


async def search(request: Request) -> Response:
    site, query = _text(request, "site"), _text(request, "q")
    limit = _int(request, "limit", 10, 1, MAX_LIMIT)
    offset = _int(request, "offset", 0, 0, MAX_OFFSET)
    try:
        site = site_asked(site)
    except MessageError as exc:
        raise bad_parameter("site", str(exc)) from None
    backend: SearchBackend = request.app.state.searches
    try:
        page = await backend.search(site, query, limit, offset)
    except SearchUnavailableError as exc:
        raise ApiError(503, str(exc)) from None
    except SiteNotFoundError as exc:
        raise ApiError(404, str(exc)) from None
    except SearchQueryError as exc:
        raise bad_parameter("q", str(exc)) from None
    body = {"site": site, **msgspec.to_builtins(page)}
    return Response(msgspec.json.encode(body), media_type="application/json")
