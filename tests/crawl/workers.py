"""Worker processes of one test (``web-index worker``), and what they published."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import TracebackType

from web_index.cli._sample_site import LocalServer
from web_index.crawl import CrawlSpec, IndexCrawl, SiteFiles, encode
from web_index.crawl.queues import Broker
from web_index.search import decompress_pack

CLI = str(Path(sys.executable).parent / "web-index")


class Workers:
    """Starts ``web-index worker`` processes with the options all of them share.

    Each logs to a file of its own in ``logs`` (a file, not a pipe nobody
    reads: a worker that logs a lot must not block on a full pipe). Leaving
    the ``with`` block stops every one still running (SIGTERM, then SIGKILL
    after ``grace`` seconds) and, if the block succeeded, fails on any log
    that holds a traceback.
    """

    def __init__(self, logs: Path, *common: str, grace: float = 30) -> None:
        self.logs = logs
        self.common = common
        self.grace = grace
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *roles: str, extra: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        args = [CLI, "worker", *self.common, "--log-level", "info"]
        for role in roles:
            args += ["--role", role]
        with (self.logs / f"{'-'.join(roles)}-{uuid.uuid4().hex[:6]}.log").open("wb") as log:
            proc = subprocess.Popen([*args, *extra], stdout=subprocess.DEVNULL, stderr=log)
        self.procs.append(proc)
        return proc

    def __enter__(self) -> Workers:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(self.grace)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if exc_type is None:
            for log in self.logs.glob("*.log"):
                assert b"Traceback" not in log.read_bytes(), log.read_text()[-3000:]


def published_urls(files: SiteFiles, site: str, folder: Path) -> list[str]:
    """The urls in the newest pack published for ``site`` (none yet: ``[]``)."""
    generation = files.latest(site)
    if generation is None:
        return []
    files.download(site, generation, folder / "p.zst")
    decompress_pack(folder / "p.zst", folder / f"p{generation}.sqlite")
    with sqlite3.connect(folder / f"p{generation}.sqlite") as db:
        return [u for (u,) in db.execute("SELECT url FROM pages")]


def crawl_then_kill(
    broker: Broker,
    site: LocalServer,
    hits: dict[str, int],
    victim: subprocess.Popen[bytes],
    *,
    pages: int,
    settle: float,
    deadline: float,
) -> str:
    """Queue a crawl of ``site`` from ``/p/0`` and, once a quarter of its ``pages``
    were asked for, SIGKILL ``victim`` (mid-crawl, messages in hand); the site's name."""
    name = f"127.0.0.1:{site.port}"
    spec = CrawlSpec(
        id=uuid.uuid4().hex, seed=site.url("/p/0"), max_pages=10_000, max_depth=10_000, settle=settle
    )
    broker.send("index", [encode(IndexCrawl(site=name, spec=spec))])
    while sum(1 for p in hits if p.startswith("/p/")) < pages // 4:
        assert time.monotonic() < deadline, "the crawl did not start"
        time.sleep(0.1)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    return name
