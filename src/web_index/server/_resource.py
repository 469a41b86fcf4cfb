"""The Resource API of pywb's distributed-archive spec: a capture as one WARC record.

``GET /{coll}/resource?url=…`` takes the CDX API's parameters (``closest``,
``from``, ``to``, ``matchType``, ``filter``, ``type``…; the output ones do not
apply) and answers the capture closest to ``closest`` (the latest without
one) as one uncompressed WARC/1.1 ``response`` record (``application/warc-record``):
the record the export writes of it, under the same id, but never a revisit and
without a warcinfo to refer to. The answer's own headers say where it came
from and what memento it is: ``Archive-Source-Coll``, ``Memento-Datetime`` and
``Link`` (the original, and the ``id_`` memento of a GET capture: that path
serves GET captures only, so a HEAD capture has none).

``POST /{coll}/resource-post?url=…`` takes the request to look up as its body
(request line and header fields, no body of its own): its method picks the
record type (GET or HEAD; the store keeps no other, so any other is a 404), and
without ``url`` its target (absolute, or a path under its ``Host``) names the
URL. This is how a client gets the record of a HEAD response. A body past
:data:`MAX_BODY` is a 413; one that is not an HTTP request head a 400 naming
``body``.
"""

from __future__ import annotations

import asyncio
import re

from starlette.requests import Request
from starlette.responses import Response

from web_index.archive import Collection, Loaded, parse_cdx_query, record_id, response_record
from web_index.errors import InvalidRecordError
from web_index.models import RecordType
from web_index.server._body import read_body
from web_index.server._cdx import collection, not_found, query_params
from web_index.server._errors import bad_parameter
from web_index.server._mementos import memento_base, memento_headers

__all__ = ["MAX_BODY", "parse_request_head", "resource", "resource_post"]

MAX_BODY = 64 << 10  # a request head is a few hundred bytes; a body past this is not one
_BUILT_INLINE = 256 << 10  # bodies up to this size make their WARC record on the event loop
_TOO_LARGE = f"more than {MAX_BODY:,} bytes: post the request head only"
_TCHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # RFC 9110 token characters
_REQUEST_LINE = re.compile(rf"({_TCHARS}) +([!-~]+)(?: +HTTP/[0-9](?:\.[0-9])?)?")
_FIELD = re.compile(rf"({_TCHARS}):[ \t]*(.*?)[ \t]*")


async def resource(request: Request) -> Response:
    coll = collection(request)
    return await _answer(request, coll, query_params(request), "url")


async def resource_post(request: Request) -> Response:
    coll = collection(request)
    params = query_params(request)
    if "type" in params:
        raise bad_parameter("type", "the posted request's method chooses the record type")
    head = await read_body(request, MAX_BODY, too_large=_TOO_LARGE)
    method, target, fields = parse_request_head(head)
    if method not in ("GET", "HEAD"):
        return not_found(f"{method} requests", "the store keeps GET and HEAD responses only")
    params["type"] = [method.lower()]
    url_from = "url"
    if not (params.get("url") or [""])[-1].strip():  # as parse_cdx_query reads it: absent
        params["url"], url_from = [_url_of(target, fields.get("host"))], "body"
    return await _answer(request, coll, params, url_from)


def parse_request_head(body: bytes) -> tuple[str, str, dict[str, str]]:
    """The method (upper case), target and header fields (names lower-cased) of
    an HTTP/1.x request head; lines may end in CRLF or LF, and what follows the
    blank line is not looked at. Anything else is a 400 naming ``body``."""
    head = body.decode("latin-1").replace("\r\n", "\n").split("\n\n", 1)[0].rstrip("\n")
    if not head.strip():
        raise bad_parameter("body", "empty: post the HTTP request to look up (request line and headers)")
    first, *lines = head.split("\n")
    line = _REQUEST_LINE.fullmatch(first)
    if line is None:
        raise bad_parameter("body", f"not an HTTP request line: {first[:80]!r}")
    fields: dict[str, str] = {}
    for text in lines:
        field = _FIELD.fullmatch(text)
        if field is None:
            raise bad_parameter("body", f"not an HTTP header field: {text[:80]!r}")
        fields[field[1].lower()] = field[2]
    return line[1].upper(), line[2], fields


def _url_of(target: str, host: str | None) -> str:
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", target):
        return target
    if not target.startswith("/"):
        raise bad_parameter("body", f"request target {target[:80]!r} is neither a URL nor a path")
    if not host:
        raise bad_parameter("body", "no url parameter, and no Host header to make the URL of the path")
    # The scheme does not count in matching (SURT), so http:// finds https captures too.
    return f"http://{host}{target}"


async def _answer(
    request: Request, coll: Collection, params: dict[str, list[str]], url_from: str
) -> Response:
    try:
        query = parse_cdx_query(params)
    except InvalidRecordError as exc:
        # A URL made of the posted request is the body's fault, not a parameter's.
        raise bad_parameter(url_from if exc.field == "url" else exc.field, exc.problem) from None
    loaded = await coll.load(query)
    if loaded is None:
        return not_found(f"{query.type.value.upper()} {query.url}")
    record = loaded.record
    if record is None:
        # A small record is built here: a thread's hand-off cost more than building it.
        small = len(loaded.response.data or b"") <= _BUILT_INLINE
        record = _record(loaded) if small else await asyncio.to_thread(_record, loaded)
    fields, moment = loaded.capture
    base = memento_base(request, coll.name, fields) if query.type is RecordType.GET else None
    headers = dict([("archive-source-coll", fields["source"]), *memento_headers(fields, moment, base)])
    return Response(record, media_type="application/warc-record", headers=headers)


def _record(loaded: Loaded) -> bytes:
    ident = record_id(loaded.ident, "response")
    return response_record(loaded.response, warc_record_id=ident, sha1=loaded.sha1).record
