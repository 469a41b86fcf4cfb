"""The whole pipeline in one process: what ``web-index crawl`` runs.

Every role on one worker, against the embedded broker (a SQLite file in the
store's private folder) unless another is given. The crawl ends when its
site has settled: nothing of it is queued or leased, its timer has fired (at
once when nothing at all is left on the broker), and the packer has published
the database that followed.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from web_index.crawl._failures import FailureGroup
from web_index.crawl._indexer import Indexer
from web_index.crawl._local_packs import LocalPacks
from web_index.crawl._messages import CrawlSpec, FullEnd, IndexCrawl, MessageError, Scope, encode
from web_index.crawl._orchestrator import Orchestrator
from web_index.crawl._pages import normalise, scope_prefix
from web_index.crawl._roles import Crawler, Packer, Timer
from web_index.crawl._searcher import Searcher
from web_index.crawl._site_files import SiteFiles, check_site
from web_index.crawl._worker import Role, Worker, WorkerStats
from web_index.crawl.queues import Broker, SqliteBroker, open_broker
from web_index.errors import InvalidURLError
from web_index.fetch import FetchConfig
from web_index.index import WebIndex
from web_index.search import SearchPage, decompress_pack, read_pack_info
from web_index.storage import open_backend
from web_index.urls import domain_of, host_of

__all__ = [
    "ROLES",
    "CrawlProgress",
    "CrawlResult",
    "build_roles",
    "crawl_site",
    "default_broker",
    "run_worker",
    "search_site",
    "site_files",
    "store_packs",
]

_QUEUES = ("index", "crawl", "timer", "pack")
_AT_ONCE = 0.001  # seconds: a timer that is due on the timer role's next tick
ROLES = ("indexer", "crawler", "timer", "packer", "orchestrator", "searcher")


@dataclass(frozen=True, slots=True)
class CrawlProgress:
    """A snapshot for a progress display."""

    queued: int
    fetched: int
    indexed: int
    errors: int
    pending: int
    elapsed: float

    @property
    def pages_per_second(self) -> float:
        return self.fetched / self.elapsed if self.elapsed > 0 else 0.0


@dataclass(frozen=True, slots=True)
class CrawlResult:
    """What a crawl did. ``errors`` pages gave no text, for the reasons in
    ``failures``; ``out_of_scope`` links were not followed; ``scope_prefix`` is
    the URL prefix a ``prefix`` crawl followed (``None`` for other scopes);
    ``requisites`` were fetched for the pages to render (``requisite_errors``
    of them failed), apart from the pages."""

    site: str
    crawl: str
    generation: int
    pages: int
    fetched: int
    errors: int
    dead_letters: int
    seconds: float
    indexed: int = 0
    requisites: int = 0
    requisite_errors: int = 0
    out_of_scope: int = 0
    scope_prefix: str | None = None
    failures: tuple[FailureGroup, ...] = ()

    @property
    def stopped_at_seed(self) -> bool:
        """The crawl handled its seed alone because every link was out of scope."""
        return self.indexed + self.errors <= 1 and self.out_of_scope > 0

    def to_dict(self) -> dict[str, object]:
        """The result as JSON-ready values (``--json``)."""
        out = {name: getattr(self, name) for name in self.__slots__}
        out["failures"] = [f.to_dict() for f in self.failures]
        return out


def site_files(index: WebIndex) -> SiteFiles:
    """The texts and packs beside ``index``'s store."""
    return SiteFiles(open_backend(index.location))


def default_broker(index: WebIndex) -> Broker:
    """The embedded broker of ``index``'s store: ``_crawl/queue.sqlite`` in its
    private local folder."""
    folder: Path = open_backend(index.location).local_folder("_crawl")
    return SqliteBroker(folder / "queue.sqlite")


def _broker(index: WebIndex, broker: Broker | str | None) -> Broker:
    if broker is None:
        return default_broker(index)
    return open_broker(broker) if isinstance(broker, str) else broker


