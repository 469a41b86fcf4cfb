"""The bodies of the JSON API: read under a byte cap, then split into their items,
a JSON array or NDJSON (one JSON value a line), at most so many."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import ClientDisconnect, Request

from web_index.server._errors import ApiError, bad_parameter

__all__ = ["json_items", "read_body"]

# Media types read as NDJSON (with or without "x-"); application/json and +json
# are an array; anything else (curl's form type, none) is decided by a leading "[".
_LINES = frozenset({"ndjson", "jsonl", "jsonlines", "json-lines"})


async def read_body(request: Request, max_body: int, *, too_large: str | None = None) -> bytes:
    """The request's body, or a 413 as soon as it is over ``max_body`` bytes: by its
    ``Content-Length`` before a byte is read, else while it streams in. The 413
    says ``too_large`` (by default, that ``max_body`` was passed: send less)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body:
        raise _too_large(max_body, too_large)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body:
                raise _too_large(max_body, too_large)
            chunks.append(chunk)
    except ClientDisconnect:  # an answer no one will read, rather than a traceback in the log
        raise ApiError(400, f"body: the client left after {size:,} bytes", "body") from None
    return b"".join(chunks)


def _too_large(max_body: int, problem: str | None) -> ApiError:
    # The rest of the body stays unread: the connection is closed after the
    # answer rather than drained, which a client still sending would keep going.
    problem = problem or f"more than max_body ({max_body:,} bytes): send smaller batches"
    return ApiError(413, f"body: {problem}", "body", {"connection": "close"})


def _is_lines(content_type: str, body: bytes) -> bool:
    media = content_type.partition(";")[0].strip().lower()
    subtype = media.partition("/")[2].removeprefix("x-")
    if subtype in _LINES:
        return True
    if subtype == "json" or subtype.endswith("+json"):
        return False
    return not body.lstrip().startswith(b"[")


def json_items(body: bytes, content_type: str, name: str, max_batch: int) -> list[Any]:
    """The JSON values of ``body``: an array's elements, or one a line (blank lines
    skipped). Malformed JSON is a 400 naming the body (and the line); more than
    ``max_batch`` values a 413 naming ``name``."""
    if _is_lines(content_type, body):
        items: list[Any] = []
        for number, line in enumerate(body.split(b"\n"), start=1):
            if not line.strip():
                continue
            if len(items) == max_batch:
                raise _too_many(name, max_batch)
            items.append(_decode(line, f"line {number}: "))
        return items
    decoded = _decode(body, "")
    if not isinstance(decoded, list):
        raise bad_parameter("body", f"expected a JSON array of {name} (or NDJSON: one a line)")
    if len(decoded) > max_batch:
        raise _too_many(name, max_batch)
    return decoded


def _decode(data: bytes, where: str) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise bad_parameter("body", f"{where}not valid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise bad_parameter("body", f"{where}not valid UTF-8: {_utf8_problem(data, exc)}") from None
    except RecursionError:
        raise bad_parameter("body", f"{where}not valid JSON: nested too deeply") from None


def _utf8_problem(data: bytes, exc: UnicodeDecodeError) -> str:
    # msgspec counts from the start of the string it was reading; decoding the
    # whole again finds the byte's place in the line (or body).
    try:
        data.decode()
    except UnicodeDecodeError as again:
        return f"{again.reason} at byte {again.start}"
    return exc.reason


def _too_many(name: str, max_batch: int) -> ApiError:
    return ApiError(413, f"{name}: more than max_batch ({max_batch:,}) in one request: split the batch", name)
