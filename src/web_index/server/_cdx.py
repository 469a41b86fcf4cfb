"""``GET /{coll}/cdx`` (also ``/{coll}/index``, the seed's name): pywb's CDX
server API over a collection (the parameters, fields and forms are those of
:mod:`web_index.archive`'s CDX queries; a collection of several sources merges
theirs, each line naming its ``source``).

Answers the lines of ``output`` (``cdxj`` by default, as pywb, whose ``cdx+``
index source reads no other); ``showNumPages`` answers ``{"pages", "pageSize",
"blocks"}``; 400 names a bad parameter (and a ``page`` past the last, so that
clients paging through stop there); 404 when nothing was captured, with the
reason in ``error`` and ``message`` (cdx_toolkit reads either as "none").
A query without ``limit`` that the default limit cut short says so in a
``Web-Index-Truncated`` header (the limit applied), never in silence.
"""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web_index.archive import (
    DEFAULT_LIMIT,
    Capture,
    CdxQuery,
    Collection,
    cdx_lines,
    cdx_page,
    num_pages,
    parse_cdx_query,
)
from web_index.errors import InvalidRecordError
from web_index.server._errors import ApiError, bad_parameter

__all__ = [
    "DEFAULT_COLLECTION",
    "TRUNCATED_HEADER",
    "cdx",
    "collection",
    "find_cut",
    "not_found",
    "query_params",
]

DEFAULT_COLLECTION = "store"
TRUNCATED_HEADER = "Web-Index-Truncated"
_MEDIA = {
    "cdxj": "text/x-cdxj",
    "json": "text/x-ndjson",
    "text": "text/plain",
    "link": "application/link-format",
}


def collection(request: Request) -> Collection:
    """The collection the path names, which must be one of this server's (else a 404)."""
    name: str = request.path_params["coll"]
    collections: dict[str, Collection] = request.app.state.collections
    found = collections.get(name)
    if found is None:
        raise ApiError(404, f"no collection {name!r}; this server has {', '.join(sorted(collections))}")
    return found


def not_found(what: str, why: str | None = None) -> Response:
    """No captures of ``what`` (``why``, when it is known): a 404 saying so in ``error``
    and ``message`` (cdx_toolkit reads either as "none"; pywb's ``cdx+`` source any 404)."""
    message = f"no captures for {what}" + (f": {why}" if why else "")
    return JSONResponse({"error": message, "message": message}, status_code=404)


async def find_cut(
    coll: Collection, query: CdxQuery, limit: int
) -> tuple[list[Capture], dict[str, str] | None]:
    """At most ``limit`` of the captures ``query`` finds, and the headers that say
    when there were more (``TRUNCATED_HEADER``: an answer is never cut in silence)."""
    captures, cut = await coll.find_cut(replace(query, limit=limit))
    return captures, ({TRUNCATED_HEADER: str(limit)} if cut else None)


def query_params(request: Request) -> dict[str, list[str]]:
    """The query's parameters, each name's values in order (as ``parse_cdx_query`` takes them)."""
    # As Starlette's query_params read it (latin-1, then percent-decoded as UTF-8), without its
    # multi-dict, which a lookup would build only to turn it into this.
    return parse_qs(request.scope["query_string"].decode("latin-1"), keep_blank_values=True)


async def cdx(request: Request) -> Response:
    coll = collection(request)
    params = query_params(request)
    try:
        query = parse_cdx_query(params)
        defaulted = not (params.get("limit") or [""])[-1]
        if defaulted:
            captures, headers = await find_cut(coll, query, DEFAULT_LIMIT)
        else:
            captures, headers = await coll.find(query), None
        if query.show_num_pages:
            return JSONResponse(num_pages(len(captures)), headers=headers)
        page = cdx_page(captures, query.page)
    except InvalidRecordError as exc:
        raise bad_parameter(exc.field, exc.problem) from None
    if not page:
        return not_found(f"{query.url} ({query.match_type})")
    return Response("".join(cdx_lines(page, query)), media_type=_MEDIA[query.output], headers=headers)
