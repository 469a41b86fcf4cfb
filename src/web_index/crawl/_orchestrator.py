"""The orchestrator: where each site's database is served, and the router of searches.

It takes ``register``, ``heartbeat``, ``update`` and ``search`` from the
``orch`` queue. At a cold start it lists every published database; it
places each on the searchers with most room (:class:`Placement`), tells
holders to reload when a packer publishes a new generation, places a
silent searcher's sites elsewhere, and forwards each search to a searcher
that holds the site (or answers it at once when none can).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence

from web_index.crawl._messages import (
    ErrorKind,
    Heartbeat,
    Load,
    Message,
    Register,
    Results,
    Search,
    Update,
    encode,
)
from web_index.crawl._placement import Command, Placement
from web_index.crawl._site_files import SiteFiles, check_site
from web_index.crawl.queues import Broker, Delivery

__all__ = ["DECOMPRESSED_RATIO", "Orchestrator", "searcher_queue"]

log = logging.getLogger("web_index.crawl")

# A discovered database's size is known only compressed; FTS5 packs shrink
# about 3.5x under zstd (bench/pack_bench.py), so reserve 4x on a searcher.
DECOMPRESSED_RATIO = 4.0


def searcher_queue(searcher: str) -> str:
    """The queue of messages for one searcher."""
    return f"searcher.{searcher}"


class Orchestrator:
    """Takes ``register``, ``heartbeat``, ``update`` and ``search`` from ``orch``."""

    name = "orchestrator"
    queue = "orch"
    accepts: tuple[type, ...] = (Register, Heartbeat, Update, Search)
    lease = 30.0

    def __init__(
        self,
        broker: Broker,
        files: SiteFiles,
        *,
        dead_after: float = 15.0,
        replicas: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker = broker
        self.files = files
        self.clock = clock
        self.placement = Placement(dead_after=dead_after, replicas=replicas)
        self._discovered = False
        self._lock = asyncio.Lock()

    async def handle(self, message: Message, delivery: Delivery) -> None:
        if isinstance(message, Search) and time.time() > message.deadline:
            return  # its asker has given up
        await self._discover()
        now = self.clock()
        forward: Search | None = None
        target: str | None = None
        why, kind = "", None
        async with self._lock:  # the placement changes in one task at a time
            if isinstance(message, Register):
                commands = self.placement.register(message.searcher, message.free_mb, now)
            elif isinstance(message, Heartbeat):
                sites = {check_site(s): g for s, g in message.sites.items()}
                commands = self.placement.heartbeat(message.searcher, message.free_mb, sites, now)
            elif isinstance(message, Update):
                site = check_site(message.site)
                commands = self.placement.site(site, message.generation, message.size_mb)
            else:
                assert isinstance(message, Search)
                forward, site = message, check_site(message.site)
                commands, target = [], self.placement.route(site)
                if target is None and site in self.placement.sites:
                    commands = self.placement.place()  # placed on demand (it had no room before)
                    target = self.placement.route(site)
                why, kind = self._why_not(site) if target is None else ("", None)
        # Loads first: a searcher has its orders before the search they serve.
        await self._send(commands)
        if forward is None:
            return
        log.debug("orchestrator: search %s on %s to %s", forward.id, forward.site, target)
        if target is None:
            answer = Results(id=forward.id, site=forward.site, error=why, kind=kind)
            await asyncio.to_thread(self.broker.send, forward.reply_to, [encode(answer)])
        else:
            await asyncio.to_thread(self.broker.send, searcher_queue(target), [encode(forward)])

    def _why_not(self, site: str) -> tuple[str, ErrorKind]:
        known = self.placement.sites.get(site)
        if known is None:
            return f"no search database is published for {site!r}: crawl it first", "not_found"
        if not self.placement.searchers:
            return f"no searcher is up to serve {site!r}", "unavailable"
        return f"no searcher has room for {site!r} ({known.size_mb:.0f} MB)", "unavailable"

    async def _send(self, commands: Sequence[Command]) -> None:
        by_queue: dict[str, list[bytes]] = {}
        for command in commands:
            by_queue.setdefault(searcher_queue(command.searcher), []).append(encode(command))
            verb = "load" if isinstance(command, Load) else "drop"
            log.info("orchestrator: %s %s on %s", verb, command.site, command.searcher)
        for queue, bodies in by_queue.items():
            await asyncio.to_thread(self.broker.send, queue, bodies)

    async def _discover(self) -> None:
        """List the published databases, once: the state a restart lost."""
        if self._discovered:
            return
        found = await asyncio.to_thread(self._published)
        async with self._lock:
            if self._discovered:
                return
            commands: list[Command] = []
            for site, generation, size in found:
                commands += self.placement.site(site, generation, size / 1e6 * DECOMPRESSED_RATIO)
            self._discovered = True
        log.info("orchestrator: %d published databases found", len(found))
        await self._send(commands)

    def _published(self) -> list[tuple[str, int, int]]:
        out = []
        for site in self.files.sites():
            generation = self.files.latest(site)
            if generation is not None:
                try:
                    out.append((site, generation, self.files.pack_size(site, generation)))
                except FileNotFoundError:
                    continue  # pruned between the listing and now: its successor is listed next time
        return out

    async def tick(self) -> None:
        await self._discover()
        async with self._lock:
            commands = self.placement.expire(self.clock())
        await self._send(commands)

    async def aclose(self) -> None:
        return None
