"""The indexer: fetch a page through the project's fetchers, keep its text,
tell the timer the site is busy, and hand crawled pages to the crawler.

Every attempt goes into the web index like any other fetch (the runner's
recorder). The text goes to the site's text files in batches
(:class:`TextSink`); a message is acknowledged only once its text is there,
so a killed indexer loses nothing it acknowledged.

Departure from the seed: the indexer, not the crawler, posts a page's
``crawl`` message, after the page is stored. The crawler then reads the page
from the index instead of fetching it a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

import msgspec

from web_index.crawl._batching import Batcher
from web_index.crawl._messages import (
    Crawl,
    CrawlSpec,
    FullEnd,
    Index,
    IndexCrawl,
    Message,
    MessageError,
    ResetTimer,
    StartTimer,
    encode,
)
from web_index.crawl._pages import extract, in_scope, is_html, normalise
from web_index.crawl._requisites import queue_requisites, stylesheet_requisites
from web_index.crawl._site_files import SiteFiles, check_site
from web_index.crawl._worker import WorkerStats
from web_index.crawl.queues import Broker, Delivery
from web_index.fetch import Attempt, FetchConfig, RobotsCache, redirect_filter
from web_index.index import WebIndex
from web_index.search import PageText

__all__ = ["Indexer", "SpecCache", "TextSink"]

_DEFAULT_SETTLE = 300.0


class BrokerPacer:
    """Turns of each domain kept by the broker, so that every indexer process
    spaces its requests to a host by the one ``--delay`` / Crawl-delay."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def wait_turn(self, domain: str, interval: float) -> None:
        wait = await asyncio.to_thread(self.broker.reserve_turn, domain, interval)
        if wait > 0:
            await asyncio.sleep(wait)


