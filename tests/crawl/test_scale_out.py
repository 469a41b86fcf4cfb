"""The whole pipeline scaled out, each role its own process: Redis for the queues,
an S3 store (SeaweedFS) with the shared PostgreSQL buffer, three indexer/crawler
processes (one SIGKILLed mid-crawl), a timer, a packer, an orchestrator and two
searchers (the one serving the site stopped afterwards)."""

from __future__ import annotations

import signal
import time
import uuid
from contextlib import closing
from pathlib import Path

import pytest

from tests.crawl.workers import Workers, crawl_then_kill, published_urls
from tests.servers import Postgres, Redis, SeaweedFS
from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, crawl_site_routes
from web_index.crawl import (
    Results,
    Search,
    decode,
    encode,
    open_broker,
    site_files,
)
from web_index.crawl.queues import Broker
from web_index.models import Page, SimplePageQuery

PAGES = 2000
QUEUES = ("index", "crawl", "timer", "pack", "orch")


def ask(broker: Broker, site: str, query: str, timeout: float = 20.0) -> Results | None:
    """One search through the orchestrator, and the answer with the searcher that
    gave it; ``None`` if none came (it was routed to a searcher that has stopped)."""
    reply = f"reply.{uuid.uuid4().hex}"
    question = Search(id="q", site=site, query=query, reply_to=reply, deadline=time.time() + timeout)
    broker.send("orch", [encode(question)])
    got = broker.receive(reply, lease=5, wait=timeout)
    if not got:
        return None
    broker.ack(got[0])
    answer = decode(got[0].body)
    assert isinstance(answer, Results)
    return answer


@pytest.mark.slow
def test_scaled_out_pipeline_on_redis_s3_and_postgres(
    redis_server: Redis, seaweed: SeaweedFS, postgres: Postgres, tmp_path: Path
) -> None:
    store, buffer, queue = seaweed.new_store(), postgres.new_database(), redis_server.url()
    WebIndex(store, buffer=buffer).close()
    hits: dict[str, int] = {}
    common = ("--store", store, "--buffer", buffer, "--queue", queue, "--allow-loopback")
    with (
        LocalServer(crawl_site_routes(PAGES, hits=hits)) as site,
        Workers(tmp_path, *common) as workers,
        closing(open_broker(queue)) as broker,
    ):
        crawlers = [workers.start("indexer", "crawler", extra=("--lease", "3")) for _ in range(3)]
        searchers = {
            sid: workers.start(
                "searcher", extra=("--searcher-id", sid, "--heartbeat", "0.5", "--workdir", str(tmp_path))
            )
            for sid in ("s1", "s2")
        }
        workers.start("timer")
        workers.start("packer")
        workers.start("orchestrator", extra=("--heartbeat", "0.5"))
        deadline = time.monotonic() + 300
        name = crawl_then_kill(broker, site, hits, crawlers[0], pages=PAGES, settle=3.0, deadline=deadline)

        with WebIndex(store, buffer=buffer, read_only=True) as index:
            files = site_files(index)
            urls: list[str] = []
            while True:
                assert time.monotonic() < deadline, f"not settled: {len(hits)} paths requested"
                pending = sum(broker.counts(q).pending for q in QUEUES[:4])
                if pending == 0 and not broker.timers():
                    urls = published_urls(files, name, tmp_path)
                    if len(urls) >= PAGES:
                        break
                time.sleep(0.5)
            # Every reachable page once; nothing out of scope or disallowed was asked for.
            assert sorted(urls) == sorted(site.url(f"/p/{i}") for i in range(PAGES))
            assert sorted({p for p in hits if not p.startswith("/p/")}) == ["/robots.txt"]
            # Every page is in the store (the shared buffer) as a fetch of its own.
            stored = index.query([SimplePageQuery(url=site.url(f"/p/{i}")) for i in range(PAGES)])
            assert all(isinstance(p, Page) and p.final.status_code == 200 for p in stored)

        # Searches are routed to the searcher holding the site ...
        first = ask(broker, name, "token123x")
        assert (
            first is not None and first.page is not None and first.page.hits[0].url == site.url("/p/123")
        ), first
        holder = first.searcher
        assert holder in searchers
        # ... and, once that searcher stops, to the other (the searches routed
        # to it before its silence was noticed go unanswered: askers time out).
        searchers[holder].send_signal(signal.SIGTERM)
        assert searchers[holder].wait(30) == 0
        other = next(s for s in searchers if s != holder)
        while True:
            assert time.monotonic() < deadline, "the site never moved to the other searcher"
            answer = ask(broker, name, "token1999x", timeout=3.0)
            if answer is not None and answer.searcher == other:
                break
        assert answer.page is not None and answer.page.hits[0].url == site.url("/p/1999")
        assert all(broker.counts(q).dead == 0 for q in QUEUES), [broker.dead_letters(q) for q in QUEUES]
