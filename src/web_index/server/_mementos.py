"""Mementos (RFC 7089): ``GET /{coll}/{timestamp}id_/{url}`` is the response
captured for ``url`` closest to ``timestamp`` (1 to 14 digits), as it was: its
status, header fields and body, with ``Memento-Datetime`` and a ``Link`` to the
original; ``/{coll}/{timestamp}/{url}`` redirects (302) to that memento. The
TimeGate, ``/{coll}/timegate/{url}`` (and ``/{coll}/{url}``, the form pywb's
``memento+`` source asks), redirects to the memento closest to the request's
``Accept-Datetime`` (the latest without one), ``Vary: accept-datetime``.

The target URL is the rest of the path, raw, and the request's own query: the
form pywb's ``cdx+`` and ``memento+`` sources ask for. cdx_toolkit sends it
percent-encoded (``http%3A//…``), which is decoded once. A redirect's
``Location`` points at the memento of its target (``…id_/http…``), as
clients that follow replayed redirects expect.

Archived pages are served under :func:`~web_index.archive.content_policy`:
sandboxed in an origin of their own, no script, and nothing loaded from anywhere
but their collection's paths on this server (another collection may be the live
web), so a memento opened in a browser never reaches the live web. Of the
archived header fields, only those that describe the body keep their names; the
rest (``Set-Cookie``, ``Refresh``, a policy's reports, ``Link``,
``Clear-Site-Data``...) are served as ``X-Archive-Orig-<name>``, as pywb does,
since a browser would act on them for this server's origin (``served_name``), as
the Wayback Machine's ``id_`` serves them too. The body is as it was, unrewritten:
a link in a raw page opened in a browser leads where it led (the web pages' frame
is the rewritten view). An archived URL put in a path of this server is
percent-encoded whole when a browser would resolve its dot segments (``url_for_path``).
"""

from __future__ import annotations

import functools
import re
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime
from urllib.parse import urljoin

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from web_index.archive import (
    HOP_BY_HOP,
    CdxQuery,
    Collection,
    collection_sources,
    content_policy,
    parse_cdx_query,
    ranged,
    served_name,
    url_for_path,
    url_in_path,
    wire_headers,
)
from web_index.errors import InvalidRecordError
from web_index.server._cdx import collection, not_found
from web_index.server._errors import ApiError, bad_parameter

__all__ = ["memento", "memento_base", "memento_headers", "server_root", "target_url", "timegate"]

_STAMP = re.compile(r"([0-9]{1,14})(id_)?")


def _target(request: Request, prefix: str) -> str:
    raw = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string", b"").decode("latin-1")
    return url_in_path(raw.decode("latin-1")[len(prefix) :], query)


def target_url(request: Request, prefix: str) -> str:
    """The URL after ``prefix`` in the path (with the request's query), checked."""
    try:
        return parse_cdx_query({"url": [_target(request, prefix)]}).url
    except InvalidRecordError as exc:
        raise bad_parameter(exc.field, exc.problem) from None


async def memento(request: Request) -> Response:
    coll, stamp = collection(request), request.path_params["stamp"]
    if stamp.startswith(("http:", "https:")):  # /{coll}/{url}: pywb's TimeGate path
        return await _timegate(request, coll, target_url(request, f"/{coll.name}/"))
    m = _STAMP.fullmatch(stamp)
    if m is None:
        raise ApiError(404, f"not a memento path: {stamp!r} is not a timestamp of 1 to 14 digits (and id_)")
    digits, raw = m.group(1), m.group(2) is not None
    try:
        asked = {
            "url": [_target(request, f"/{coll.name}/{stamp}/")],
            "closest": [digits],
            "matchType": ["exact"],
        }
        query = parse_cdx_query(asked)  # exact: a trailing * is part of the URL, not a prefix query
    except InvalidRecordError as exc:
        raise bad_parameter(exc.field, exc.problem) from None
    loaded = await coll.load(query)
    if loaded is None:
        return not_found(query.url)
    response, (fields, moment) = loaded.response, loaded.capture
    base = memento_base(request, coll.name, fields)
    if not raw:
        return RedirectResponse(base + url_for_path(fields["url"]), status_code=302)
    part = ranged(response.data or b"", response.status_code, request.headers, response.headers)
    headers: list[tuple[str, str]] = []
    for name, value in wire_headers(response.headers, response.data):
        if name.lower() in HOP_BY_HOP or (part.status is not None and name.lower() == "content-range"):
            continue  # an archived Content-Range: a 206 (or 416) of this server has its own
        if name.lower() == "location":
            headers.append((name, base + url_for_path(urljoin(fields["url"], value))))
        else:  # what else a browser would do for this server's origin, under a name of its own
            headers.append((served_name(name), value))
    policy = content_policy(collection_sources(server_root(request), f"/{coll.name}/"))
    headers += [
        *memento_headers(fields, moment, base),
        ("content-security-policy", policy),
        ("x-content-type-options", "nosniff"),
        *part.headers,
    ]
    out = Response(part.body, status_code=part.status or response.status_code)
    out.raw_headers = [
        *((n.encode("latin-1", "replace"), v.encode("latin-1", "replace")) for n, v in headers),
        (b"content-length", str(len(part.body)).encode()),
    ]
    return out


