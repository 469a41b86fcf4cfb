"""One rule for a page of search hits, on every path: the pack read directly, the
store's packs, a routed search on both brokers (router, command, HTTP) and
``GET /search`` answer the same query with the same hits in the same order for
every limit and offset accepted, and refuse the same ones (issue 37: a routed
``--limit 1000`` used to answer 100 hits in silence)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.crawl.test_search_routing import orchestrator, searcher, until
from tests.factories import publish_pack
from tests.server.serving import serving
from web_index import WebIndex
from web_index.cli import app
from web_index.crawl import SearchRouter, open_broker, search_site, site_files
from web_index.search import MAX_LIMIT, MAX_OFFSET, SearchPage, decompress_pack, search_pack

SITE = "many.test"
PAGES = MAX_LIMIT + 150  # more matches than the largest page
# Repetition makes scores differ, and many pages tie: ties are where two paths
# could order hits differently.
WORDS = {f"p{i:04d}": "common " * (1 + i % 7) + f"word{i}" for i in range(PAGES)}
WINDOWS = [
    (MAX_LIMIT, 0),
    (MAX_LIMIT, MAX_LIMIT),
    (MAX_LIMIT, 150),
    (1, PAGES - 1),
    (10, 995),
    (7, MAX_OFFSET),
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WebIndex]:
    with WebIndex(tmp_path / "store") as index:
        publish_pack(site_files(index), tmp_path, SITE, 1, WORDS)
        yield index


@contextmanager
def searchers(store: WebIndex, queue: str, tmp: Path) -> Iterator[None]:
    """An orchestrator and a searcher on ``queue``, in a thread of their own,
    serving the store's packs until the block ends."""
    broker = open_broker(queue)
    files = site_files(store)
    ready, stop = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    async def main() -> None:
        (ow, orch), (sw, held) = orchestrator(broker, files), searcher(broker, files, tmp, "s1")
        tasks = [asyncio.create_task(w.run()) for w in (ow, sw)]
        try:
            await until(lambda: orch.placement.holders(SITE) != [] and held.packs.held().get(SITE) == 1, 30)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)
        finally:
            for w in (ow, sw):
                w.stop()
            await asyncio.gather(*tasks)

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as exc:
            failed.append(exc)
        ready.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        assert ready.wait(60) and not failed, failed
        yield
    finally:
        stop.set()
        thread.join(30)
        broker.close()
    assert not failed, failed


def rows(page: SearchPage) -> list[tuple[str, str, str, float]]:
    return [(h.url, h.title, h.snippet, h.score) for h in page.hits]


def test_every_search_path_answers_every_page_alike(store: WebIndex, broker_url: str, tmp_path: Path) -> None:
    queue = broker_url
    files = site_files(store)
    files.download(SITE, 1, tmp_path / "pack.zst")
    decompress_pack(tmp_path / "pack.zst", tmp_path / "pack.sqlite")
    direct = {w: search_pack(tmp_path / "pack.sqlite", "common", limit=w[0], offset=w[1]) for w in WINDOWS}
    # Paged through, the largest pages list every match once, in one order.
    everything = [*rows(direct[(MAX_LIMIT, 0)]), *rows(direct[(MAX_LIMIT, MAX_LIMIT)])]
    assert len({r[0] for r in everything}) == len(everything) == PAGES
    assert rows(direct[(MAX_LIMIT, 150)]) == everything[150 : 150 + MAX_LIMIT]
    assert rows(direct[(10, 995)]) == everything[995:1005]
    assert rows(direct[(1, PAGES - 1)]) == everything[-1:]
    assert direct[(7, MAX_OFFSET)].hits == () and direct[(7, MAX_OFFSET)].total == PAGES

    runner = CliRunner()
    with searchers(store, queue, tmp_path), serving(store) as local, serving(store, queue=queue) as routed:
        router = SearchRouter(open_broker(queue), timeout=20)
        try:
            for (limit, offset), want in direct.items():
                assert rows(search_site(store, SITE, "common", limit=limit, offset=offset)) == rows(want)
                assert rows(router.search(SITE, "common", limit=limit, offset=offset)) == rows(want)
                for http in (local, routed):
                    got = http.get(
                        "/search", params={"site": SITE, "q": "common", "limit": limit, "offset": offset}
                    )
                    assert got.status_code == 200, got.text
                    body = got.json()
                    assert (body["total"], body["limit"], body["offset"]) == (PAGES, limit, offset)
                    assert [(h["url"], h["title"], h["snippet"], h["score"]) for h in body["hits"]] == rows(
                        want
                    )
                for extra in ([], ["--queue", queue, "--timeout", "20"]):
                    args = ["search", SITE, "common", "--store", str(store.location), "--json"]
                    done = runner.invoke(app, [*args, "--limit", str(limit), "--offset", str(offset), *extra])
                    assert done.exit_code == (0 if want.hits else 1), done.output
                    printed = [json.loads(line) for line in done.stdout.splitlines()]
                    assert [p["url"] for p in printed] == [h.url for h in want.hits]
        finally:
            router.close()
            router.broker.close()


def test_a_page_past_the_rule_is_refused_alike_everywhere(store: WebIndex, tmp_path: Path) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.sqlite'}"
    runner = CliRunner()
    base = ["search", SITE, "common", "--store", str(store.location)]
    for flag, value in (("--limit", MAX_LIMIT + 1), ("--limit", 0), ("--offset", MAX_OFFSET + 1)):
        for extra in ([], ["--queue", queue, "--timeout", "0.5"]):
            done = runner.invoke(app, [*base, flag, str(value), *extra])
            assert done.exit_code == 2, done.output
            assert f"Invalid value for '{flag}'" in done.stderr and "Traceback" not in done.output
    with serving(store) as http:
        for name, value, bounds in (
            ("limit", MAX_LIMIT + 1, (1, MAX_LIMIT)),
            ("offset", MAX_OFFSET + 1, (0, MAX_OFFSET)),
        ):
            got = http.get("/search", params={"site": SITE, "q": "common", name: value})
            assert got.status_code == 400 and got.json()["parameter"] == name
            assert f"is not between {bounds[0]} and {bounds[1]}" in got.json()["error"]
    router = SearchRouter(open_broker(queue), timeout=0.5)
    try:
        with pytest.raises(ValueError, match=f"limit must be 1 to {MAX_LIMIT}"):
            router.search(SITE, "common", limit=MAX_LIMIT + 1)
        with pytest.raises(ValueError, match=f"offset must be 0 to {MAX_OFFSET}"):
            router.search(SITE, "common", offset=MAX_OFFSET + 1)
    finally:
        router.close()
        router.broker.close()
    with pytest.raises(ValueError, match=f"offset must be 0 to {MAX_OFFSET}"):
        search_site(store, SITE, "common", offset=MAX_OFFSET + 1)
