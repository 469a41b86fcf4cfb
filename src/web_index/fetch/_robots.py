"""robots.txt, obeyed by default, with a small cache of its own.

Follows RFC 9309: a robots.txt that is missing or refused (4xx) allows
everything; one that cannot be fetched (network failure, 5xx) disallows
everything until it can. Only successful answers are cached, so a failure is
looked at again on the next attempt.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from protego import Protego

from web_index.fetch._address import REFUSED
from web_index.fetch._attempt import Fetcher
from web_index.models import AttemptState

__all__ = ["ROBOTS_USER_AGENT", "RobotsCache", "RobotsDecision"]

ROBOTS_USER_AGENT = "web-index"
_MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309 lets parsers stop at 500 KiB


@dataclass(frozen=True, slots=True)
class RobotsDecision:
    """Whether a URL may be fetched; when not, the state to record and why."""

    allowed: bool
    state: AttemptState | None = None
    reason: str = ""
    crawl_delay: float | None = None


@dataclass(slots=True)
class _Entry:
    parser: Protego | None  # None: everything allowed
    expires: float


class RobotsCache:
    """Answers "may ``user_agent`` fetch this URL?" from cached robots.txt files.

    ``fetcher`` fetches the robots.txt files (normally the HTTP fetcher, so
    that the address policy and limits apply to them too). At most
    ``max_entries`` origins are kept, each for ``ttl`` seconds. With
    ``owns_fetcher``, :meth:`aclose` closes the fetcher.
    """

    def __init__(
        self,
        fetcher: Fetcher,
        *,
        user_agent: str = ROBOTS_USER_AGENT,
        ttl: float = 3600.0,
        max_entries: int = 1024,
        owns_fetcher: bool = False,
    ) -> None:
        self._fetcher = fetcher
        self._owns_fetcher = owns_fetcher
        self.user_agent = user_agent
        self._ttl = ttl
        self._max = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    @staticmethod
    def robots_url(url: str) -> str:
        parts = urlsplit(url)
        return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), "/robots.txt", "", ""))

    async def aclose(self) -> None:
        """Close the fetcher if this cache was given it to own."""
        if self._owns_fetcher:
            await self._fetcher.aclose()

    def __len__(self) -> int:
        return len(self._entries)

    async def check(self, url: str) -> RobotsDecision:
        origin = self.robots_url(url)
        if urlsplit(url).path == "/robots.txt":
            return RobotsDecision(True)
        lock = self._locks.setdefault(origin, asyncio.Lock())
        # One fetch per origin, however many of its URLs ask at once.
        async with lock:
            entry = self._entries.get(origin)
            if entry is None or entry.expires < time.monotonic():
                entry, failure = await self._load(origin)
                if failure is not None:
                    self._locks.pop(origin, None)
                    return failure
                self._entries[origin] = entry
                while len(self._entries) > self._max:
                    evicted, _ = self._entries.popitem(last=False)
                    self._locks.pop(evicted, None)
            self._entries.move_to_end(origin)
        if entry.parser is None:
            return RobotsDecision(True)
        delay = entry.parser.crawl_delay(self.user_agent)
        if entry.parser.can_fetch(url, self.user_agent):
            return RobotsDecision(True, crawl_delay=None if delay is None else float(delay))
        return RobotsDecision(False, AttemptState.ERROR, f"robots.txt at {origin} disallows this URL")

    async def _load(self, origin: str) -> tuple[_Entry, RobotsDecision | None]:
        attempt = await self._fetcher.fetch(origin, "get")
        expires = time.monotonic() + self._ttl
        status = attempt.status_code
        final = attempt.final
        if attempt.state.is_success and final is not None and 200 <= final.status_code < 300:
            body = (final.data or b"")[:_MAX_ROBOTS_BYTES]
            text = body.decode("utf-8", "replace")
            return _Entry(Protego.parse(text), expires), None
        if status is not None and status < 500:
            return _Entry(None, expires), None  # missing or refused: everything allowed
        if any(line.startswith(REFUSED) for line in attempt.logs):
            # The page would be refused as well: let its own attempt say why.
            return _Entry(None, expires), None
        # A 5xx robots.txt is the server's trouble, worth a retry; otherwise the
        # robots fetch failed the way the page fetch would (unreachable, refused...).
        server_error = status is not None or attempt.state.is_success
        state = AttemptState.RETRYABLE_ERROR if server_error else attempt.state
        why = "; ".join(attempt.logs) or str(attempt.state)
        # The cause first: a closed port is what the user must fix, robots.txt only how it showed.
        return _Entry(None, expires), RobotsDecision(
            False, state, f"{why} (robots.txt at {origin} could not be fetched: assuming disallow)"
        )
