"""A revisit record's body: that of the capture it refers to, found in the store.

A revisit names its capture by ``WARC-Refers-To-Target-URI`` and ``-Date``, which
several captures may share (dates to the second, or two fetches in one
microsecond); by ``WARC-Refers-To``, the record's id, when its writer gives one;
and by its payload's digest. The record named wins, then a capture with that
payload (its body is the one meant, whichever capture holds it): the date only
narrows the search.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from web_index.archive._http import decoded
from web_index.archive._warc_fields import RevisitTarget, names_record
from web_index.index import WebIndex
from web_index.models import Page, TimeAwarePageQuery
from web_index.urls import url_key

__all__ = ["resolve_revisits"]

_WINDOW = timedelta(seconds=1)  # WARC dates are often to the second


def resolve_revisits(index: WebIndex, targets: Sequence[RevisitTarget]) -> list[bytes | None]:
    """The bodies the revisits with these ``targets`` refer to (``None`` where none is found),
    one batch of queries for them all."""
    queries = [
        TimeAwarePageQuery(
            url=t.uri, timestamp=t.date, not_before=t.date - _WINDOW, not_after=t.date + _WINDOW
        )
        for t in targets
    ]
    return [_pick(index, t, page) for t, page in zip(targets, index.query(queries), strict=True)]


def _pick(index: WebIndex, target: RevisitTarget, nearest: object) -> bytes | None:
    if not isinstance(nearest, Page) or nearest.data is None:
        return None
    digest = target.digest
    if _named(target, nearest) or (digest is not None and digest.matches(nearest.data)):
        return nearest.data  # the common case: one capture at that date, no scan
    if target.record_id is None and digest is None:
        return nearest.data  # nothing tells the captures of that moment apart
    key = url_key(target.uri)
    nearby = [
        p
        for p in index.scan(url_prefix=target.uri, start=target.date - _WINDOW, end=target.date + _WINDOW)
        if isinstance(p, Page) and url_key(p.url) == key
    ]
    named = [p for p in nearby if _named(target, p)]
    exact = [p for p in nearby if digest is not None and p.data is not None and digest.matches(p.data)]
    # A body stored decoded cannot be checked against a digest of the wire's (gzipped) payload:
    # such a capture may be the one meant, where no body matches.
    unsure = [p for p in nearby if digest is not None and decoded(p.headers)]
    # The nearest; a tie goes to the query's answer (the later fetch), as without a digest.
    best = min(
        named or exact or unsure or [nearest],
        key=lambda p: (abs(p.timestamp - target.date), p.request_id != nearest.request_id),
    )
    return best.data


def _named(target: RevisitTarget, page: Page) -> bool:
    return target.record_id is not None and names_record(page.request_id, target.record_id)
