"""A revisit record's body: that of the capture it refers to, found in the store.

A revisit names its capture by ``WARC-Refers-To-Target-URI`` and ``-Date``, which
several captures may share (dates to the second, or two fetches in one
microsecond); by ``WARC-Refers-To``, the record's id, when its writer gives one;
and by its payload's digest. The record named wins, then a capture with that
payload (its body is the one meant, whichever capture holds it): the date only
narrows the search.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Generic, TypeVar

from web_index.archive._http import decoded
from web_index.archive._warc_fields import RevisitTarget, names_record
from web_index.index import WebIndex
from web_index.models import Page, TimeAwarePageQuery, from_us, sha1_base32
from web_index.storage import CaptureFields, parse_capture_line
from web_index.urls import url_key

__all__ = ["Waiting", "resolve_revisits"]

_T = TypeVar("_T")

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
        return nearest.data  # the common case: nothing more to look up
    if target.record_id is None and digest is None:
        return nearest.data  # nothing tells the captures of that moment apart
    return _search(index, target, nearest)


def _search(index: WebIndex, target: RevisitTarget, nearest: Page) -> bytes | None:
    """Among the captures of the URI in the window (listed from the capture index, no body
    read): the one named, else the nearest with the payload the revisit names (its body, whichever
    capture holds it), else the nearest whose payload cannot be checked, else ``nearest``."""
    key, digest = url_key(target.uri), target.digest
    start, end = target.date - _WINDOW, target.date + _WINDOW
    nearby: list[tuple[str, CaptureFields]] = []
    for line in index.captures(target.uri, start=start, end=end):
        fields = parse_capture_line(line)[2]
        if url_key(fields.url) == key and start <= from_us(fields.attempt_us) <= end:
            nearby.append((line, fields))
    if len(nearby) < 2:
        return nearest.data  # no other capture to choose: no body read

    def distance(found: tuple[str, CaptureFields]) -> tuple[timedelta, bool]:
        # A tie goes to the query's answer (the later fetch), as without a digest.
        return abs(from_us(found[1].attempt_us) - target.date), found[1].request_id != nearest.request_id

    named = [
        n for n in nearby if target.record_id is not None and names_record(n[1].request_id, target.record_id)
    ]
    if digest is not None and digest.algorithm == "sha1":
        wanted = sha1_base32(digest.raw)
        exact = [n for n in nearby if n[1].digest == wanted]
    else:
        exact = []  # (a SHA-256, rare in WARCs, is checked against the bodies below)
    for line, _ in sorted(named or exact, key=distance):
        response = index.capture_response(line)
        if response is not None and response.data is not None:
            return response.data
    loaded = [(n, index.capture_response(n[0])) for n in sorted(nearby, key=distance)]
    bodies = [(r.data, r.headers) for _, r in loaded if r is not None and r.data is not None]
    if digest is not None:
        for body, _ in bodies:
            if digest.matches(body):
                return body
        # A body stored decoded cannot be checked against a digest of the wire's (gzipped)
        # payload: such a capture may be the one meant, where no body matches.
        for body, headers in bodies:
            if decoded(headers):
                return body
    return nearest.data


def _named(target: RevisitTarget, page: Page) -> bool:
    return target.record_id is not None and names_record(page.request_id, target.record_id)


class Waiting(Generic[_T]):
    """What waits until a bulk load has committed (an import's revisits, which refer to
    captures the load holds), kept in a temporary file, not in memory: an import of 10 GiB
    holds ~95,000 of them. Given back in the order added, ``size`` at a time."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="web-index-waiting-")  # noqa: SIM115 (closed by __exit__)

    def __enter__(self) -> Waiting[_T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def add(self, items: list[_T]) -> None:
        if items:
            # Our own objects, read back only by this process from a file it made: not foreign data.
            pickle.dump(items, self._file, protocol=pickle.HIGHEST_PROTOCOL)

    def slices(self, size: int) -> Iterator[list[_T]]:
        self._file.flush()
        self._file.seek(0)
        held: list[_T] = []
        while True:
            try:
                held += pickle.load(self._file)  # noqa: S301 (see add)
            except EOFError:
                break
            while len(held) >= size:
                yield held[:size]
                held = held[size:]
        if held:
            yield held
