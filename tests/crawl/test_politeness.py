"""Politeness shared by every indexer: with a delay (or a robots.txt Crawl-delay),
the starts of requests to a host are spaced by it across all the indexers on one
broker, not by it within each."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, crawl_site_routes
from web_index.crawl import Index, Indexer, SiteFiles, Worker, encode
from web_index.crawl.queues import SqliteBroker
from web_index.fetch import AddressPolicy, FetchConfig
from web_index.models import AttemptMetadata, RecordType, SimplePageQuery
from web_index.storage import LocalBackend

DELAY = 0.25
PAGES = 12


def timed(
    routes: dict[str, Callable[[BaseHTTPRequestHandler], None]], starts: list[float]
) -> dict[str, Callable[[BaseHTTPRequestHandler], None]]:
    lock = threading.Lock()

    def wrap(handler: Callable[[BaseHTTPRequestHandler], None]) -> Callable[[BaseHTTPRequestHandler], None]:
        def timed_handler(r: BaseHTTPRequestHandler) -> None:
            if r.path.startswith("/p/"):
                with lock:
                    starts.append(time.monotonic())
            handler(r)

        return timed_handler

    return {path: wrap(h) for path, h in routes.items()}


def test_two_indexers_space_their_requests_to_a_host_by_one_delay(tmp_path: Path) -> None:
    starts: list[float] = []
    broker = SqliteBroker(tmp_path / "q.sqlite", poll=0.01)
    config = FetchConfig(address_policy=AddressPolicy(allow_loopback=True), per_domain=8, domain_delay=DELAY)
    with WebIndex(tmp_path / "store") as index, LocalServer(timed(crawl_site_routes(PAGES), starts)) as site:
        files = SiteFiles(LocalBackend(tmp_path / "store"))

        async def main() -> None:
            workers = [
                Worker(
                    broker,
                    [Indexer(broker, index, files, config=config, settle=30)],
                    poll=0.02,
                    concurrency=PAGES // 2,
                ),
                Worker(
                    broker,
                    [Indexer(broker, index, files, config=config, settle=30)],
                    poll=0.02,
                    concurrency=PAGES // 2,
                ),
            ]
            tasks = [asyncio.create_task(w.run()) for w in workers]
            name = f"127.0.0.1:{site.port}"
            broker.send("index", [encode(Index(site=name, url=site.url(f"/p/{i}"))) for i in range(PAGES)])
            # Until every attempt is stored (a fetch seen by the server may not be yet).
            deadline = time.monotonic() + 60
            while len(starts) < PAGES or not all(index.presence(queries)):
                assert time.monotonic() < deadline, f"{len(starts)} pages fetched"
                await asyncio.sleep(0.05)
            for w in workers:
                w.stop()
            await asyncio.gather(*tasks)

        # Where the pacing is: each attempt's start as its fetcher recorded it (the
        # store's attempt time), not its arrival at the server, which a loaded
        # machine delays by more than the test could allow for.
        queries = [
            SimplePageQuery(url=site.url(f"/p/{i}"), type=RecordType.GET_METADATA) for i in range(PAGES)
        ]
        asyncio.run(main())
        attempts = index.query(queries)
    assert len(starts) == PAGES
    began = sorted(
        a.timestamp.timestamp() for a in attempts if isinstance(a, AttemptMetadata) and a.timestamp
    )
    assert len(began) == PAGES
    gaps = [b - a for a, b in itertools.pairwise(began)]
    # Each indexer pacing itself alone (both have all the pages to hand) would
    # take about half the span, and every other gap would be ~0. A start the
    # loop records late (~150 ms seen on a loaded machine) lengthens one gap and
    # shortens the next by as much: so pairs of gaps are judged, not single ones.
    assert began[-1] - began[0] >= (PAGES - 1) * DELAY * 0.8, gaps
    assert min(c - a for a, c in zip(began, began[2:], strict=False)) >= 2 * DELAY * 0.75, gaps
    assert sorted(gaps)[len(gaps) // 2] >= DELAY * 0.9, gaps
    broker.close()
