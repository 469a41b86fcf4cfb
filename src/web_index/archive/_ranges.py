"""Byte ranges of an archived body (RFC 9110, section 14), served as a web server
serves a file's: a media player seeks in a replayed video or audio by asking for
the part it wants, and a download resumes where it stopped.

A range applies to a capture whose status was 200, whose body is the whole of
what was archived. One range, of bytes, is served as a 206 with its
``Content-Range``; one that starts past the end is a 416; anything else a server
may ignore (several ranges, another unit, a field that does not parse, an
``If-Range`` naming another version) gets the whole body, as archived.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import NamedTuple

__all__ = ["Ranged", "ranged"]

_SPEC = re.compile(r"bytes[ \t]*=[ \t]*(\d*)[ \t]*-[ \t]*(\d*)[ \t]*", re.IGNORECASE)


class Ranged(NamedTuple):
    """What to serve of a body asked with ``Range``: the status (``None``: the archived
    one, the whole body), the bytes and the fields to add (``Content-Range``,
    ``Accept-Ranges``)."""

    status: int | None
    body: bytes
    headers: list[tuple[str, str]]


_ACCEPT = ("accept-ranges", "bytes")


def ranged(body: bytes, status: int, asked: Mapping[str, str], archived: Mapping[str, str]) -> Ranged:
    """The part of ``body`` (a capture's, its status ``status``) that the request's
    fields ``asked`` (lower-case names) select, given the capture's own fields
    ``archived`` (any case: its ``ETag`` and ``Last-Modified`` are what an
    ``If-Range`` is compared with)."""
    if status != 200:
        return Ranged(None, body, [])  # a redirect, an error, a 206 archived: as they were
    value = asked.get("range")
    if value is None or not _unchanged(asked.get("if-range"), archived):
        return Ranged(None, body, [_ACCEPT])
    spec = _SPEC.fullmatch(value.strip())
    if spec is None:
        return Ranged(None, body, [_ACCEPT])  # several ranges, another unit, not a range: ignored
    first, last, size = spec.group(1), spec.group(2), len(body)
    if not first and not last:
        return Ranged(None, body, [_ACCEPT])
    if first:
        start = int(first)
        end = min(int(last), size - 1) if last else size - 1
        if last and int(last) < start:
            return Ranged(None, body, [_ACCEPT])  # invalid: a server ignores it
    else:  # the last N bytes
        start, end = max(size - int(last), 0), size - 1
        if int(last) == 0:
            start = size  # no byte: not satisfiable
    if start >= size:
        return Ranged(416, b"", [("content-range", f"bytes */{size}"), _ACCEPT])
    return Ranged(206, body[start : end + 1], [("content-range", f"bytes {start}-{end}/{size}"), _ACCEPT])


def _unchanged(if_range: str | None, archived: Mapping[str, str]) -> bool:
    """Whether an ``If-Range`` (if any) names this capture: its ETag, compared strongly (a
    weak one never matches), or its Last-Modified date exactly."""
    if if_range is None:
        return True
    fields = {name.lower(): value for name, value in archived.items()}  # only when asked
    wanted = if_range.strip()
    if wanted.startswith(('"', "W/")):
        etag = fields.get("etag", "").strip()
        return not wanted.startswith("W/") and not etag.startswith("W/") and wanted == etag
    modified = fields.get("last-modified")
    if modified is None:
        return False
    try:
        return parsedate_to_datetime(wanted) == parsedate_to_datetime(modified)
    except (TypeError, ValueError, IndexError, OverflowError):
        return False
