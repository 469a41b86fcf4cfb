"""Roles in separate processes on Redis: an indexer SIGKILLed mid-crawl loses nothing."""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

import pytest

from tests.crawl.workers import Workers, crawl_then_kill, published_urls
from tests.servers import Redis
from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, crawl_site_routes
from web_index.crawl import open_broker, search_site, site_files

PAGES = 300


@pytest.mark.slow
def test_workers_on_redis_survive_a_killed_indexer(redis_server: Redis, tmp_path: Path) -> None:
    store = tmp_path / "store"
    WebIndex(store).close()
    queue = redis_server.url()
    hits: dict[str, int] = {}
    common = ("--store", str(store), "--queue", queue, "--allow-loopback", "--lease", "3")
    with (
        LocalServer(crawl_site_routes(PAGES, hits=hits)) as site,
        Workers(tmp_path, *common, grace=20) as workers,
        closing(open_broker(queue)) as broker,
    ):
        crawlers = [workers.start("indexer", "crawler") for _ in range(3)]
        workers.start("timer", "packer")
        deadline = time.monotonic() + 120
        name = crawl_then_kill(broker, site, hits, crawlers[0], pages=PAGES, settle=2.0, deadline=deadline)
        with WebIndex(store, read_only=True) as index:
            files = site_files(index)
            urls: list[str] = []
            while True:
                assert time.monotonic() < deadline, f"not settled: {len(hits)} paths requested"
                pending = sum(broker.counts(q).pending for q in ("index", "crawl", "timer", "pack"))
                if pending == 0 and not broker.timers():
                    urls = published_urls(files, name, tmp_path)
                    if len(urls) == PAGES:
                        break
                time.sleep(0.5)
            assert sorted(urls) == sorted(site.url(f"/p/{i}") for i in range(PAGES))  # each exactly once
            assert not [p for p in hits if not p.startswith(("/p/", "/robots.txt"))]
            page = search_site(index, name, "token123x")
            assert page.hits[0].url == site.url("/p/123")
        assert all(broker.counts(q).dead == 0 for q in ("index", "crawl", "timer", "pack"))
