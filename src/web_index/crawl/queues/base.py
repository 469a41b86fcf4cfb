"""The :class:`Broker` contract: durable queues with leases, and the little
shared state a crawl needs (seen-sets, crawl specs, timers).

Queues and that state live in one place so that what must happen together
does: a timer that fires is removed and its callback posted in one step, so
a timer process that dies at any moment posts the callback once or not at
all, never twice. Both implementations (SQLite on one machine, Redis Streams
for many) pass the same contract tests (tests/crawl/test_broker_contract.py).

Delivery is at least once. A received message is leased for ``lease``
seconds; unacknowledged by then (the consumer died or hung), it is delivered
again. Each delivery counts; past ``max_deliveries`` the message goes to the
queue's dead letters with the last reason it failed, never silently away.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Broker", "DeadLetter", "Delivery", "QueueCounts", "backoff", "check_bodies"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """A message as one consumer received it. ``deliveries`` counts this one."""

    queue: str
    id: str
    body: bytes
    deliveries: int
    lease_token: str


@dataclass(frozen=True, slots=True)
class DeadLetter:
    queue: str
    id: str
    body: bytes
    reason: str
    deliveries: int
    died: float  # epoch seconds


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """``ready`` includes messages waiting out a retry delay; ``leased`` are held by consumers."""

    ready: int
    leased: int
    dead: int

    @property
    def pending(self) -> int:
        return self.ready + self.leased


def backoff(deliveries: int, base: float = 1.0, cap: float = 60.0) -> float:
    """Seconds before a message that failed its ``deliveries``-th delivery is offered again."""
    return float(min(cap, base * 2 ** max(0, deliveries - 1)))


def check_bodies(urls: Sequence[str], queue: str | None, bodies: Sequence[bytes]) -> None:
    """``add_seen``'s arguments agree: one body per URL with a queue, none without."""
    if len(bodies) != (len(urls) if queue is not None else 0):
        raise ValueError(f"add_seen: {len(bodies)} bodies for {len(urls)} URLs and queue {queue!r}")


class Broker(Protocol):
    """Where the pipeline's queues and shared crawl state live."""

    @property
    def url(self) -> str: ...

    @property
    def max_deliveries(self) -> int: ...

    # --- queues -------------------------------------------------------------
    def send(self, queue: str, bodies: Sequence[bytes], *, delay: float = 0.0) -> None:
        """Append ``bodies`` to ``queue`` (all or none), offered after ``delay`` seconds."""
        ...

    def receive(
        self, queue: str, *, limit: int = 1, lease: float = 60.0, wait: float = 0.0
    ) -> list[Delivery]:
        """Up to ``limit`` messages, each leased for ``lease`` seconds; waits up to
        ``wait`` seconds for one. Messages delivered more than ``max_deliveries``
        times are moved to the dead letters instead of being returned."""
        ...

    def ack(self, delivery: Delivery) -> None:
        """Done with: the message is gone for good."""
        ...

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        """:meth:`ack` each of ``deliveries``, in one step."""
        ...

    def extend(self, delivery: Delivery, lease: float) -> None:
        """Keep holding a message ``lease`` more seconds (long work, e.g. a pack)."""
        ...

    def release(self, delivery: Delivery, reason: str, *, delay: float | None = None) -> None:
        """Failed this time: offered again after ``delay`` (default :func:`backoff`),
        or dead-lettered with ``reason`` if that was its last allowed delivery."""
        ...

    def dead_letter(self, delivery: Delivery, reason: str) -> None:
        """Will never succeed (malformed, unknown type): straight to the dead letters."""
        ...

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]: ...

    def counts(self, queue: str) -> QueueCounts: ...

    def forget(self, queue: str) -> None:
        """Delete ``queue``, its messages and dead letters (a reply queue whose
        asker has gone)."""
        ...

    # --- crawl state ----------------------------------------------------------
    def put_crawl(self, crawl: str, spec: bytes) -> bool:
        """Keep a crawl's spec; ``False`` (and unchanged) if the crawl exists."""
        ...

    def get_crawl(self, crawl: str) -> bytes | None: ...

    def add_seen(
        self,
        crawl: str,
        urls: Sequence[str],
        *,
        max_pages: int,
        queue: str | None = None,
        bodies: Sequence[bytes] = (),
    ) -> list[bool]:
        """Mark ``urls`` seen in ``crawl``: for each, whether it was new *and*
        admitted (the crawl had seen fewer than ``max_pages`` URLs). With
        ``queue``, ``bodies[i]`` is sent there for each admitted ``urls[i]`` in
        the same step: a consumer that dies in between cannot leave a URL seen
        but never queued, which nothing would ever queue again."""
        ...

    def seen_count(self, crawl: str) -> int: ...

    def reserve_turn(self, key: str, interval: float) -> float:
        """Take the next turn of ``key`` (a host's request starts), at least
        ``interval`` seconds after the turn before it, whoever took that one;
        return the seconds to wait for it. Politeness shared by every worker."""
        ...

    # --- timers ---------------------------------------------------------------
    def start_timer(self, site: str, timeout: float, callback_queue: str, callback: bytes) -> None:
        """Set ``site``'s timer to fire in ``timeout`` seconds, replacing any it had."""
        ...

    def reset_timer(self, site: str, timeout: float, callback_queue: str, callback: bytes) -> bool:
        """Push a running timer back to its own full timeout (its callback left
        alone) and return ``True``; with none, start this one and return ``False``."""
        ...

    def fire_timers(self, limit: int = 100) -> list[str]:
        """Fire every due timer: remove it and post its callback, atomically.
        Returns the sites fired."""
        ...

    def timers(self) -> dict[str, float]:
        """Each running timer's site and deadline (epoch seconds)."""
        ...

    def close(self) -> None: ...