def build_roles(
    index: WebIndex,
    names: Sequence[str],
    *,
    broker: Broker | str | None = None,
    config: FetchConfig | None = None,
    workdir: Path | None = None,
    settle: float = 300.0,
    searcher_id: str | None = None,
    capacity_mb: int | None = None,
    heartbeat: float = 5.0,
) -> tuple[Broker, list[Role], WorkerStats]:
    """The roles ``names`` (indexer, crawler, timer, packer, orchestrator,
    searcher) on ``index``'s store. A searcher keeps its databases in
    ``workdir`` (default: the store's local folder ``_crawl/searchers``);
    the orchestrator gives up on one silent for three ``heartbeat`` s."""
    brk = _broker(index, broker)
    files = site_files(index)
    stats = WorkerStats()
    fetching = config or FetchConfig()

    def searcher() -> Searcher:
        folder = workdir or open_backend(index.location).local_folder("_crawl") / "searchers"
        return Searcher(
            brk, files, folder, searcher_id=searcher_id, heartbeat=heartbeat, capacity_mb=capacity_mb
        )

    made: dict[str, Callable[[], Role]] = {
        "indexer": lambda: Indexer(brk, index, files, config=fetching, stats=stats, settle=settle),
        "crawler": lambda: Crawler(brk, index, robots=fetching.robots_cache(), stats=stats),
        "timer": lambda: Timer(brk),
        "packer": lambda: Packer(brk, files, workdir=workdir, stats=stats),
        "orchestrator": lambda: Orchestrator(brk, files, dead_after=3 * heartbeat),
        "searcher": searcher,
    }
    assert tuple(made) == ROLES
    unknown = [n for n in names if n not in made]
    if unknown:
        raise ValueError(f"no role {unknown[0]!r}: the roles are {', '.join(ROLES)}")
    return brk, [made[n]() for n in dict.fromkeys(names)], stats


async def run_worker(
    broker: Broker,
    roles: Sequence[Role],
    stop: asyncio.Event,
    *,
    in_flight: int = 128,
    stats: WorkerStats | None = None,
    lease: float | None = None,
) -> None:
    """Run ``roles`` until ``stop`` is set, each with up to ``in_flight`` messages
    in hand, leased for ``lease`` seconds (default: each role's own)."""
    worker = Worker(broker, roles, concurrency=in_flight, stats=stats, lease=lease)
    running = asyncio.create_task(worker.run())
    await stop.wait()
    worker.stop()
    await running


def store_packs(index: WebIndex) -> LocalPacks:
    """Local copies of the published databases beside ``index``'s store, kept in
    its private local folder ``_crawl/packs``."""
    return LocalPacks(site_files(index), open_backend(index.location).local_folder("_crawl") / "packs")


def search_site(index: WebIndex, site: str, query: str, *, limit: int = 10, offset: int = 0) -> SearchPage:
    """Search the newest published database of ``site`` (copied into the store's
    local folder ``_crawl/packs`` the first time)."""
    packs = store_packs(index)
    try:
        packs.load(site)
        return packs.search(site, query, limit=limit, offset=offset)
    finally:
        packs.close()


def site_asked(text: str) -> str:
    """The site a person names to search: ``host[:port]`` as ``crawl`` printed it,
    or any URL of it (its host and port, as :func:`site_for` takes them from a
    seed); else a :class:`MessageError` that says which to give."""
    given = text.strip()
    try:
        if "://" in given:
            return site_for(given, "host")
        return check_site(given.lower())
    except (MessageError, InvalidURLError, ValueError):  # ValueError: a port that is no number
        raise MessageError(
            f"site {text!r}: give it as host[:port] (as crawl printed it) or a URL of it"
        ) from None


def site_for(seed: str, scope: Scope) -> str:
    """The site a crawl's pages are packed and searched under: the seed's host
    (registrable domain for a ``domain`` crawl), with its port if not the default."""
    port = urlsplit(seed).port
    name = domain_of(seed) if scope == "domain" else host_of(seed)
    return check_site(name if port is None else f"{name}:{port}")


