"""``GET /{coll}/wacz?url=&matchType=``: the store's captures a CDX query selects, as one
WACZ package streamed while it is written, so that a collection opens in
ReplayWeb.page (or goes to someone) straight from ``web-index serve``.

The package is :func:`web_index.archive.export_wacz`'s, written by a thread into a
bounded queue that the response drains: memory stays a few chunks whatever the
package's size, and a client that goes away stops the export. Only the store's
own collection can be packaged (the others are read from elsewhere), and at most
the server's ``max_records`` captures: a larger selection is a 413 that says how
many it matched, before anything is written.
"""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import cast

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from web_index.archive import CdxQuery, export_wacz, find_captures, parse_cdx_query
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.server._cdx import collection, not_found, query_params
from web_index.server._errors import ApiError, bad_parameter

__all__ = ["DEFAULT_MAX_RECORDS", "wacz"]

DEFAULT_MAX_RECORDS = 10_000
_CHUNKS = 16  # queued between the export's thread and the response: 16 chunks of ~64 KiB at most
_CHUNK = 1 << 16


async def wacz(request: Request) -> Response:
    coll = collection(request)
    if coll.name != request.app.state.store_collection:
        raise ApiError(404, f"only the store's collection ({request.app.state.store_collection}) is packaged")
    try:
        query = parse_cdx_query(query_params(request))
    except InvalidRecordError as exc:
        raise bad_parameter(exc.field, exc.problem) from None
    index: WebIndex = request.app.state.index
    most: int = request.app.state.max_records
    counted = replace(query, limit=most + 1)
    found = len(await asyncio.to_thread(find_captures, index, counted, source=coll.name))
    if found > most:
        what = f"{query.url} ({query.match_type})"
        raise ApiError(413, f"{what} has more than {most} captures: this server packages at most {most}")
    if not found:
        return not_found(f"{query.url} ({query.match_type})")
    name = _file_name(query)
    return StreamingResponse(
        _stream(index, query),
        media_type="application/wacz",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


def _file_name(query: CdxQuery) -> str:
    # ASCII only: a header value is Latin-1, and an IRI's letters are not
    stem = "".join(
        c if (c.isascii() and c.isalnum()) or c in ".-" else "-" for c in query.url.split("://")[-1]
    )[:80]
    return f"{stem.strip('-.') or 'capture'}.wacz"


class _Pipe(io.RawIOBase):
    """The raw file under the export's buffered writer: each chunk it is given goes into a
    bounded queue that the response drains (not seekable: the ZIP is written with data
    descriptors, as to any stream)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.queue: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue(_CHUNKS)
        self.gone = threading.Event()  # the client went away: the export stops at its next write

    def writable(self) -> bool:
        return True

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        if self.gone.is_set():
            raise ConnectionAbortedError("the client closed the connection")
        self.put(bytes(data))
        return len(data)

    def put(self, item: bytes | BaseException | None) -> None:
        while not self.gone.is_set():
            future = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
            try:
                future.result(timeout=1.0)
                return
            except TimeoutError:
                future.cancel()  # the queue is full: look again whether the client is still there


async def _stream(index: WebIndex, query: CdxQuery) -> AsyncIterator[bytes]:
    pipe = _Pipe(asyncio.get_running_loop())

    def export() -> None:
        outcome: BaseException | None = None
        try:
            with io.BufferedWriter(cast(io.RawIOBase, pipe), _CHUNK) as out:
                export_wacz(index, out, matching=query)
        except BaseException as exc:  # handed to the response, which ends the body short
            outcome = exc
        pipe.put(outcome)

    worker = threading.Thread(target=export, name="wacz-export", daemon=True)
    worker.start()
    try:
        while True:
            item = await pipe.queue.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                # Headers are sent: a body cut short is how a stream says it failed.
                raise item
            yield item
    finally:
        pipe.gone.set()
