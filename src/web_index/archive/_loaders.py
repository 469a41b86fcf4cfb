"""Resource loaders: a capture's record fetched from where its index row
points. A WARC row (``filename``, ``offset``, ``length``) is read from the
first place that has the file: a prefix the name is appended to (a folder or
an http(s) URL, read with a byte range) or an index from name to place (a
text file of ``name place`` lines, local or over http(s), or a Redis hash).
A ``live_url`` row is fetched (:class:`ReplayLoader`): a remote archive's raw
memento, or the live web itself.

Everything is read through the collection's client, which passes the address
policy, and is bounded: a record is at most ``max_record_bytes``.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import httpx

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
        self._redis: object | None = None

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
        return None if raw is None else _whole_record(raw, place, offset)

    async def _place(self, name: str) -> str | None:
        if self.spec.kind == "warc-prefix":
            return self.spec.location + name
        if urlsplit(self.spec.location).scheme == "redis":
            return await self._redis_place(name)
        if self._index is None:
            self._index = await self._read_index()
        return self._index.get(name)

    async def _read_index(self) -> dict[str, str]:
        location = self.spec.location
        if urlsplit(location).scheme in ("http", "https"):
            answer = await self.client.get(location)
            answer.raise_for_status()
            text = answer.text
        else:
            text = await asyncio.to_thread(Path(location).read_text, encoding="utf-8")
        out: dict[str, str] = {}
        for line in text.splitlines():
            parts = line.split(None, 1)
            if len(parts) == 2 and not line.startswith("#"):
                out.setdefault(parts[0], parts[1].strip())
        return out

    async def _redis_place(self, name: str) -> str | None:
        import redis.asyncio

        parts = urlsplit(self.spec.location)
        db, _, key = parts.path.lstrip("/").partition("/")
        if not key:
            db, key = "0", db
        if self._redis is None:
            self._redis = redis.asyncio.Redis(
                host=parts.hostname or "127.0.0.1",
                port=parts.port or 6379,
                db=int(db or 0),
                socket_timeout=10,
            )
        value = await self._redis.hget(key, name)  # type: ignore[attr-defined]
        return None if value is None else bytes(value).decode()

    async def _read(self, place: str, offset: int, length: int) -> bytes | None:
        if urlsplit(place).scheme in ("http", "https"):
            headers = {"range": f"bytes={offset}-{offset + length - 1}"}
            answer = await self.client.get(place, headers=headers)
            if answer.status_code == 404:
                return None
            answer.raise_for_status()
            body = answer.content
            return body[offset : offset + length] if answer.status_code == 200 else body[:length]
        path = Path(place.removeprefix("file://"))

        def read() -> bytes | None:
            try:
                with path.open("rb") as fh:
                    fh.seek(offset)
                    return fh.read(length)
            except FileNotFoundError:
                return None

        return await asyncio.to_thread(read)

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()  # type: ignore[attr-defined]


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
