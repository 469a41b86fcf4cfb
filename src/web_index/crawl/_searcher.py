"""The searcher: holds the databases the orchestrator gives it, and answers searches.

It reads its own queue, ``searcher.<id>``: ``load`` downloads a generation
and swaps it in (searches in flight finish on the old copy), ``drop``
forgets a site, ``search`` is answered on the asker's reply queue. It
announces itself with ``register`` and then sends a ``heartbeat`` with what
it holds every few seconds, and at once after each change.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from web_index.crawl._local_packs import LocalPacks
from web_index.crawl._messages import (
    Drop,
    ErrorKind,
    Heartbeat,
    Load,
    Message,
    Register,
    Results,
    Search,
    encode,
)
from web_index.crawl._orchestrator import searcher_queue
from web_index.crawl._site_files import SiteFiles, check_site
from web_index.crawl.queues import Broker, Delivery
from web_index.errors import SearchError, SearchQueryError, SiteNotFoundError

__all__ = ["Searcher"]

log = logging.getLogger("web_index.crawl")

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


class Searcher:
    """Takes ``load``, ``drop`` and ``search`` from ``searcher.<id>``."""

    name = "searcher"
    accepts: tuple[type, ...] = (Load, Drop, Search)
    lease = 120.0  # a load downloads a whole database

    def __init__(
        self,
        broker: Broker,
        files: SiteFiles,
        folder: Path,
        *,
        searcher_id: str | None = None,
        heartbeat: float = 5.0,
        capacity_mb: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.id = searcher_id or uuid.uuid4().hex[:12]
        if not _ID.fullmatch(self.id):
            raise ValueError(f"searcher id {self.id!r}: use 1-64 letters, digits, '-' or '_'")
        self.queue = searcher_queue(self.id)
        self.broker = broker
        self.heartbeat = heartbeat
        self.capacity_mb = capacity_mb
        self.clock = clock
        folder = folder / self.id
        # What a previous run left here may be half written: start clean.
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.packs = LocalPacks(files, folder)
        self.answered = 0
        self._locks: dict[str, asyncio.Lock] = {}
        self._registered = False
        self._last_beat = float("-inf")

    async def handle(self, message: Message, delivery: Delivery) -> None:
        if isinstance(message, Search):
            if time.time() > message.deadline:
                return  # its asker has given up
            answer = await self._answer(message)
            await asyncio.to_thread(self.broker.send, message.reply_to, [encode(answer)])
            self.answered += 1
            log.debug("searcher %s: answered %s on %s", self.id, message.id, message.site)
            return
        assert isinstance(message, Load | Drop)
        site = check_site(message.site)
        began = time.monotonic()
        async with self._locks.setdefault(site, asyncio.Lock()):
            if isinstance(message, Drop):
                await asyncio.to_thread(self.packs.drop, site)
                log.info("searcher %s: dropped %s", self.id, site)
            else:
                try:
                    held = await asyncio.to_thread(self.packs.load, site, message.generation)
                except SearchError:  # pruned since: the newest is what is wanted anyway
                    held = await asyncio.to_thread(self.packs.load, site)
                log.info(
                    "searcher %s: holds %s generation %d (%.2fs)",
                    self.id,
                    site,
                    held,
                    time.monotonic() - began,
                )
        await self._beat()

    async def _answer(self, search: Search) -> Results:
        site = check_site(search.site)
        try:
            if site not in self.packs.held():
                async with self._locks.setdefault(site, asyncio.Lock()):
                    if site not in self.packs.held():  # routed here before its load arrived
                        await asyncio.to_thread(self.packs.load, site)
            page = await asyncio.to_thread(
                self.packs.search, site, search.query, limit=search.limit, offset=search.offset
            )
        except SearchError as exc:
            kind: ErrorKind = (
                "not_found"
                if isinstance(exc, SiteNotFoundError)
                else "query"
                if isinstance(exc, SearchQueryError)
                else "failed"
            )
            return Results(id=search.id, site=site, searcher=self.id, error=str(exc), kind=kind)
        return Results(id=search.id, site=site, searcher=self.id, page=page)

    def free_mb(self) -> int:
        """Room for more databases, in MB rounded down: ``capacity_mb`` less what
        is held, or the disk's free space."""
        if self.capacity_mb is not None:
            return max(0, self.capacity_mb - self.packs.used_bytes() // 1_000_000)
        return int(shutil.disk_usage(self.folder).free // 1_000_000)

    async def _beat(self) -> None:
        self._last_beat = self.clock()
        free = await asyncio.to_thread(self.free_mb)
        if self._registered:
            message: Message = Heartbeat(searcher=self.id, free_mb=free, sites=self.packs.held())
        else:
            message = Register(searcher=self.id, free_mb=free)
        await asyncio.to_thread(self.broker.send, "orch", [encode(message)])
        self._registered = True

    async def tick(self) -> None:
        if self.clock() - self._last_beat >= self.heartbeat:
            await self._beat()

    async def aclose(self) -> None:
        self.packs.close()