async def crawl_site(
    index: WebIndex,
    seed: str,
    *,
    scope: Scope = "host",
    allow: tuple[str, ...] = (),
    max_pages: int = 1000,
    max_depth: int = 5,
    settle: float = 10.0,
    config: FetchConfig | None = None,
    broker: Broker | str | None = None,
    in_flight: int = 128,
    on_progress: Callable[[CrawlProgress], None] | None = None,
    timeout: float | None = None,
    requisites: bool = False,
    max_requisites: int = 10_000,
) -> CrawlResult:
    r"""Crawl the site of ``seed`` into ``index`` and publish its search database.

    ``config`` bounds fetches (``concurrency``, ``per_domain``); ``in_flight``
    bounds the messages each role holds at once, which is more: an indexed
    page waits for its text's batch to be written before it is acknowledged.
    With ``requisites``, what each page needs to render (stylesheets, scripts,
    images, fonts, frames, and a stylesheet's own ``url()``\ s) is recorded too,
    from any host the address policy and robots.txt allow, each once, at most
    ``max_requisites``. ``InvalidURLError`` for a seed that is not an http(s)
    URL; ``TimeoutError`` if it has not settled after ``timeout`` seconds.
    """
    start = normalise(seed)
    if start is None:
        raise InvalidURLError(seed, "a crawl starts from an http(s) URL", field="seed")
    site = site_for(start, scope)
    owned = broker is None or isinstance(broker, str)
    files = site_files(index)
    brk, roles, stats = build_roles(
        index, ["indexer", "crawler", "timer", "packer"], broker=broker, config=config, settle=settle
    )
    worker = Worker(brk, roles, concurrency=in_flight, stats=stats, poll=0.1)
    before = await asyncio.to_thread(files.latest, site)
    dead_before = await asyncio.to_thread(_dead, brk)
    spec = CrawlSpec(
        id=uuid.uuid4().hex,
        seed=start,
        scope=scope,
        allow=allow,
        max_pages=max_pages,
        max_depth=max_depth,
        settle=settle,
        requisites=requisites,
        max_requisites=max_requisites,
    )
    began = time.monotonic()
    await asyncio.to_thread(brk.send, "index", [encode(IndexCrawl(site=site, spec=spec))])
    running = asyncio.create_task(worker.run())
    indexer = next(role for role in roles if isinstance(role, Indexer))
    idle = 0  # polls in a row with nothing queued or leased on the broker
    # The queues are counted one after another: a message handed from one queue to
    # another between two counts is missed. A poll is idle only if this worker's own
    # tallies did not move since the one before either.
    tallies: tuple[int, ...] = ()
    packed_early = False
    try:
        while True:
            await asyncio.sleep(0.25)
            if running.done():
                running.result()  # a worker that stopped on its own: say why
            pending = await asyncio.to_thread(_pending, brk)
            timers = await asyncio.to_thread(brk.timers)
            elapsed = time.monotonic() - began
            if on_progress is not None:
                on_progress(
                    CrawlProgress(stats.queued, stats.fetched, stats.indexed, stats.errors, pending, elapsed)
                )
            now = (stats.queued, stats.fetched, stats.indexed, stats.errors)
            quiet = pending == 0 and now == tallies and not indexer.owes_reset(site)
            idle, tallies = (idle + 1 if quiet else 0), now
            if idle >= 2 and site in timers and not packed_early:
                # Nothing is queued or leased anywhere on the broker, and every page
                # indexed here has pushed the timer back: no page of the site can come
                # now. Settle waits for pages other workers may still bring; with none
                # left, the site is packed at once, not --settle seconds later.
                callback = encode(FullEnd(site=site, crawl=spec.id))
                await asyncio.to_thread(brk.start_timer, site, _AT_ONCE, "pack", callback)
                packed_early = True  # once: a timer that fired meanwhile is not started again
            if pending == 0 and site not in timers:
                if stats.published.get(site, 0) > (before or 0):
                    break
                # On a shared broker another worker's packer may have packed it.
                elsewhere = await asyncio.to_thread(files.latest, site)
                if elsewhere is not None and elsewhere > (before or 0):
                    stats.published[site] = elsewhere
                    stats.pages[site] = await asyncio.to_thread(_pages_in, files, site, elsewhere)
                    break
            if timeout is not None and elapsed > timeout:
                raise TimeoutError(f"the crawl of {site} had not settled after {timeout:g}s")
    finally:
        worker.stop()
        await running
        dead = _dead(brk) - dead_before
        if owned:
            brk.close()
    return CrawlResult(
        site=site,
        crawl=spec.id,
        generation=stats.published[site],
        pages=stats.pages[site],
        fetched=stats.fetched,
        errors=stats.errors,
        dead_letters=dead,
        seconds=time.monotonic() - began,
        indexed=stats.indexed,
        requisites=stats.requisites,
        requisite_errors=stats.requisite_errors,
        out_of_scope=stats.out_of_scope,
        scope_prefix=scope_prefix(start) if scope == "prefix" else None,
        failures=stats.failures.groups(),
    )


def _pages_in(files: SiteFiles, site: str, generation: int) -> int:
    with tempfile.TemporaryDirectory(prefix="wi-pack-") as tmp:
        files.download(site, generation, Path(tmp) / "pack.zst")
        decompress_pack(Path(tmp) / "pack.zst", Path(tmp) / "pack.sqlite")
        return read_pack_info(Path(tmp) / "pack.sqlite").pages


def _dead(broker: Broker) -> int:
    return sum(broker.counts(q).dead for q in _QUEUES)


def _pending(broker: Broker) -> int:
    return sum(broker.counts(q).pending for q in _QUEUES)
