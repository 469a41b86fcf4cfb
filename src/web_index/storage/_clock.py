"""The clock that decides age flushes and cache expiry.

Whatever the store decides by time (a partition's oldest buffered row is old
enough to flush, a cached listing has expired) asks a :class:`Clock`, so that
tests and simulations can drive those paths step by step instead of sleeping
and hoping the timing lines up.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock", "now_us"]


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the Unix epoch (wall clock: buffered rows' ages)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (intervals: cache expiry, check throttles)."""
        ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()


def now_us(clock: Clock) -> int:
    """The wall clock in whole microseconds."""
    return int(clock.time() * 1_000_000)
