"""What an export writes: the filters of :meth:`WebIndex.scan`, and of those the attempts
a CDX query (or one of several) matches, as the CDX API matches a capture."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from web_index.archive._cdx import key_range
from web_index.archive._cdx_query import CdxQuery
from web_index.errors import InvalidURLError
from web_index.models import Page
from web_index.urls import domain_of, surt_key

__all__ = ["Selection", "cdx_selection"]


@dataclass(frozen=True)
class Selection:
    """The filters of an export, as :meth:`WebIndex.scan` takes them."""

    domain: str | None = None
    url_prefix: str | None = None
    start: datetime | str | None = None
    end: datetime | str | None = None
    keep: Callable[[Page], bool] | None = None  # and of those, the attempts this keeps


def cdx_selection(queries: Sequence[CdxQuery], within: Selection) -> Selection:
    """``within``, keeping only the attempts whose URL and time one of ``queries`` matches
    as :func:`find_captures` matches a capture (its SURT key, its 14-digit moment)."""
    tests = []
    domains: set[str | None] = set()
    for query in queries:
        _start, matches = key_range(query)
        tests.append((query.start, query.end, matches))
        try:
            domains.add(domain_of(query.url if "://" in query.url else f"http://{query.url}"))
        except InvalidURLError:
            domains.add(None)  # a bare suffix (matchType=domain of "com"): every partition

    def keep(page: Page) -> bool:
        moment, key = page.timestamp.strftime("%Y%m%d%H%M%S"), surt_key(page.url)
        return any(low <= moment <= high and matches(key) for low, high, matches in tests)

    one = next(iter(domains)) if len(domains) == 1 else None  # queries of several domains: scan them all
    return replace(within, domain=within.domain if within.domain is not None else one, keep=keep)
