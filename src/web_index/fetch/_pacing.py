"""Pacing: the minimum time between the starts of two requests to one domain.

A :class:`FetchRunner` asks its pacer for each domain's next turn. The
default, :class:`LocalPacer`, keeps the schedule in the process; a crawl
with many worker processes gives them one schedule kept by its broker, so
that N processes are as polite as one.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["LocalPacer", "Pacer"]


class Pacer(Protocol):
    """Whose turn it is to start a request to a domain."""

    async def wait_turn(self, domain: str, interval: float) -> None:
        """Return when a request to ``domain`` may start: ``interval`` seconds
        or more after the start of the one before it."""
        ...


class LocalPacer:
    """The schedule of one process: each domain's next free start."""

    def __init__(self) -> None:
        self._next: dict[str, float] = {}

    async def wait_turn(self, domain: str, interval: float) -> None:
        # Reserving before sleeping lets concurrent callers queue up in order
        # without a lock: each sleeps until its own turn.
        now = time.monotonic()
        start = max(now, self._next.get(domain, now))
        self._next[domain] = start + interval
        if start > now:
            await asyncio.sleep(start - now)
