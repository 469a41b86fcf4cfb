"""Mementos (RFC 7089): ``GET /{coll}/{timestamp}id_/{url}`` is the response
captured for ``url`` closest to ``timestamp`` (1 to 14 digits), as it was: its
status, header fields and body, with ``Memento-Datetime`` and a ``Link`` to the
original; ``/{coll}/{timestamp}/{url}`` redirects (302) to that memento.

The target URL is the rest of the path, raw, and the request's own query: the
form pywb's ``cdx+`` and ``memento+`` sources ask for. cdx_toolkit sends it
percent-encoded (``http%3A//…``), which is decoded once. A redirect's
``Location`` points at the memento of its target (``…id_/http…``), as
clients that follow replayed redirects expect.

Archived pages are served with ``Content-Security-Policy: sandbox``: a page's
scripts then run, if at all, in an origin of their own, never with this
server's.
"""

from __future__ import annotations

import asyncio
import re
from email.utils import format_datetime
from urllib.parse import unquote, urljoin

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from web_index.archive import closest_memento, parse_cdx_query, wire_headers
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.server._errors import ApiError, bad_parameter

__all__ = ["memento"]

_STAMP = re.compile(r"([0-9]{1,14})(id_)?")
_HOP_BY_HOP = frozenset(["connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"])


def _target(request: Request, prefix: str) -> str:
    raw = request.scope.get("raw_path") or request.url.path.encode()
    target = raw.decode("latin-1")[len(prefix) :]
    if target[:7].lower() == "http%3a" or target[:8].lower() == "https%3a":
        target = unquote(target)
    target = re.sub(r"^(https?:/)(?=[^/])", r"\1/", target)  # a "//" some clients fold
    query = request.scope.get("query_string", b"").decode("latin-1")
    return f"{target}?{query}" if query else target


async def memento(request: Request) -> Response:
    coll, stamp = request.path_params["coll"], request.path_params["stamp"]
    if coll != request.app.state.collection:
        raise ApiError(404, f"no collection {coll!r}; this server has {request.app.state.collection!r}")
    m = _STAMP.fullmatch(stamp)
    if m is None:
        raise ApiError(404, f"not a memento path: {stamp!r} is not a timestamp of 1 to 14 digits (and id_)")
    digits, raw = m.group(1), m.group(2) is not None
    target = _target(request, f"/{coll}/{stamp}/")
    try:
        query = parse_cdx_query({"url": [target], "closest": [digits]})
    except InvalidRecordError as exc:
        raise bad_parameter(exc.field, exc.problem) from None
    assert query.closest is not None
    index: WebIndex = request.app.state.index
    found = await asyncio.to_thread(closest_memento, index, query.url, query.closest, source=coll)
    if found is None:
        message = f"no captures for {query.url}"
        return JSONResponse({"error": message, "message": message}, status_code=404)
    response, (fields, moment) = found
    base = f"{str(request.base_url).rstrip('/')}/{coll}/{fields['timestamp']}id_/"
    if not raw:
        return RedirectResponse(base + fields["url"], status_code=302)
    headers: list[tuple[str, str]] = []
    for name, value in wire_headers(response.headers, response.data):
        if name.lower() in _HOP_BY_HOP:
            continue
        if name.lower() == "location":
            value = base + urljoin(fields["url"], value)
        headers.append((name, value))
    date = format_datetime(moment, usegmt=True)
    headers += [
        ("memento-datetime", date),
        (
            "link",
            f'<{fields["url"]}>; rel="original", <{base}{fields["url"]}>; rel="memento"; datetime="{date}"',
        ),
        ("content-security-policy", "sandbox"),
    ]
    out = Response(response.data or b"", status_code=response.status_code)
    out.raw_headers = [
        *((n.encode("latin-1", "replace"), v.encode("latin-1", "replace")) for n, v in headers),
        (b"content-length", str(len(response.data or b"")).encode()),
    ]
    return out
