"""TimeMaps (RFC 7089): ``GET /{coll}/timemap/link/{url}`` lists every memento of
``url`` (``application/link-format``: the original, the TimeGate, the map itself
with its ``from`` and ``until``, then each memento with its ``datetime``, oldest
first), and ``/{coll}/timemap/json/{url}`` the same as JSON (the form of the
Memento aggregator's: ``original_uri``, ``timegate_uri``, ``timemap_uri``,
``mementos.list`` of ``{"datetime", "uri"}``). Each parameter is quoted: pywb's
``memento+`` source reads nothing else. A URL with more mementos than a TimeMap
lists (the CDX API's ``MAX_LIMIT``) gets the oldest of them and the
``Web-Index-Truncated`` header, as a cut CDX answer does: never a short map in silence.
"""

from __future__ import annotations

from email.utils import format_datetime

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web_index.archive import MAX_LIMIT, parse_cdx_query, url_for_path
from web_index.server._cdx import collection, find_cut, not_found
from web_index.server._errors import ApiError
from web_index.server._mementos import server_root, target_url

__all__ = ["timemap"]


async def timemap(request: Request) -> Response:
    coll, form = collection(request), request.path_params["form"]
    if form not in ("link", "json"):
        raise ApiError(404, f"no timemap form {form!r}: link or json")
    url = target_url(request, f"/{coll.name}/timemap/{form}/")
    query = parse_cdx_query({"url": [url], "limit": [str(MAX_LIMIT)]})
    captures, headers = await find_cut(coll, query, MAX_LIMIT)
    if not captures:
        return not_found(url)
    root = f"{server_root(request)}/{coll.name}"
    mementos = [(f"{root}/{c['timestamp']}id_/{url_for_path(c['url'])}", moment) for c, moment in captures]
    if form == "json":
        body = {
            "original_uri": url,
            "timegate_uri": f"{root}/timegate/{url}",
            "timemap_uri": {
                "link_format": f"{root}/timemap/link/{url}",
                "json_format": f"{root}/timemap/json/{url}",
            },
            "mementos": {
                "list": [{"datetime": m.strftime("%Y-%m-%dT%H:%M:%SZ"), "uri": u} for u, m in mementos]
            },
        }
        return JSONResponse(body, headers=headers)
    first, last = (format_datetime(mementos[i][1], usegmt=True) for i in (0, -1))
    lines = [
        f'<{url}>; rel="original"',
        f'<{root}/timegate/{url}>; rel="timegate"',
        f'<{root}/timemap/link/{url}>; rel="self"; type="application/link-format"; '
        f'from="{first}"; until="{last}"',
        *(f'<{u}>; rel="memento"; datetime="{format_datetime(m, usegmt=True)}"' for u, m in mementos),
    ]
    return Response(",\n".join(lines) + "\n", media_type="application/link-format", headers=headers)