class SpecCache:
    """Crawl specs by id, read once from the broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._specs: dict[str, CrawlSpec] = {}

    async def get(self, crawl: str) -> CrawlSpec:
        spec = self._specs.get(crawl)
        if spec is None:
            raw = await asyncio.to_thread(self.broker.get_crawl, crawl)
            if raw is None:
                raise MessageError(f"no crawl {crawl!r} is known to the broker")
            spec = self._specs[crawl] = msgspec.json.decode(raw, type=CrawlSpec)
        return spec


class TextSink:
    """Batches page texts per site into text files; :meth:`add` returns once
    its text is written."""

    def __init__(self, files: SiteFiles, *, max_batch: int = 500, max_age: float = 0.25) -> None:
        self.files = files
        self.max_batch = max_batch
        self.max_age = max_age
        self._pending: dict[str, list[tuple[PageText, asyncio.Future[None]]]] = {}
        self._since: dict[str, float] = {}
        self._flusher: asyncio.Task[None] | None = None

    async def add(self, site: str, text: PageText) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        batch = self._pending.setdefault(site, [])
        self._since.setdefault(site, time.monotonic())
        batch.append((text, future))
        if len(batch) >= self.max_batch:
            await self._flush(site)
        elif self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_aged())
        await future

    async def _flush_aged(self) -> None:
        while self._pending:
            await asyncio.sleep(self.max_age / 2)
            now = time.monotonic()
            for site in [s for s, t in self._since.items() if now - t >= self.max_age]:
                await self._flush(site)

    async def _flush(self, site: str) -> None:
        batch = self._pending.pop(site, [])
        self._since.pop(site, None)
        if not batch:
            return
        try:
            await asyncio.to_thread(self.files.write_texts, site, [t for t, _ in batch])
        except Exception as exc:
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
        else:
            for _, future in batch:
                if not future.done():
                    future.set_result(None)

    async def aclose(self) -> None:
        for site in list(self._pending):
            await self._flush(site)
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher


class Indexer:
    """Takes ``index+crawl`` and ``index`` from the ``index`` queue."""

    name = "indexer"
    queue = "index"
    accepts: tuple[type, ...] = (IndexCrawl, Index)
    lease = 30.0

    def __init__(
        self,
        broker: Broker,
        index: WebIndex,
        files: SiteFiles,
        *,
        config: FetchConfig | None = None,
        stats: WorkerStats | None = None,
        settle: float = _DEFAULT_SETTLE,
    ) -> None:
        self.broker = broker
        self.index = index
        self.files = files
        self.config = config or FetchConfig()
        self.stats = stats or WorkerStats()
        self.settle = settle
        self.specs = SpecCache(broker)
        self._reset_at: dict[str, float] = {}  # when each site's timer was last reset
        self._owed: dict[str, float] = {}  # sites with pages since then: their settle time
        self.sink = TextSink(files)
        self._crawls: Batcher[bytes] = Batcher(lambda bodies: broker.send("crawl", bodies))
        self.robots: RobotsCache | None = self.config.robots_cache()
        self.runner = self.config.runner(
            self.config.build_fetchers(), index, robots=self.robots, pacer=BrokerPacer(broker)
        )

    async def _send(self, queue: str, *messages: Message) -> None:
        await asyncio.to_thread(self.broker.send, queue, [encode(m) for m in messages])
        self.stats.queued += len(messages) if queue in ("index", "crawl") else 0

    async def handle(self, message: Message, delivery: Delivery) -> None:
        if isinstance(message, IndexCrawl):
            await self._start(message)
        elif isinstance(message, Index):
            await self._index(message)

    async def _start(self, message: IndexCrawl) -> None:
        site = check_site(message.site)
        spec = message.spec
        seed = normalise(spec.seed)
        if seed is None:
            raise MessageError(f"crawl {spec.id}: seed {spec.seed!r} is not an http(s) URL")
        await asyncio.to_thread(self.broker.put_crawl, spec.id, encode_spec(spec))
        timer = StartTimer(site=site, timeout=spec.settle, callback_msg=FullEnd(site=site, crawl=spec.id))
        await self._send("timer", timer)
        first = encode(Index(site=site, url=seed, crawl=spec.id, depth=0))
        await asyncio.to_thread(
            self.broker.add_seen, spec.id, [seed], max_pages=spec.max_pages, queue="index", bodies=[first]
        )

    async def _index(self, message: Index) -> None:
        site = check_site(message.site)
        url = normalise(message.url)
        if url is None:
            raise MessageError(f"{message.url!r} is not an http(s) URL")
        spec = await self.specs.get(message.crawl) if message.crawl else None

        async def follow(target: str) -> str | None:
            # A requisite may live anywhere (a CDN's stylesheet): only robots.txt and
            # the address policy bound it.
            if spec is not None and not message.requisite and not in_scope(normalise(target) or target, spec):
                return "outside the crawl's scope"
            if self.robots is not None and not (await self.robots.check(target)).allowed:
                return "disallowed by robots.txt"
            return None

        with redirect_filter(follow):
            outcome = await self.runner.fetch(url)
        self.stats.fetched += len(outcome.attempts)
        settle = spec.settle if spec is not None else self.settle
        if message.requisite:
            await self._requisite(outcome.final, spec, site, message.depth)
            await self._reset_timer(site, settle)
            return
        text, follow_links, why = await self._text_of(outcome.final, url)
        if text is None:
            self.stats.errors += 1
            self.stats.failures.add(str(outcome.final.state), why, url)
        else:
            await self.sink.add(site, text)
            self.stats.indexed += 0 if text.deleted else 1
        await self._reset_timer(site, settle)
        more = follow_links and message.depth < spec.max_depth if spec is not None else False
        if spec is not None and text is not None and (more or spec.requisites):
            await self._crawls.add(encode(Crawl(site=site, url=url, crawl=spec.id, depth=message.depth)))
            self.stats.queued += 1

    async def _requisite(self, attempt: Attempt, spec: CrawlSpec | None, site: str, depth: int) -> None:
        """A requisite is recorded (the runner did); a stylesheet's own are queued."""
        self.stats.requisites += 1
        final = attempt.final
        if not attempt.state.is_success or final is None:
            self.stats.requisite_errors += 1
            return
        if spec is None or not spec.requisites:
            return
        needed = stylesheet_requisites(final)
        if not needed:
            return
        self.stats.requisites_queued += await queue_requisites(
            self.broker, self.robots, spec, site, needed, depth
        )

    async def _text_of(self, attempt: Attempt, url: str) -> tuple[PageText | None, bool, str]:
        """The page's text (or a tombstone), whether to follow its links, and
        why there is no text when there is none (the crawl's summary says it)."""
        gone = PageText(url=url, title="", text="", fetched=datetime.now(UTC), deleted=True)
        responses, status = attempt.responses, attempt.status_code
        if not attempt.state.is_success or not responses:
            if status in (404, 410):
                return gone, False, ""
            return None, False, attempt.why or str(attempt.state)
        final = responses[-1]
        if final.status_code in (404, 410):  # gone (the fetchers count it a success): packs drop it
            return gone, False, ""
        body = final.data or b""
        ctype = final.headers.get("content-type")
        if final.status_code != 200:
            # A redirect the crawl did not follow says where it led and why not.
            why = attempt.why if 300 <= final.status_code < 400 else None
            return None, False, why or f"HTTP status {final.status_code}"
        if not is_html(ctype, body):
            return None, False, f"not HTML ({ctype or 'no content-type'})"
        got = await asyncio.to_thread(extract, body, ctype, final.request_url)
        if got is None:
            return None, False, "binary content served as HTML"
        page = PageText(url=url, title=got.title, text=got.text, lang=got.lang, fetched=final.timestamp)
        return page, not got.nofollow, ""

    async def _reset_timer(self, site: str, settle: float) -> None:
        # One reset_timer per site per quarter of its settle time (at most a
        # second) is as good as one per page, and a page costs four broker
        # steps fewer; a page since the last reset is covered by a trailing one.
        now = time.monotonic()
        if now - self._reset_at.get(site, float("-inf")) >= min(1.0, settle / 4):
            self._reset_at[site] = now
            self._owed.pop(site, None)
            await self._send("timer", ResetTimer(site=site, timeout=settle))
        else:
            self._owed[site] = settle

    def owes_reset(self, site: str) -> bool:
        """Whether a page of ``site`` indexed here has yet to push its timer back."""
        return site in self._owed

    async def tick(self) -> None:
        for site, settle in list(self._owed.items()):
            if time.monotonic() - self._reset_at.get(site, float("-inf")) >= min(1.0, settle / 4):
                await self._reset_timer(site, settle)

    async def aclose(self) -> None:
        for site, settle in list(self._owed.items()):
            self._reset_at.pop(site, None)
            await self._reset_timer(site, settle)
        await self.sink.aclose()
        await self.runner.aclose()
        if self.robots is not None:
            await self.robots.aclose()


def encode_spec(spec: CrawlSpec) -> bytes:
    return msgspec.json.encode(spec)
