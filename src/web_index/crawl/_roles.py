"""The crawler, the timer and the packer.

Crawler: reads a stored page's links, keeps the new in-scope ones that
robots.txt allows (the broker's seen-set admits each URL once per crawl, up
to ``max_pages``) and posts ``index`` for them.

Timer: ``start_timer`` / ``reset_timer`` into the broker; due timers fire,
posting their callback once (the broker removes the timer and posts in one
step). The callbacks are ``full_end`` (the crawl's) and ``incremental_end``
(started by a reset with no timer running); both go to the ``pack`` queue.

Packer: ``full_end`` and ``pack_full`` build a new database from the site's
texts; ``incremental_end`` and ``pack_incremental`` update the newest
published one with the texts written since its watermark. Then VACUUM,
zstd, publish as the next generation, post ``update``.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

from web_index.crawl._indexer import SpecCache
from web_index.crawl._messages import (
    Crawl,
    FullEnd,
    IncrementalEnd,
    Index,
    Message,
    PackFull,
    PackIncremental,
    ResetTimer,
    StartTimer,
    Update,
    encode,
)
from web_index.crawl._pages import in_scope, is_html, links_of
from web_index.crawl._requisites import queue_requisites, requisites_of
from web_index.crawl._site_files import SiteFiles, check_site
from web_index.crawl._worker import WorkerStats
from web_index.crawl.queues import Broker, Delivery
from web_index.fetch import RobotsCache
from web_index.index import WebIndex
from web_index.models import Page, SimplePageQuery
from web_index.search import build_pack, compress_pack, decompress_pack, read_pack_info, update_pack

__all__ = ["Crawler", "Packer", "Timer"]

_SEEN_CHUNK = 1000


class Crawler:
    """Takes ``crawl`` from the ``crawl`` queue."""

    name = "crawler"
    queue = "crawl"
    accepts: tuple[type, ...] = (Crawl,)
    lease = 30.0

    def __init__(
        self,
        broker: Broker,
        index: WebIndex,
        *,
        robots: RobotsCache | None = None,
        stats: WorkerStats | None = None,
    ) -> None:
        self.broker = broker
        self.index = index
        self.robots = robots
        self.stats = stats or WorkerStats()
        self.specs = SpecCache(broker)

    async def handle(self, message: Message, delivery: Delivery) -> None:
        assert isinstance(message, Crawl)
        site = check_site(message.site)
        spec = await self.specs.get(message.crawl)
        follow = message.depth < spec.max_depth
        if not (follow or spec.requisites):
            return
        (page,) = await asyncio.to_thread(self.index.query, [SimplePageQuery(url=message.url)])
        if not isinstance(page, Page):
            return  # the indexer posts crawl only for stored pages; a deleted store has none
        final = page.final
        body = final.data or b""
        ctype = final.headers.get("content-type")
        if not is_html(ctype, body):
            return
        if spec.requisites:  # whatever the depth: a page at the last depth still needs its stylesheet
            needed = await asyncio.to_thread(requisites_of, body, ctype, final.request_url)
            self.stats.requisites_queued += await queue_requisites(
                self.broker, self.robots, spec, site, needed, message.depth
            )
        got = await asyncio.to_thread(links_of, body, ctype, final.request_url) if follow else None
        if got is None or got[1]:
            return
        links = [link for link in got[0] if in_scope(link, spec)]
        self.stats.out_of_scope += len(got[0]) - len(links)
        if self.robots is not None:
            allowed = await asyncio.gather(*(self.robots.check(link) for link in links))
            links = [link for link, verdict in zip(links, allowed, strict=True) if verdict.allowed]
        for start in range(0, len(links), _SEEN_CHUNK):
            chunk = links[start : start + _SEEN_CHUNK]
            bodies = [
                encode(Index(site=site, url=link, crawl=spec.id, depth=message.depth + 1)) for link in chunk
            ]
            # Marked seen and queued in one step: if this worker dies half way,
            # the redelivered message finds each link either unseen or queued.
            admitted = await asyncio.to_thread(
                self.broker.add_seen, spec.id, chunk, max_pages=spec.max_pages, queue="index", bodies=bodies
            )
            self.stats.queued += sum(admitted)

    async def tick(self) -> None:
        return None

    async def aclose(self) -> None:
        if self.robots is not None:
            await self.robots.aclose()


class Timer:
    """Takes ``start_timer`` and ``reset_timer`` from the ``timer`` queue; fires due timers."""

    name = "timer"
    queue = "timer"
    accepts: tuple[type, ...] = (StartTimer, ResetTimer)
    lease = 30.0

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def handle(self, message: Message, delivery: Delivery) -> None:
        if isinstance(message, StartTimer):
            callback = encode(message.callback_msg)
            site = check_site(message.site)
            await asyncio.to_thread(
                self.broker.start_timer, site, message.timeout, message.callback_queue, callback
            )
        elif isinstance(message, ResetTimer):
            site = check_site(message.site)
            callback = encode(IncrementalEnd(site=site))
            await asyncio.to_thread(
                self.broker.reset_timer, site, message.timeout, message.callback_queue, callback
            )

    async def tick(self) -> None:
        await asyncio.to_thread(self.broker.fire_timers)

    async def aclose(self) -> None:
        return None


class Packer:
    """Takes ``full_end``, ``incremental_end``, ``pack_full`` and ``pack_incremental``."""

    name = "packer"
    queue = "pack"
    accepts: tuple[type, ...] = (FullEnd, IncrementalEnd, PackFull, PackIncremental)
    lease = 60.0

    def __init__(
        self,
        broker: Broker,
        files: SiteFiles,
        *,
        workdir: Path | None = None,
        stats: WorkerStats | None = None,
        keep: int = 3,
    ) -> None:
        self.broker = broker
        self.files = files
        self.workdir = workdir
        self.stats = stats or WorkerStats()
        self.keep = keep
        self._locks: dict[str, asyncio.Lock] = {}

    async def handle(self, message: Message, delivery: Delivery) -> None:
        assert isinstance(message, FullEnd | IncrementalEnd | PackFull | PackIncremental)
        site = check_site(message.site)
        full = isinstance(message, FullEnd | PackFull)
        async with self._locks.setdefault(site, asyncio.Lock()):  # one pack of a site at a time here
            done = await asyncio.to_thread(self.pack, site, full=full)
        if done is not None:
            generation, size, pages = done
            update = Update(site=site, generation=generation, size_mb=round(size / 1e6, 3), pages=pages)
            await asyncio.to_thread(self.broker.send, "orch", [encode(update)])
            self.stats.packed += 1
            self.stats.published[site] = generation
            self.stats.pages[site] = pages

    def pack(self, site: str, *, full: bool) -> tuple[int, int, int] | None:
        """Pack ``site``; its new generation, size decompressed and page count,
        or ``None`` when an incremental pack finds nothing new."""
        latest = self.files.latest(site)
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="wi-pack-", dir=self.workdir) as tmp:
            db = Path(tmp) / "pack.sqlite"
            if full or latest is None:
                names = self.files.text_files(site)
                texts = self.files.read_texts(site, names)
                info = build_pack(db, site, texts, watermark=names[-1] if names else "")
            else:
                self.files.download(site, latest, Path(tmp) / "old.sqlite.zst")
                decompress_pack(Path(tmp) / "old.sqlite.zst", db)
                old = read_pack_info(db).watermark
                names = self.files.text_files(site, after=old)
                if not [n for n in names if n > old]:
                    return None
                info = update_pack(db, self.files.read_texts(site, names), watermark=max(names[-1], old))
            packed = Path(tmp) / "pack.sqlite.zst"
            size = db.stat().st_size  # what a searcher needs on disk (update's size_mb)
            compress_pack(db, packed)
            generation = (latest or 0) + 1
            self.files.publish(site, generation, packed)
        self.files.prune(site, keep=self.keep)
        return generation, size, info.pages

    async def tick(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
