"""Roles in separate processes on Redis: an indexer SIGKILLed mid-crawl loses nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.servers import Redis
from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, crawl_site_routes
from web_index.crawl import CrawlSpec, IndexCrawl, encode, open_broker, search_site, site_files
from web_index.search import decompress_pack

PAGES = 300


def worker(store: Path, queue: str, *roles: str) -> subprocess.Popen[bytes]:
    args = [str(Path(sys.executable).parent / "web-index"), "worker", "--store", str(store), "--queue", queue]
    for role in roles:
        args += ["--role", role]
    # A file, not a pipe nobody reads: a worker that logs a lot must not block on a full pipe.
    log = (store.parent / f"{'-'.join(roles)}-{uuid.uuid4().hex[:6]}.log").open("wb")
    return subprocess.Popen(
        [*args, "--allow-loopback", "--lease", "3", "--log-level", "info"],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )


@pytest.mark.slow
def test_workers_on_redis_survive_a_killed_indexer(redis_server: Redis, tmp_path: Path) -> None:
    store = tmp_path / "store"
    WebIndex(store).close()
    queue = redis_server.url()
    hits: dict[str, int] = {}
    with LocalServer(crawl_site_routes(PAGES, hits=hits)) as site:
        procs = [worker(store, queue, "indexer", "crawler") for _ in range(3)]
        procs.append(worker(store, queue, "timer", "packer"))
        broker = open_broker(queue)
        try:
            name = f"127.0.0.1:{site.port}"
            spec = CrawlSpec(
                id=uuid.uuid4().hex, seed=site.url("/p/0"), max_pages=10_000, max_depth=1000, settle=2.0
            )
            broker.send("index", [encode(IndexCrawl(site=name, spec=spec))])
            deadline = time.monotonic() + 120
            while sum(1 for p in hits if p.startswith("/p/")) < PAGES // 4:
                assert time.monotonic() < deadline, "the crawl did not start"
                time.sleep(0.1)
            os.kill(procs[0].pid, signal.SIGKILL)
            procs[0].wait()
            files = None
            with WebIndex(store, read_only=True) as index:
                files = site_files(index)
                while True:
                    assert time.monotonic() < deadline, f"not settled: {hits and len(hits)} paths requested"
                    pending = sum(broker.counts(q).pending for q in ("index", "crawl", "timer", "pack"))
                    if pending == 0 and not broker.timers() and files.latest(name):
                        gen = files.latest(name)
                        assert gen is not None
                        files.download(name, gen, tmp_path / "p.zst")
                        decompress_pack(tmp_path / "p.zst", tmp_path / f"p{gen}.sqlite")
                        with sqlite3.connect(tmp_path / f"p{gen}.sqlite") as db:
                            urls = [u for (u,) in db.execute("SELECT url FROM pages")]
                        if len(urls) == PAGES:
                            break
                    time.sleep(0.5)
                assert sorted(urls) == sorted(site.url(f"/p/{i}") for i in range(PAGES))  # each exactly once
                assert not [p for p in hits if not p.startswith(("/p/", "/robots.txt"))]
                page = search_site(index, name, "token123x")
                assert page.hits[0].url == site.url("/p/123")
            assert all(broker.counts(q).dead == 0 for q in ("index", "crawl", "timer", "pack"))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
            broker.close()
    for log in tmp_path.glob("*.log"):
        assert b"Traceback" not in log.read_bytes(), log.read_text()[-3000:]
