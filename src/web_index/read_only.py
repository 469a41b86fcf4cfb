"""Query a store without the means to change it, as the seed README shows::

    from web_index.read_only import query
    from web_index.models import SimplePageQuery

    results = query([SimplePageQuery(url="http://example.com")])

With no ``store``, the store is the ``WEB_INDEX_STORE`` environment variable,
else :func:`default_store` (``$XDG_DATA_HOME/web-index/store``, by default
``~/.local/share/web-index/store``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

from web_index.index import WebIndex
from web_index.models import Query
from web_index.query import Result

__all__ = ["async_presence", "async_query", "default_store", "presence", "query"]


def default_store() -> str:
    """The store used when none is given: ``WEB_INDEX_STORE``, else the per-user folder."""
    env = os.environ.get("WEB_INDEX_STORE")
    if env:
        return env
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "web-index" / "store")


@functools.lru_cache(maxsize=16)
def _open(location: str) -> WebIndex:
    # One read-only handle per store per process: handles are thread-safe, and
    # reopening the buffer connection per call would cost more than the query.
    return WebIndex(location, read_only=True)


def _index(store: str | os.PathLike[str] | None) -> WebIndex:
    return _open(os.fspath(store) if store is not None else default_store())


def query(queries: Sequence[Query], store: str | os.PathLike[str] | None = None) -> list[Result]:
    """Answer queries in input order (``Page``, ``AttemptMetadata`` or ``None`` each)."""
    return _index(store).query(queries)


def presence(queries: Sequence[Query], store: str | os.PathLike[str] | None = None) -> list[bool]:
    """Whether each query matches anything, without reading bodies."""
    return _index(store).presence(queries)


async def async_query(queries: Sequence[Query], store: str | os.PathLike[str] | None = None) -> list[Result]:
    """:func:`query` without blocking the event loop."""
    return await _index(store).async_query(queries)


async def async_presence(queries: Sequence[Query], store: str | os.PathLike[str] | None = None) -> list[bool]:
    """:func:`presence` without blocking the event loop."""
    return await _index(store).async_presence(queries)
