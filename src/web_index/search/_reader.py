"""Searching a pack: ranked, highlighted, paginated.

Ranking is FTS5's BM25 with a title match worth ten body matches: a page
named after the query is usually the one wanted, and titles are short, so a
lower weight would let one long body outrank it by repetition.
"""

from __future__ import annotations

import functools
import html
import sqlite3
import threading
import weakref
from pathlib import Path
from types import TracebackType

from web_index.errors import SearchError
from web_index.search._models import PackInfo, SearchHit, SearchPage
from web_index.search._pack import open_read_only, pack_info
from web_index.search._query import fts_query

__all__ = ["MAX_LIMIT", "MAX_OFFSET", "PackReader", "check_page", "search_pack"]

# The one rule for a page of hits, wherever a search comes from (the pack read
# here, a searcher answering a routed ``search`` message, ``GET /search``, the
# ``search`` command): a request past it is refused, never answered short.
MAX_LIMIT = 1000
MAX_OFFSET = 10_000
TITLE_WEIGHT, BODY_WEIGHT = 10.0, 1.0
SNIPPET_TOKENS = 16

# The rank and the rowid (a total order, so that pages of results neither
# repeat nor skip a hit of equal score) of the hits wanted, first; only then,
# in a second statement, the snippets and the stored url and title of those
# hits alone: SQLite computes a row's every column before sorting, and a
# snippet reads and re-tokenises the page's body. (One statement joining the
# two cost 1.5-5 ms more a query on a 100,000-page pack: bench/crawl_bench.py.)
_TOP = """
SELECT rowid, bm25(pages_fts, ?, ?) AS rank FROM pages_fts
WHERE pages_fts MATCH ? ORDER BY rank, rowid LIMIT ? OFFSET ?
"""
_HITS = """
SELECT pages_fts.rowid, p.url, p.title, snippet(pages_fts, 1, char(2), char(3), '…', ?)
FROM pages_fts JOIN pages AS p ON p.id = pages_fts.rowid
WHERE pages_fts MATCH ? AND pages_fts.rowid IN ({ids})
"""
_COUNT = "SELECT count(*) FROM pages_fts WHERE pages_fts MATCH ?"
# Answers kept per reader. A pack never changes, so a kept answer is never
# stale; query streams repeat their popular queries, which are also the
# dearest (a common word ranks a large share of the pages).
CACHED_ANSWERS = 256


def _snippet_html(raw: str) -> str:
    # snippet() marks matches with U+0002/U+0003, which packs strip from bodies,
    # so the text can be escaped before the marks become tags.
    return html.escape(raw, quote=False).replace("\x02", "<mark>").replace("\x03", "</mark>")


class _Held:
    """One thread's connection; weakly listed so that close() can reach it
    and a finished thread's is closed when its thread-local goes."""

    __slots__ = ("__weakref__", "con")

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con


def check_page(limit: int, offset: int) -> None:
    """``ValueError`` naming ``limit`` or ``offset`` if a page of hits asks past
    :data:`MAX_LIMIT` hits or :data:`MAX_OFFSET` skipped."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValueError(f"limit must be 1 to {MAX_LIMIT}, got {limit}")
    if not 0 <= offset <= MAX_OFFSET:
        raise ValueError(f"offset must be 0 to {MAX_OFFSET}, got {offset}")


class PackReader:
    """Searches one pack, many times, from any number of threads.

    Each thread gets its own read-only connection, opened on its first
    search: a sqlite3 connection must not run two statements from two
    threads at once, and with one connection per thread the searches run in
    parallel (sqlite3 lets go of the GIL while SQLite works) instead of
    queueing on a lock. They are opened with ``check_same_thread=False`` only
    so that :meth:`close` can close them all from one thread; call it once no
    search is running.
    """

    def __init__(self, path: Path, *, cached_answers: int = CACHED_ANSWERS) -> None:
        self.path = path
        self._answer = functools.lru_cache(maxsize=cached_answers)(self._search)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._held: weakref.WeakSet[_Held] = weakref.WeakSet()
        self._closed = False
        try:  # not a pack: fail here, not on the first search
            self._info = pack_info(self._connection(), path)
        except BaseException:
            self.close()
            raise

    @property
    def info(self) -> PackInfo:
        """What the pack says about itself (read when the reader was opened)."""
        return self._info

    def _connection(self) -> sqlite3.Connection:
        held: _Held | None = getattr(self._local, "held", None)
        if held is not None:
            return held.con
        with self._lock:
            if self._closed:
                raise SearchError(f"{self.path}: the PackReader is closed")
            held = _Held(open_read_only(self.path, check_same_thread=False))
            self._held.add(held)
        self._local.held = held
        return held.con

    def search(self, query: str, *, limit: int = 10, offset: int = 0) -> SearchPage:
        """The hits ``offset`` to ``offset + limit`` for the free-text
        ``query`` (see :func:`fts_query`), best first, and their total.

        The reader keeps its last ``cached_answers`` answers and gives the
        same query with the same ``limit`` and ``offset`` its kept answer.
        """
        check_page(limit, offset)
        if self._closed:
            raise SearchError(f"{self.path}: the PackReader is closed")
        return self._answer(query, limit, offset)

    def cache_info(self) -> functools._CacheInfo:
        """Hits, misses and size of the kept answers."""
        return self._answer.cache_info()

    def _search(self, query: str, limit: int, offset: int) -> SearchPage:
        expression = fts_query(query)
        con = self._connection()
        try:
            (total,) = con.execute(_COUNT, (expression,)).fetchone()
            top = con.execute(_TOP, (TITLE_WEIGHT, BODY_WEIGHT, expression, limit, offset)).fetchall()
            found = {}
            if top:
                ids = ", ".join("?" * len(top))
                params = (SNIPPET_TOKENS, expression, *(rowid for rowid, _ in top))
                found = {rowid: rest for rowid, *rest in con.execute(_HITS.format(ids=ids), params)}
        except sqlite3.Error as e:  # a damaged pack; queries themselves are made safe by fts_query
            raise SearchError(f"{self.path}: search failed: {e}") from e
        hits = []
        for rowid, rank in top:
            url, title, snippet = found[rowid]
            hits.append(SearchHit(url=url, title=title, snippet=_snippet_html(snippet), score=-rank))
        return SearchPage(query=query, total=total, offset=offset, limit=limit, hits=tuple(hits))

    def close(self) -> None:
        """Close every thread's connection; later searches raise SearchError."""
        with self._lock:
            self._closed = True
            held, self._held = list(self._held), weakref.WeakSet()
        self._answer.cache_clear()
        for h in held:
            h.con.close()

    def __enter__(self) -> PackReader:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def search_pack(path: Path, query: str, *, limit: int = 10, offset: int = 0) -> SearchPage:
    """One search of the pack at ``path``: see :meth:`PackReader.search`."""
    with PackReader(path) as reader:
        return reader.search(query, limit=limit, offset=offset)
