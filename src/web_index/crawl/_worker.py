"""Running roles: take a role's messages off its queue, hand them to it,
settle each one.

The loop is the same for every role. A message that does not decode, or that
the role does not take, or that the role refuses as bad input
(:class:`MessageError`), goes to the dead letters with the reason; any other
failure releases it for a retry with backoff (and to the dead letters after
the broker's last allowed delivery). Success acknowledges it. A worker never
stops for a message, and never drops one without saying where it went.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from web_index.crawl._batching import Batcher
from web_index.crawl._failures import FailureTally
from web_index.crawl._messages import Message, MessageError, decode
from web_index.crawl.queues import Broker, Delivery

__all__ = ["Role", "Worker", "WorkerStats"]

log = logging.getLogger("web_index.crawl")


@dataclass
class WorkerStats:
    """What the roles of one process have done (the crawl's progress display)."""

    queued: int = 0
    fetched: int = 0
    indexed: int = 0
    errors: int = 0
    packed: int = 0
    dead: int = 0
    retried: int = 0
    published: dict[str, int] = field(default_factory=dict)  # site -> latest generation
    pages: dict[str, int] = field(default_factory=dict)  # site -> pages in it
    failures: FailureTally = field(default_factory=FailureTally)  # what the errors were
    out_of_scope: int = 0  # links not followed: outside their crawl's scope
    requisites: int = 0  # requisites fetched (--page-requisites), apart from pages
    requisite_errors: int = 0  # of those, the ones that failed
    requisites_queued: int = 0


class Role(Protocol):
    """One kind of worker: what it reads, what it takes, how it handles one message."""

    name: str
    queue: str
    accepts: tuple[type, ...]
    lease: float

    async def handle(self, message: Message, delivery: Delivery) -> None: ...

    async def tick(self) -> None:
        """Called every ``tick_every`` seconds (the timer fires due timers here)."""
        ...

    async def aclose(self) -> None: ...


class Worker:
    """Runs ``roles`` against ``broker`` until :meth:`stop`."""

    def __init__(
        self,
        broker: Broker,
        roles: Sequence[Role],
        *,
        concurrency: int = 16,
        poll: float = 0.5,
        tick_every: float = 0.2,
        stats: WorkerStats | None = None,
        lease: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.broker = broker
        self.roles = list(roles)
        self.concurrency = concurrency
        self.poll = poll
        self.tick_every = tick_every
        self.stats = stats or WorkerStats()
        self.lease = lease
        self._stop = asyncio.Event()
        self._pool = ThreadPoolExecutor(max_workers=max(8, concurrency + 4), thread_name_prefix="wi-broker")
        self._acks: Batcher[Delivery] = Batcher(broker.ack_many)

    def stop(self) -> None:
        self._stop.set()

    async def _call(self, fn: object, *args: object, **kwargs: object) -> object:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kwargs))  # type: ignore[operator]

    async def run(self) -> None:
        """Consume until :meth:`stop`; then finish what is in hand, and close the roles."""
        tasks = [asyncio.create_task(self._consume(role), name=f"consume-{role.name}") for role in self.roles]
        tasks += [asyncio.create_task(self._ticks(role), name=f"tick-{role.name}") for role in self.roles]
        try:
            await self._stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for role in self.roles:
                await role.aclose()
            self._pool.shutdown(wait=False)

    async def _ticks(self, role: Role) -> None:
        while not self._stop.is_set():
            try:
                await role.tick()
            except Exception:
                log.exception("%s: tick failed", role.name)
            await asyncio.sleep(self.tick_every)

    async def _consume(self, role: Role) -> None:
        slots = asyncio.Semaphore(self.concurrency)
        running: set[asyncio.Task[None]] = set()
        try:
            while not self._stop.is_set():
                free = self.concurrency - len(running)
                if free <= 0:
                    await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                    continue
                try:
                    got = await self._call(
                        self.broker.receive, role.queue, limit=free, lease=self._lease(role), wait=self.poll
                    )
                except Exception:
                    log.exception("%s: receiving from %s failed", role.name, role.queue)
                    await asyncio.sleep(1.0)
                    continue
                for delivery in got:  # type: ignore[attr-defined]
                    await slots.acquire()
                    task = asyncio.create_task(self._settle(role, delivery))
                    running.add(task)
                    task.add_done_callback(running.discard)
                    task.add_done_callback(lambda _t: slots.release())
        finally:
            # Stopping: what is in hand is finished (or, if cancelled, left to its lease).
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _settle(self, role: Role, delivery: Delivery) -> None:
        try:
            message = decode(delivery.body)
            if not isinstance(message, role.accepts):
                raise MessageError(f"the {role.name} does not take {type(message).__name__} messages")
        except MessageError as exc:
            await self._bury(delivery, str(exc))
            return
        keeper = asyncio.create_task(self._keep_lease(role, delivery))
        try:
            try:
                await role.handle(message, delivery)
            except MessageError as exc:
                await self._bury(delivery, str(exc))
            except asyncio.CancelledError:
                raise  # left to its lease: it is delivered again
            except Exception as exc:
                self.stats.retried += 1
                reason = f"{type(exc).__name__}: {exc}"
                log.warning("%s: %s failed (%s); released for a retry", role.name, delivery.id, reason)
                await self._call(self.broker.release, delivery, reason)
            else:
                await self._acks.add(delivery)
        except Exception:
            # The broker itself failed (Redis gone, disk full): the message stays
            # leased and comes back after its lease; the worker goes on.
            log.exception("%s: settling %s failed; it returns after its lease", role.name, delivery.id)
        finally:
            keeper.cancel()

    async def _bury(self, delivery: Delivery, reason: str) -> None:
        self.stats.dead += 1
        log.warning("dead letter from %s: %s", delivery.queue, reason)
        await self._call(self.broker.dead_letter, delivery, reason)

    def _lease(self, role: Role) -> float:
        return self.lease if self.lease is not None else role.lease

    async def _keep_lease(self, role: Role, delivery: Delivery) -> None:
        # Held while being handled, however long that takes; a dead worker's
        # messages come back one lease after its last extension.
        lease = self._lease(role)
        while True:
            await asyncio.sleep(lease / 3)
            with contextlib.suppress(Exception):
                await self._call(self.broker.extend, delivery, lease)
