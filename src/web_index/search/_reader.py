"""Searching a pack: ranked, highlighted, paginated.

Ranking is FTS5's BM25 with a title match worth ten body matches: a page
named after the query is usually the one wanted, and titles are short, so a
lower weight would let one long body outrank it by repetition.
"""

from __future__ import annotations

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

__all__ = ["MAX_LIMIT", "PackReader", "search_pack"]

MAX_LIMIT = 1000
TITLE_WEIGHT, BODY_WEIGHT = 10.0, 1.0
SNIPPET_TOKENS = 16

# The rank and the rowid (a total order, so that pages of results neither
# repeat nor skip a hit of equal score) of the hits wanted, first; only then
# the snippets and the stored url and title, for those hits alone: SQLite
# computes a row's every column before sorting, and a snippet reads and
# re-tokenises the page's body.
_SEARCH = """
WITH top(id, rank) AS MATERIALIZED (
    SELECT rowid, bm25(pages_fts, :title_weight, :body_weight) AS rank FROM pages_fts
    WHERE pages_fts MATCH :q ORDER BY rank, rowid LIMIT :limit OFFSET :offset
)
SELECT p.url, p.title, snippet(pages_fts, 1, char(2), char(3), '…', :tokens), top.rank
FROM top CROSS JOIN pages_fts CROSS JOIN pages AS p
WHERE pages_fts MATCH :q AND pages_fts.rowid = top.id AND p.id = top.id
ORDER BY top.rank, top.id
"""
_SETTINGS = {"title_weight": TITLE_WEIGHT, "body_weight": BODY_WEIGHT, "tokens": SNIPPET_TOKENS}
_COUNT = "SELECT count(*) FROM pages_fts WHERE pages_fts MATCH ?"


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

    def __init__(self, path: Path) -> None:
        self.path = path
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
        ``query`` (see :func:`fts_query`), best first, and their total."""
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be 1 to {MAX_LIMIT}, got {limit}")
        if offset < 0:
            raise ValueError(f"offset must be 0 or more, got {offset}")
        expression = fts_query(query)
        if self._closed:
            raise SearchError(f"{self.path}: the PackReader is closed")
        con = self._connection()
        try:
            (total,) = con.execute(_COUNT, (expression,)).fetchone()
            rows = con.execute(
                _SEARCH, {"q": expression, "limit": limit, "offset": offset, **_SETTINGS}
            ).fetchall()
        except sqlite3.Error as e:  # a damaged pack; queries themselves are made safe by fts_query
            raise SearchError(f"{self.path}: search failed: {e}") from e
        hits = [
            SearchHit(url=url, title=title, snippet=_snippet_html(snippet), score=-rank)
            for url, title, snippet, rank in rows
        ]
        return SearchPage(query=query, total=total, offset=offset, limit=limit, hits=hits)

    def close(self) -> None:
        """Close every thread's connection; later searches raise SearchError."""
        with self._lock:
            self._closed = True
            held, self._held = list(self._held), weakref.WeakSet()
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
