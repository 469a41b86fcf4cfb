"""What a store holds, for the home page: its registrable domains with their
captures and attempts, the most recently fetched first; its newest captures;
and, for a lookup, the attempts at the URLs under a host, prefix or domain.

The domains are counted from what ``stats`` and ``attempt_counts`` read (the
month indexes where compaction keeps them current), never from the records,
so that a store of many domains lists them as fast as its overview."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from web_index.index import WebIndex
from web_index.models import AttemptMetadata, RecordType
from web_index.urls import domain_of, url_key

__all__ = ["Held", "attempts_under", "holdings", "recent_captures"]

RECENT = 20  # captures listed as the newest
RECENT_DOMAINS = 5  # the most recently fetched domains they are taken from
RECENT_READ = 2_000  # attempts of each such domain's latest month read at most
LOOKUP_ATTEMPTS = 100_000  # attempts a lookup counts at most


@dataclass(frozen=True, slots=True)
class Held:
    """One registrable domain of the store: the last month it was fetched in,
    its captures (responses of stored chains, in files) and attempts."""

    domain: str
    latest: str  # "2024-03"
    captures: int
    attempts: int
    failed: int


def holdings(index: WebIndex) -> list[Held]:
    """Every registrable domain the store holds, the most recently fetched
    first (by month; then the most attempted, then by name)."""
    rows: dict[str, list[Any]] = {}

    def row(domain: str, year: int, month: int) -> list[Any]:
        got = rows.setdefault(domain, ["", 0, 0, 0])
        got[0] = max(got[0], f"{year:04d}-{month:02d}")
        return got

    for c in index.attempt_counts():
        counts = row(c.domain, c.year, c.month)
        counts[2] += c.attempts
        counts[3] += c.attempts if c.state != "success" else 0
    for p in index.stats().partitions:
        if not RecordType.parse(p.type).is_metadata:
            row(p.domain, p.year, p.month)[1] += p.records
    held = sorted((Held(d, *r) for d, r in rows.items()), key=lambda h: h.domain)
    held.sort(key=lambda h: (h.latest, h.attempts), reverse=True)
    return held


def recent_captures(index: WebIndex, held: list[Held]) -> list[AttemptMetadata]:
    """The newest successful GET attempts (each stored a capture) of the most
    recently fetched domains: of each, the first :data:`RECENT_READ` attempts
    of its latest month looked at (their metadata only, no body)."""
    found: list[AttemptMetadata] = []
    for h in [h for h in held if h.captures][:RECENT_DOMAINS]:
        month = index.scan(RecordType.GET_METADATA, domain=h.domain, start=h.latest.replace("-", ""))
        found += [
            m
            for m in itertools.islice(month, RECENT_READ)
            if isinstance(m, AttemptMetadata) and m.state == "success" and m.timestamp is not None
        ]
    found.sort(key=lambda m: m.timestamp or 0, reverse=True)
    return found[:RECENT]


def attempts_under(index: WebIndex, url: str, match: str) -> dict[str, tuple[int, int]]:
    """The GET attempts at each URL a CDX lookup of ``url`` (``match``: host,
    prefix or domain) covers, and how many of them failed; the first
    :data:`LOOKUP_ATTEMPTS` of its registrable domain looked at."""
    wanted = _matcher(url, match)
    attempts: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    scanned = index.scan(RecordType.GET_METADATA, domain=domain_of(url))
    for m in itertools.islice(scanned, LOOKUP_ATTEMPTS):
        if isinstance(m, AttemptMetadata) and wanted(m.url):
            attempts[m.url] += 1
            failed[m.url] += m.state != "success"
    return {u: (n, failed[u]) for u, n in attempts.items()}


def _matcher(url: str, match: str) -> Callable[[str], bool]:
    key = url_key(url)
    if match == "host":
        netloc = urlsplit(key).netloc
        return lambda u: urlsplit(url_key(u)).netloc == netloc
    if match == "prefix":
        rest = key.split("://", 1)[-1]
        return lambda u: url_key(u).split("://", 1)[-1].startswith(rest)
    host = urlsplit(key).hostname or ""

    def in_domain(u: str) -> bool:
        got = urlsplit(url_key(u)).hostname or ""
        return got == host or got.endswith(f".{host}")

    return in_domain
