"""Resource loaders: a capture's record fetched from where its index row
points. A WARC row (``filename``, ``offset``, ``length``) is read from the
first place that has the file: a prefix the name is appended to (a folder or
an http(s) URL, read with a byte range) or an index from name to place (a
text file of ``name place`` lines, local or over http(s), or a Redis hash).
(A ``live_url`` row is fetched by the collection itself.)

Over HTTP everything is read through the collection's client, which passes
the address policy, and is bounded: a record is at most
:data:`MAX_RECORD_BYTES`. A WARC name never leaves its prefix (no ``/``, and
percent-encoded in a URL); a place named by an index served over HTTP must be
an http(s) URL, never a local path: only the operator's own indexes (a file,
a Redis hash) may name local files, and only regular ones are read.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from web_index._extras import import_extra
from web_index.archive._bounded import get_bounded
from web_index.archive._cdx import Capture
from web_index.archive._collection_config import LoaderSpec
from web_index.archive._http import parse_http_response, restore_headers, store_body
from web_index.errors import WebIndexError
from web_index.fetch import join_headers
from web_index.models import Response

__all__ = ["LoadError", "WarcLoader", "record_response"]

MAX_RECORD_BYTES = 64 << 20


class LoadError(WebIndexError):
    """A capture could not be loaded from here (the next place is tried)."""


class WarcLoader:
    """One ``warc-prefix`` or ``warc-index`` place."""

    def __init__(self, spec: LoaderSpec, client: httpx.AsyncClient) -> None:
        self.spec, self.client = spec, client
        self._index: Mapping[str, str] | None = None
        self._redis: Any = None
        self._lock = asyncio.Lock()  # one index read, one Redis client, however many loads at once

    async def load(self, capture: Capture) -> bytes | None:
        """The record of a WARC row, or ``None`` when this place lacks its file."""
        fields = capture[0]
        name = fields.get("filename", "")
        try:
            offset, length = int(fields["offset"]), int(fields["length"])
        except (KeyError, ValueError):
            raise LoadError(
                f"{fields.get('source')}: a WARC row needs whole numbers offset and length"
            ) from None
        if not name or "/" in name or "\\" in name or name in (".", ".."):
            raise LoadError(f"{name!r} is not a WARC file name")  # never a path out of the prefix
        if not 0 < length <= MAX_RECORD_BYTES or offset < 0:
            raise LoadError(f"offset {offset}, length {length}: out of range")
        place = await self._place(name)
        if place is None:
            return None
        raw = await self._read(place, offset, length)
        return None if raw is None else await asyncio.to_thread(_whole_record, raw, place, offset)

    async def _place(self, name: str) -> str | None:
        location = self.spec.location
        scheme = urlsplit(location).scheme
        if self.spec.kind == "warc-prefix":
            return location + (quote(name, safe="") if scheme in ("http", "https") else name)
        if scheme == "redis":
            place = await self._redis_place(name)
        else:
            async with self._lock:
                if self._index is None:
                    self._index = await self._read_index()
            place = self._index.get(name)
        if (
            place is not None
            and scheme in ("http", "https")
            and urlsplit(place).scheme not in ("http", "https")
        ):
            raise LoadError(
                f"{location}: {name} is at {place!r}: an index over HTTP may name http(s) URLs only"
            )
        return place

    async def _read_index(self) -> dict[str, str]:
        location = self.spec.location
        if urlsplit(location).scheme in ("http", "https"):
            answer, body = await get_bounded(self.client, location)
            answer.raise_for_status()
            text = body.decode("utf-8", "replace")
        else:
            text = await asyncio.to_thread(Path(location).read_text, encoding="utf-8")
        out: dict[str, str] = {}
        for line in text.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and not line.startswith("#"):
                out.setdefault(parts[0], parts[1].strip())
        return out

    async def _redis_place(self, name: str) -> str | None:
        # redis://[user:password@]host:port/db/KEY: the hash is the last segment.
        server, _, key = self.spec.location.split("?", 1)[0].rpartition("/")
        async with self._lock:
            if self._redis is None:
                redis = import_extra("redis.asyncio", "redis")
                self._redis = redis.Redis.from_url(server, socket_timeout=10, socket_connect_timeout=10)
        value = await self._redis.hget(key, name)
        return None if value is None else bytes(value).decode()

    async def _read(self, place: str, offset: int, length: int) -> bytes | None:
        if urlsplit(place).scheme in ("http", "https"):
            # identity: a compressed answer would not be the file's bytes at these offsets
            headers = {"range": f"bytes={offset}-{offset + length - 1}", "accept-encoding": "identity"}
            answer, body = await get_bounded(
                self.client, place, cap=offset + length, headers=headers, stop_at_cap=True
            )
            if answer.status_code == 404:
                return None
            answer.raise_for_status()
            return body[offset : offset + length] if answer.status_code == 200 else body[:length]
        path = Path(place.removeprefix("file://"))

        def read() -> bytes | None:
            if not path.is_file():  # missing, or not a regular file (a FIFO would hang the thread)
                return None
            try:
                with path.open("rb") as fh:
                    fh.seek(offset)
                    return fh.read(length)
            except FileNotFoundError:
                return None

        return await asyncio.to_thread(read)

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()


def _whole_record(raw: bytes, place: str, offset: int) -> bytes:
    if raw[:2] == b"\x1f\x8b":  # one gzip member a record, as WARC files index them
        unpacker = zlib.decompressobj(31)
        try:
            raw = unpacker.decompress(raw, MAX_RECORD_BYTES + 1)
        except zlib.error as exc:
            raise LoadError(f"{place}@{offset}: not a gzip member: {exc}") from None
    if not raw.startswith(b"WARC/"):
        raise LoadError(f"{place}@{offset}: not a WARC record (ARC records are not converted)")
    head, sep, _ = raw.partition(b"\r\n\r\n")
    fields = _warc_fields(head)
    if not sep or fields.get("warc-type") not in ("response", "resource"):
        raise LoadError(f"{place}@{offset}: a {fields.get('warc-type', 'broken')} record, not a response")
    try:
        end = len(head) + 4 + int(fields.get("content-length", ""))
    except ValueError:
        raise LoadError(f"{place}@{offset}: no Content-Length") from None
    if len(raw) < end:
        raise LoadError(f"{place}@{offset}: the record is cut short")
    return raw[:end] + b"\r\n\r\n"


def _warc_fields(head: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in head.decode("utf-8", "replace").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        out[name.strip().lower()] = value.strip()
    return out


def record_response(record: bytes, capture: Capture) -> Response:
    """The response a WARC ``response`` (or ``resource``) record holds, with
    its body decoded as the store keeps bodies."""
    fields, moment = capture
    head, _, rest = record.partition(b"\r\n\r\n")
    warc = _warc_fields(head)
    block = rest[: int(warc.get("content-length", len(rest)))]
    if warc.get("warc-type") == "resource":
        status, wire, body = (
            200,
            [("Content-Type", warc.get("content-type", "application/octet-stream"))],
            block,
        )
    else:
        status, wire, body = parse_http_response(block)
        body, _ = store_body(wire, body, MAX_RECORD_BYTES)
    headers = join_headers(restore_headers(wire))
    return Response(
        url=fields["url"],
        request_url=fields["url"],
        status_code=status,
        headers=headers,
        timestamp=moment,
        data=body,
        is_final=not 300 <= status < 400,
        fetcher_name=fields.get("source", "warc"),
        fetcher_version="-",
        fetcher_calibre=10,
    )
