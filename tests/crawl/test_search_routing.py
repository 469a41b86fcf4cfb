"""Searches routed by the orchestrator to searchers over a real broker: placement,
reloads on ``update`` while searches run, a searcher that stops, an orchestrator
that restarts, and the answers when nothing can serve a site."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.factories import publish_pack as publish
from web_index.crawl import (
    Heartbeat,
    Orchestrator,
    Searcher,
    SearchRouter,
    SiteFiles,
    Update,
    Worker,
    decode,
    encode,
)
from web_index.crawl.queues import Broker, SqliteBroker
from web_index.errors import SearchUnavailableError, SiteNotFoundError
from web_index.storage import LocalBackend

HEARTBEAT = 0.2


@asynccontextmanager
async def running(*workers: Worker) -> AsyncIterator[None]:
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        yield
    finally:
        for w in workers:
            w.stop()
        await asyncio.gather(*tasks)


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


def orchestrator(broker: Broker, files: SiteFiles) -> tuple[Worker, Orchestrator]:
    role = Orchestrator(broker, files, dead_after=3 * HEARTBEAT)
    return Worker(broker, [role], poll=0.05, tick_every=0.05), role


def searcher(broker: Broker, files: SiteFiles, tmp: Path, name: str, **kw: int) -> tuple[Worker, Searcher]:
    role = Searcher(broker, files, tmp / "searchers", searcher_id=name, heartbeat=HEARTBEAT, **kw)  # type: ignore[arg-type]
    return Worker(broker, [role], poll=0.05, tick_every=0.05), role


@pytest.fixture
def setup(tmp_path: Path) -> tuple[SqliteBroker, SiteFiles]:
    broker = SqliteBroker(tmp_path / "q.sqlite", poll=0.01)
    return broker, SiteFiles(LocalBackend(tmp_path / "store"))


def test_a_search_reaches_the_searcher_holding_the_site_and_follows_updates(
    setup: tuple[SqliteBroker, SiteFiles], tmp_path: Path
) -> None:
    broker, files = setup
    publish(files, tmp_path, "a.test", 1, {"one": "alpha apples", "two": "beta bananas"})
    publish(files, tmp_path, "b.test", 1, {"one": "gamma grapes"})

    async def main() -> None:
        (ow, orch), (w1, s1), (w2, s2) = (
            orchestrator(broker, files),
            searcher(broker, files, tmp_path, "s1"),
            searcher(broker, files, tmp_path, "s2"),
        )
        router = SearchRouter(broker, timeout=5)
        async with running(ow, w1, w2):
            # Discovered at the cold start, each site placed on one searcher.
            await until(lambda: len(orch.placement.searchers) == 2)
            await until(lambda: all(len(orch.placement.holders(s)) == 1 for s in ("a.test", "b.test")))
            page = await router.asearch("a.test", "apples")
            assert [h.url for h in page.hits] == ["http://a.test/one"]
            page = await router.asearch("b.test", "grapes")
            assert [h.url for h in page.hits] == ["http://b.test/one"]
            holder = orch.placement.holders("a.test")[0]
            held_by = {"s1": s1, "s2": s2}[holder]
            await until(lambda: held_by.packs.held().get("a.test") == 1)

            # A new generation: searches keep being answered while the holder reloads.
            failures: list[BaseException] = []
            stop = threading.Event()

            def hammer() -> None:
                while not stop.is_set():
                    try:
                        router.search("a.test", "apples OR cherries")
                    except BaseException as exc:
                        failures.append(exc)

            threads = [threading.Thread(target=hammer) for _ in range(4)]
            for t in threads:
                t.start()
            publish(files, tmp_path, "a.test", 2, {"one": "alpha apples", "three": "cherries"})
            broker.send("orch", [encode(Update(site="a.test", generation=2, size_mb=0.1, pages=2))])
            await until(lambda: held_by.packs.held().get("a.test") == 2)
            await asyncio.sleep(0.3)
            stop.set()
            for t in threads:
                await asyncio.to_thread(t.join)
            assert failures == []
            page = await router.asearch("a.test", "cherries")
            assert [h.url for h in page.hits] == ["http://a.test/three"]
            assert orch.placement.holders("a.test") == [holder]  # reloaded in place, not moved
        router.close()

    asyncio.run(main())


def test_a_silent_searchers_sites_move_and_an_orchestrator_restart_relearns_them(
    setup: tuple[SqliteBroker, SiteFiles], tmp_path: Path
) -> None:
    broker, files = setup
    publish(files, tmp_path, "a.test", 1, {"one": "alpha apples"})

    async def main() -> None:
        (ow, orch), (w1, _), (w2, s2) = (
            orchestrator(broker, files),
            searcher(broker, files, tmp_path, "s1", capacity_mb=100),
            searcher(broker, files, tmp_path, "s2", capacity_mb=50),
        )
        router = SearchRouter(broker, timeout=5)
        t1, t2 = asyncio.create_task(w1.run()), asyncio.create_task(w2.run())
        async with running(ow):
            await until(lambda: orch.placement.holders("a.test") == ["s1"])  # the one with more room
            assert (await router.asearch("a.test", "apples")).total == 1
            w1.stop()
            await t1  # s1 stops heart-beating
            await until(lambda: orch.placement.holders("a.test") == ["s2"])
            await until(lambda: "a.test" in s2.packs.held())
            before = s2.answered
            assert (await router.asearch("a.test", "apples")).total == 1
            assert s2.answered == before + 1
        # A new orchestrator knows nothing; s2's heartbeat tells it, and it loads nothing twice.
        (ow2, orch2) = orchestrator(broker, files)
        async with running(ow2):
            await until(lambda: orch2.placement.holders("a.test") == ["s2"])
            await asyncio.sleep(5 * HEARTBEAT)
            assert orch2.placement.holders("a.test") == ["s2"]
            assert (await router.asearch("a.test", "apples")).hits[0].url == "http://a.test/one"
        w2.stop()
        await t2
        router.close()

    asyncio.run(main())


def test_what_a_search_says_when_nothing_can_serve_it(
    setup: tuple[SqliteBroker, SiteFiles], tmp_path: Path
) -> None:
    broker, files = setup
    publish(files, tmp_path, "a.test", 1, {"one": "alpha apples"})

    async def main() -> None:
        router = SearchRouter(broker, timeout=1)
        with pytest.raises(SearchUnavailableError, match=r"no searcher answered for 'a\.test' within 1s"):
            await router.asearch("a.test", "apples")  # no orchestrator is running
        ow, _ = orchestrator(broker, files)
        async with running(ow):
            with pytest.raises(SiteNotFoundError, match=r"no search database is published for 'z\.test'"):
                await router.asearch("z.test", "apples")
            with pytest.raises(SearchUnavailableError, match="no searcher is up"):
                await router.asearch("a.test", "apples")
            w, _ = searcher(broker, files, tmp_path, "tiny", capacity_mb=0)
            async with running(w):
                await asyncio.sleep(3 * HEARTBEAT)
                with pytest.raises(SearchUnavailableError, match=r"no searcher has room for 'a\.test'"):
                    await router.asearch("a.test", "apples")
        router.close()
        # Nothing was left behind: every question and answer was acknowledged
        # (a searcher's last heartbeat may land after the orchestrator stopped).
        left = [decode(d.body) for d in broker.receive("orch", limit=100, lease=1)]
        assert [m for m in left if not isinstance(m, Heartbeat)] == []
        assert broker.counts(router.reply_to).pending == 0

    asyncio.run(main())
