"""The JSON query API: ``POST /api/query`` and ``/api/presence`` answer a batch of
the standard's query objects, one NDJSON line per query in input order, the lines
``web-index query`` and ``presence`` print; ``POST /api/insert``, only with a
write token, stores a batch of insertion requests, all or none.

A batch is checked whole before anything is answered: a bad query is a 400
naming ``queries[N].field``, never half an answer. It is then answered a chunk
at a time, each chunk's lines sent before the next is asked, so the first lines
of a large batch arrive long before the last.
"""

from __future__ import annotations

import asyncio
import hmac
import re
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from web_index.errors import InvalidRecordError
from web_index.index import InsertItem, WebIndex
from web_index.models import Page, Query, query_from_dict, result_json
from web_index.server._body import json_items, read_body
from web_index.server._errors import ApiError, bad_parameter

__all__ = ["DEFAULT_MAX_BATCH", "DEFAULT_MAX_BODY", "authorize", "insert", "presence", "query"]

DEFAULT_MAX_BATCH = 100_000
DEFAULT_MAX_BODY = 64 * 1024 * 1024
# Chunks start at CHUNK queries and double up to LARGEST: each costs a look at
# every partition it touches (1,000 queries over 50 domains, ~50 ms), so 100,000
# queries asked 1,000 at a time took seven times as long as in one call. A chunk's
# pages are in memory with their bodies until sent: the next chunk holds as many
# queries as the last one's bodies say fit in BODY_BUDGET bytes, SMALLEST at least.
CHUNK = 1000
LARGEST = 16_000
SMALLEST = 100
BODY_BUDGET = 32 * 1024 * 1024
_NDJSON = "application/x-ndjson"
_encode = msgspec.json.Encoder().encode

# A chunk's lines, and the bytes of the bodies read to answer it.
_Lines = Callable[[WebIndex, Sequence[Query]], tuple[bytes, int]]


async def query(request: Request) -> Response:
    bodies = _flag(request, "bodies")
    return await _answer(request, lambda index, chunk: _query_lines(index, chunk, bodies))


async def presence(request: Request) -> Response:
    return await _answer(request, _presence_lines)


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "false")
    if raw.lower() not in ("true", "false", "1", "0"):
        raise bad_parameter(name, f"{raw!r} is not true or false")
    return raw.lower() in ("true", "1")


def _query_lines(index: WebIndex, chunk: Sequence[Query], bodies: bool) -> tuple[bytes, int]:
    results = index.query(chunk)
    weight = sum(len(r.data or b"") for page in results if isinstance(page, Page) for r in page.responses)
    lines = b"".join(
        _encode({"query": q.to_dict(), "result": result_json(r, bodies=bodies)}) + b"\n"
        for q, r in zip(chunk, results, strict=True)
    )
    return lines, weight


def _presence_lines(index: WebIndex, chunk: Sequence[Query]) -> tuple[bytes, int]:
    present = index.presence(chunk)
    lines = b"".join(
        _encode({"query": q.to_dict(), "present": p}) + b"\n" for q, p in zip(chunk, present, strict=True)
    )
    return lines, 0


async def _answer(request: Request, lines: _Lines) -> Response:
    items = await _items(request, "queries")
    queries = await asyncio.to_thread(_queries, items)
    index: WebIndex = request.app.state.index
    # The first chunk is answered before the answer starts, so that a store
    # that cannot be read is a 500 of its own, not a stream cut short.
    first, weight = await asyncio.to_thread(lines, index, queries[:CHUNK]) if queries else (b"", 0)

    async def stream() -> AsyncIterator[bytes]:
        yield first
        done = size = min(CHUNK, len(queries))
        heavy = weight
        while done < len(queries):
            size = _next_size(size, heavy)
            chunk = queries[done : done + size]
            answered, heavy = await asyncio.to_thread(lines, index, chunk)
            yield answered
            done += len(chunk)

    return StreamingResponse(stream(), media_type=_NDJSON)


def _next_size(size: int, weight: int) -> int:
    """The chunk after one of ``size`` queries whose bodies were ``weight`` bytes."""
    grown = min(2 * size, LARGEST)
    if weight:
        grown = min(grown, max(SMALLEST, size * BODY_BUDGET // weight))
    return grown


async def _items(request: Request, name: str) -> list[Any]:
    state = request.app.state
    body = await read_body(request, state.max_body)
    content_type = request.headers.get("content-type", "")
    return await asyncio.to_thread(json_items, body, content_type, name, state.max_batch)


def _queries(items: list[Any]) -> list[Query]:
    out: list[Query] = []
    for n, item in enumerate(items):
        try:
            out.append(query_from_dict(item))
        except InvalidRecordError as exc:
            # "query" is the object itself (not an object, an unknown field).
            field = f"queries[{n}]" if exc.field == "query" else f"queries[{n}].{exc.field}"
            raise bad_parameter(field, exc.problem) from None
    return out


async def insert(request: Request) -> Response:
    authorize(request)
    items = await _items(request, "attempts")
    attempts = [_attempt(n, item) for n, item in enumerate(items)]
    index: WebIndex = request.app.state.index
    try:
        keys = await asyncio.to_thread(index.insert_many, attempts)
    except InvalidRecordError as exc:
        raise bad_parameter(_attempt_field(exc.field), exc.problem) from None
    return JSONResponse({"keys": [k.to_dict() for k in keys]})


def authorize(request: Request) -> None:
    """A 401 unless the request carries the write token as ``Authorization: Bearer``."""
    token: bytes = request.app.state.write_token
    given = request.headers.get("authorization")
    if given is None:
        raise ApiError(401, "Authorization: a Bearer token is required", "Authorization", _CHALLENGE)
    scheme, _, credentials = given.strip().partition(" ")
    # Headers arrive decoded as Latin-1: encoding them back gives the bytes sent.
    if scheme.lower() != "bearer" or not hmac.compare_digest(credentials.strip().encode("latin-1"), token):
        raise ApiError(401, "Authorization: not the write token", "Authorization", _INVALID)


_CHALLENGE = {"www-authenticate": 'Bearer realm="web-index"'}
_INVALID = {"www-authenticate": 'Bearer realm="web-index", error="invalid_token"'}
_REQUIRED = ("type", "url", "timestamp", "metadata")


def _attempt(n: int, item: Any) -> InsertItem:
    """An insertion request as ``insert_many`` takes it (which checks the rest);
    unknown fields are ignored, as ``web-index insert`` ignores them."""
    if not isinstance(item, dict):
        raise bad_parameter(f"attempts[{n}]", f"expected an object, got {type(item).__name__}")
    for name in _REQUIRED:
        if name not in item:
            raise bad_parameter(f"attempts[{n}].{name}", "required field missing")
    return (item["type"], item["url"], item["timestamp"], item["metadata"], item.get("data", []))


# insert_many names a field of any item but the first "item N: field".
_ITEM = re.compile(r"item (\d+): (.*)", re.S)


def _attempt_field(field: str) -> str:
    m = _ITEM.fullmatch(field)
    return f"attempts[{m[1]}].{m[2]}" if m else f"attempts[0].{field}"
