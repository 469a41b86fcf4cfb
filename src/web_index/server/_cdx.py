"""``GET /{coll}/cdx`` (also ``/{coll}/index``, the seed's name): pywb's CDX
server API over the store (the parameters, fields and forms are those of
:mod:`web_index.archive`'s CDX queries).

Answers the lines of ``output`` (``cdxj`` by default, as pywb, whose ``cdx+``
index source reads no other); ``showNumPages`` answers ``{"pages", "pageSize",
"blocks"}``; 400 names a bad parameter (and a ``page`` past the last, so that
clients paging through stop there); 404 when nothing was captured, with the
reason in ``error`` and ``message`` (cdx_toolkit reads either as "none").
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web_index.archive import cdx_lines, cdx_page, find_captures, num_pages, parse_cdx_query
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.server._errors import ApiError, bad_parameter

__all__ = ["DEFAULT_COLLECTION", "cdx"]

DEFAULT_COLLECTION = "store"
_MEDIA = {
    "cdxj": "text/x-cdxj",
    "json": "text/x-ndjson",
    "text": "text/plain",
    "link": "application/link-format",
}


async def cdx(request: Request) -> Response:
    coll = request.path_params["coll"]
    if coll != request.app.state.collection:
        raise ApiError(404, f"no collection {coll!r}; this server has {request.app.state.collection!r}")
    params: dict[str, list[str]] = {}
    for name, value in request.query_params.multi_items():
        params.setdefault(name, []).append(value)
    index: WebIndex = request.app.state.index
    try:
        query = parse_cdx_query(params)
        captures = await asyncio.to_thread(find_captures, index, query, source=coll)
        if query.show_num_pages:
            return JSONResponse(num_pages(len(captures)))
        page = cdx_page(captures, query.page)
    except InvalidRecordError as exc:
        raise bad_parameter(exc.field, exc.problem) from None
    if not page:
        message = f"no captures for {query.url} ({query.match_type})"
        return JSONResponse({"error": message, "message": message}, status_code=404)
    return Response("".join(cdx_lines(page, query)), media_type=_MEDIA[query.output])