def memento_base(request: Request, coll: str, fields: dict[str, str]) -> str:
    """The path, up to the URL, of the ``id_`` memento of the capture with these fields."""
    return f"{server_root(request)}/{coll}/{fields['timestamp']}id_/"


def server_root(request: Request) -> str:
    """This server's address as the request names it (``request.base_url``), without the
    last ``/``: what the links of an answer start with."""
    scope = request.scope
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    server = scope.get("server")
    root_path = scope.get("app_root_path", scope.get("root_path", ""))
    return _root(scope.get("scheme", "http"), host, None if server is None else tuple(server), root_path)


@functools.lru_cache(maxsize=256)
def _root(scheme: str, host: bytes | None, server: tuple[str, int] | None, root_path: str) -> str:
    # Starlette's own reading of the scope (a Resource answer spent ~5 us a request on it),
    # kept for the few addresses a server is called by.
    headers = [] if host is None else [(b"host", host)]
    scope = {"type": "http", "scheme": scheme, "server": server, "root_path": root_path, "path": root_path}
    return str(Request({**scope, "headers": headers, "query_string": b""}).base_url).rstrip("/")


def memento_headers(fields: dict[str, str], moment: datetime, base: str | None) -> list[tuple[str, str]]:
    """``Memento-Datetime`` and the ``Link`` to the original (and to the memento
    at ``base`` + URL, when there is one) of the capture with these fields."""
    date = format_datetime(moment, usegmt=True)
    link = f'<{fields["url"]}>; rel="original"'
    if base is not None:
        link += f', <{base}{fields["url"]}>; rel="memento"; datetime="{date}"'
    return [("memento-datetime", date), ("link", link)]


async def timegate(request: Request) -> Response:
    coll = collection(request)
    return await _timegate(request, coll, target_url(request, f"/{coll.name}/timegate/"))


def _accept_datetime(request: Request) -> datetime:
    asked = request.headers.get("accept-datetime")
    if asked is None:
        return datetime.now(UTC)  # the latest
    try:
        when = parsedate_to_datetime(asked)
    except (TypeError, ValueError):
        when = None
    if when is None or when.tzinfo is None:
        raise bad_parameter("Accept-Datetime", f"{asked!r} is not an HTTP date (RFC 1123, in GMT)")
    return when


async def _timegate(request: Request, coll: Collection, url: str) -> Response:
    when = _accept_datetime(request)
    found = await coll.find(CdxQuery(url=url, closest=when, limit=1))
    if not found:
        return not_found(url)
    fields, moment = found[0]
    root = f"{server_root(request)}/{coll.name}"
    chosen = f"{root}/{fields['timestamp']}id_/{url_for_path(fields['url'])}"
    date = format_datetime(moment, usegmt=True)
    link = (
        f'<{url}>; rel="original", '
        f'<{root}/timemap/link/{url}>; rel="timemap"; type="application/link-format", '
        f'<{chosen}>; rel="memento"; datetime="{date}"'
    )
    return Response(status_code=302, headers={"location": chosen, "vary": "accept-datetime", "link": link})
