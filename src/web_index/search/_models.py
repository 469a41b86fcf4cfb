"""The values that cross the search package's boundary: a page's text going
into a pack, what a pack says about itself, and a page of search results.

They are msgspec structs so that a packer and a searcher can pass them over
a queue or HTTP as JSON or MessagePack without a hand-written codec.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

__all__ = ["PackInfo", "PageText", "SearchHit", "SearchPage", "iso_utc", "parse_iso_utc"]


def iso_utc(when: datetime) -> str:
    """``when`` in UTC as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``.

    Fixed width on purpose: the packs compare these strings in SQL to keep the
    latest version of a page, which is only right if text order is time order.
    """
    return when.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_iso_utc(text: str) -> datetime:
    """The inverse of :func:`iso_utc`."""
    return datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=UTC)


class PageText(msgspec.Struct, frozen=True, kw_only=True):
    """The main text of one fetched page, as a pack indexes it.

    ``fetched`` must be timezone-aware: it decides which of two versions of a
    page is newer, and a naive time could be any zone. ``deleted`` marks a
    tombstone: the page is gone, and a pack built or updated with it drops
    the url (``title`` and ``text`` are then ignored).
    """

    url: str
    title: str
    text: str
    lang: str | None = None
    fetched: datetime
    deleted: bool = False

    def __post_init__(self) -> None:
        if self.fetched.tzinfo is None or self.fetched.utcoffset() is None:
            raise ValueError(f"PageText.fetched must be timezone-aware, got {self.fetched!r} for {self.url}")


class PackInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a pack records about itself.

    ``watermark`` is the caller's opaque marker of the last input included
    (e.g. the name of the last part file read); ``""`` for none. ``built`` is
    when the pack was last built or updated (UTC); ``format`` the version of
    its schema.
    """

    site: str
    pages: int
    watermark: str
    built: datetime
    format: int


class SearchHit(msgspec.Struct, frozen=True, kw_only=True):
    """One matching page.

    ``title`` is plain text. ``snippet`` is HTML: a passage of the body with
    its text escaped and the matched words in ``<mark>`` … ``</mark>``, cut
    passages marked by ``…``. ``score`` is larger for better matches (the
    negated BM25 rank); it only compares hits of the same query and pack.
    """

    url: str
    title: str
    snippet: str
    score: float


class SearchPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of results: ``hits`` are the matches ``offset`` to
    ``offset + limit`` in rank order, ``total`` the number of matching pages."""

    query: str
    total: int
    offset: int
    limit: int
    hits: tuple[SearchHit, ...]
