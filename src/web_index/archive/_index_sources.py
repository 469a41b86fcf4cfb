"""Index sources: where a collection looks captures up. :class:`IndexSource`
is the one contract; a web-index store, a folder of CDXJ indexes, the live
web, a remote CDX server and a remote Memento archive each plug in behind it,
and ``_collection.load_index`` builds the one a ``SourceSpec`` declares.

A source answers a :class:`CdxQuery` with its captures, in the query's order
and up to its limit, each tagged with ``source`` (its name) and
``source_type``; a capture it can load is marked as pywb's spec marks it:
``live_url`` (load it from there), ``filename``/``offset``/``length`` (a WARC
record that a resource loader finds) or, for a store, nothing (the store
holds the response: :meth:`IndexSource.memento`).
"""

from __future__ import annotations

import asyncio
import json
import mmap
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

from web_index.archive._cdx import (
    Capture,
    Memento,
    capture_moment,
    closest_capture,
    find_captures,
    key_range,
    ordered,
    wanted_fields,
)
from web_index.archive._cdx_query import CdxQuery
from web_index.index import WebIndex

__all__ = ["CdxjIndex", "IndexSource", "LiveIndex", "StoreIndex"]

_T = TypeVar("_T")


class IndexSource(ABC):
    """One place captures are looked up (pywb's index source)."""

    source_type = ""

    def __init__(self, name: str) -> None:
        self.name = name

    @abstractmethod
    async def find(self, query: CdxQuery) -> list[Capture]:
        """The captures ``query`` asks for, in its order, up to its limit.
        Raises when the source cannot answer (unreachable, malformed)."""

    async def memento(self, capture: Capture, query: CdxQuery) -> Memento | None:
        """The stored response ``capture`` (found by ``query``) stands for, when
        this source holds responses itself."""
        return None

    def answers_inline(self, query: CdxQuery) -> bool:
        """Whether :meth:`find` answers ``query`` on the event loop, awaiting nothing."""
        return False

    async def aclose(self) -> None:  # noqa: B027 (most sources hold nothing open)
        """Release what the source holds open."""

    def _tag(self, fields: dict[str, str]) -> dict[str, str]:
        fields["source"], fields["source_type"] = self.name, self.source_type
        return fields


class StoreIndex(IndexSource):
    """A web-index store: every response it holds is a capture (see ``_cdx``)."""

    source_type = "web-index"

    def __init__(self, name: str, index: WebIndex, *, owned: bool = False) -> None:
        super().__init__(name)
        self.index = index
        self._owned = owned

    async def find(self, query: CdxQuery) -> list[Capture]:
        return await self._read(query, find_captures, self.index, query, source=self.name)

    async def memento(self, capture: Capture, query: CdxQuery) -> Memento | None:
        fields, moment = capture
        exact = CdxQuery(url=fields["url"], closest=moment, type=query.type)
        return await self._read(exact, closest_capture, self.index, exact, source=self.name)

    async def closest(self, query: CdxQuery) -> Memento | None:
        """The capture ``query`` asks for closest to its ``closest``, in one pass."""
        return await self._read(query, closest_capture, self.index, query, source=self.name)

    async def _read(self, query: CdxQuery, read: Callable[..., _T], *args: object, **kwargs: object) -> _T:
        # One URL's captures in a local store are read in about half a millisecond, much of it
        # CPU, which holds the GIL in a thread too: on the event loop, a CDX lookup costs 0.26 ms
        # less CPU (measured). Wider queries, and any store read over the network, take a thread.
        if self.answers_inline(query):
            return read(*args, **kwargs)
        return await asyncio.to_thread(read, *args, **kwargs)

    def answers_inline(self, query: CdxQuery) -> bool:
        return query.match_type == "exact" and not self.index.remote

    async def aclose(self) -> None:
        if self._owned:
            self.index.close()


class CdxjIndex(IndexSource):
    """A ``.cdxj`` file, or a folder of them, sorted as pywb sorts them
    (bytewise): each is searched by bisection, as pywb does, never read whole."""

    source_type = "file"

    def __init__(self, name: str, path: Path) -> None:
        super().__init__(name)
        self.folder = path if path.is_dir() else path.parent
        self.files = sorted(path.glob("*.cdxj")) if path.is_dir() else [path]

    async def find(self, query: CdxQuery) -> list[Capture]:
        return await asyncio.to_thread(self._find, query)

    def _find(self, query: CdxQuery) -> list[Capture]:
        start, wanted = key_range(query)
        found: list[Capture] = []
        for path in self.files:
            for line in _lines_from(path, start.encode("utf-8", "surrogateescape")):
                key, _, rest = line.partition(b" ")
                if not key.startswith(start.encode("utf-8", "surrogateescape")):
                    break
                urlkey = key.decode("utf-8", "surrogateescape")
                if not wanted(urlkey):
                    continue
                timestamp, _, blob = rest.partition(b" ")
                try:
                    extra = json.loads(blob)
                    fields = {k: str(v) for k, v in extra.items()} if isinstance(extra, dict) else {}
                    fields.update(urlkey=urlkey, timestamp=timestamp.decode("ascii"))
                    moment = capture_moment(fields["timestamp"])
                except (ValueError, UnicodeDecodeError) as exc:
                    raise ValueError(f"{path}: a line that is not CDXJ: {line[:200]!r}") from exc
                fields.setdefault("url", "")
                for name in ("mime", "status", "digest"):
                    fields.setdefault(name, "-")
                if wanted_fields(query, self._tag(fields)):
                    found.append((fields, moment))
        return ordered(found, query)


def _lines_from(path: Path, key: bytes) -> Iterator[bytes]:
    """The lines of a sorted file from the first that is not below ``key``."""
    with path.open("rb") as fh:
        if fh.seek(0, 2) == 0:
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            lo, hi = 0, len(mm)
            while lo < hi:  # lo and hi are line starts; lines before lo are below key
                mid = (lo + hi) // 2
                start = mm.rfind(b"\n", 0, mid) + 1
                end = mm.find(b"\n", start)
                end = len(mm) if end < 0 else end
                if mm[start:end] < key:
                    lo = end + 1
                else:
                    hi = start
            pos = lo
            while pos < len(mm):
                end = mm.find(b"\n", pos)
                end = len(mm) if end < 0 else end
                yield mm[pos:end].rstrip(b"\r")
                pos = end + 1


class LiveIndex(IndexSource):
    """The live web: any URL is "captured" now, to be loaded from itself."""

    source_type = "live"

    async def find(self, query: CdxQuery) -> list[Capture]:
        if query.match_type != "exact":
            return []
        now = datetime.now(UTC).replace(microsecond=0)
        key, _ = key_range(query)
        fields = {
            "urlkey": key,
            "timestamp": now.strftime("%Y%m%d%H%M%S"),
            "url": query.url,
            "mime": "-",
            "status": "-",
            "digest": "-",
            "live_url": query.url,
        }
        return [(fields, now)] if wanted_fields(query, self._tag(fields)) else []
