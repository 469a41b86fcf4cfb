"""Crawl pages/s against Scrapy, pack rate and search latency over HTTP, in one run.

    .venv/bin/python bench/crawl_bench.py [--pages 10000] [--pack-pages 100000] [--queries 1000]

1. Crawl the generated site of ``crawl_site_routes`` (served by ``LocalServer`` in its own process,
   which counts and timestamps every request) with ``web-index crawl`` (one process), with
   ``--workers`` ``web-index worker --role indexer --role crawler`` processes plus a timer+packer,
   each on a SQLite and on a Redis broker, and with a plain Scrapy spider (robots.txt obeyed, links
   followed within the host), plain and extracting each page's text with web-index's ``extract``.
   Pages/s: distinct pages served / (last page served - first request served), from the server.
2. Pack ``--pack-pages`` synthetic texts and search them ``--queries`` times over HTTP, next to a
   PackReader and the bare FTS5 query, directly and through an orchestrator + searcher on each broker
   (``serve --queue``): bench/search_bench.py. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

import search_bench
import web_index
from _procs import CLI, TICK, busy, free_port, stop
from web_index import WebIndex, __version__
from web_index.crawl import CrawlSpec, IndexCrawl, encode, open_broker, site_files
from web_index.search import decompress_pack, read_pack_info

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "crawl_bench.json"


def serve_site(pages: int, port: int) -> None:
    """The crawl site, plus ``/_bench/stats`` (counts, times, CPU) and ``/_bench/reset``."""
    from web_index.cli._sample_site import Handler, LocalServer, crawl_site_routes, reply

    lock, seen, s = threading.Lock(), set[str](), dict[str, float]()

    def reset() -> None:
        seen.clear()
        s.update(requests=0, robots=0, private=0, first=0.0, last=0.0, cpu=time.process_time())

    def timed(handler: Handler) -> Handler:
        def run(r: Any) -> None:
            handler(r)
            path, now = r.path.split("?", 1)[0], time.time()
            with lock:
                s["first"] = s["first"] or now
                s["requests"] += 1
                s["robots"] += path == "/robots.txt"
                s["private"] += path.startswith("/private/")
                if path.startswith("/p/"):
                    seen.add(path)
                    s["last"] = now

        return run

    def stats(r: Any) -> None:
        with lock:
            body = {**s, "pages": len(seen), "cpu": time.process_time() - s["cpu"]}
        reply(r, 200, json.dumps(body), content_type="application/json")

    def do_reset(r: Any) -> None:
        with lock:
            reset()
        reply(r, 200, "{}", content_type="application/json")

    reset()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # for sigwait, in every thread
    routes = {k: timed(v) for k, v in crawl_site_routes(pages).items()}
    server = LocalServer({**routes, "/_bench/stats": stats, "/_bench/reset": do_reset}, port=port)
    server.start()
    print(server.base_url, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    server.stop()


def scrapy_crawl(seed: str, concurrency: int, extract_text: bool) -> None:
    """A plain Scrapy spider over the site (its own process: a Twisted reactor cannot restart)."""
    from scrapy import Spider
    from scrapy.crawler import CrawlerProcess
    from scrapy.http import Response

    from web_index.crawl import extract

    class SiteSpider(Spider):
        name = "site"
        allowed_domains = ("127.0.0.1",)
        start_urls = (seed,)

        def parse(self, response: Response, **kwargs: Any) -> Any:
            if extract_text:  # web-index's own extraction (resiliparse), the text dropped
                extract(response.body, response.headers.get("Content-Type", b"").decode(), response.url)
            for href in response.css("a::attr(href)").getall():
                yield response.follow(href, self.parse)

    process = CrawlerProcess({
        "CONCURRENT_REQUESTS": concurrency, "CONCURRENT_REQUESTS_PER_DOMAIN": concurrency,
        "ROBOTSTXT_OBEY": True, "LOG_LEVEL": "WARNING", "AUTOTHROTTLE_ENABLED": False, "DEPTH_LIMIT": 0,
        "DOWNLOAD_DELAY": 0, "HTTPCACHE_ENABLED": False, "TELNETCONSOLE_ENABLED": False,
    })  # fmt: skip
    crawler = process.create_crawler(SiteSpider)
    process.crawl(crawler)
    process.start()
    got = crawler.stats.get_stats() if crawler.stats else {}
    keys = ("response_received_count", "robotstxt/forbidden", "offsite/filtered", "dupefilter/filtered")
    print(json.dumps({k: got.get(k, 0) for k in keys}))


class Site:
    """The site server's process, and its counters."""

    def __init__(self, pages: int) -> None:
        self.pages, port = pages, free_port()
        args = [sys.executable, __file__, "--serve-site", str(pages), str(port)]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.base = self.proc.stdout.readline().strip()
        self.host = self.base.removeprefix("http://")
        self.client = httpx.Client(base_url=self.base, timeout=10)

    def reset(self) -> None:
        self.client.get("/_bench/reset").raise_for_status()

    def stats(self) -> dict[str, float]:
        return dict(self.client.get("/_bench/stats").json())

    def capacity(self, n: int, clients: int) -> dict[str, float]:
        """Pages/s served to ``clients`` threads of this process, a keep-alive httpx.Client each."""

        def one(k: int) -> None:
            with httpx.Client(base_url=self.base) as client:
                for i in range(k, n, clients):
                    client.get(f"/p/{i}").raise_for_status()

        self.reset()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(one, range(clients)))
        st = self.stats()
        return {"pages_per_s": round(n / (st["last"] - st["first"])), "server_cpu_ms_per_page": cpu_ms(st)}

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        self.proc.wait(10)


def cpu_ms(st: dict[str, float]) -> float:
    return round(1000 * st["cpu"] / max(1.0, st["requests"]), 3)


def cpu_of(pids: list[int], last: dict[int, float]) -> dict[int, float]:
    """user + system CPU seconds of each process (the last reading for one that has exited)."""
    out = dict(last)
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / TICK
        except (OSError, IndexError):
            pass
    return out


def watch(site: Site, procs: list[subprocess.Popen[Any]], also: tuple[int, ...] = ()) -> dict[str, Any]:
    """Poll the site until every page was served; the figures, with the CPU seconds of the crawlers
    (and ``also``: redis-server) and of everything else, from the first request to the last page."""
    pids, cpu, cpu0, busy0 = [*(p.pid for p in procs), *also], dict[int, float](), 0.0, 0.0
    got, progress = 0, time.time()
    while True:
        st, cpu = site.stats(), cpu_of(pids, cpu)
        if not cpu0 and st["first"]:
            cpu0, busy0 = sum(cpu.values()), busy() - st["cpu"]
        if st["pages"] >= site.pages or all(p.poll() is not None for p in procs):
            break
        if st["pages"] > got:
            got, progress = int(st["pages"]), time.time()
        elif time.time() - progress > 120:
            raise RuntimeError(f"no new page for 120 s at {got} pages")
        time.sleep(0.1)
    window, cpu_s = st["last"] - st["first"], sum(cpu.values()) - cpu0
    other = busy() - st["cpu"] - busy0 - cpu_s  # the bench's polling, the kernel, any other process
    return {
        "pages": int(st["pages"]), "page_requests": int(st["requests"] - st["robots"] - st["private"]),
        "robots_requests": int(st["robots"]), "private_requests": int(st["private"]),
        "fetch_s": round(window, 2), "pages_per_s": round(st["pages"] / window, 1),
        "crawler_cpu_s": round(cpu_s, 1), "crawler_cpu_ms_per_page": round(1000 * cpu_s / st["pages"], 2),
        "server_cpu_ms_per_request": cpu_ms(st), "last_page": st["last"],
        "other_cpu_s": round(other, 1), "load_1min": os.getloadavg()[0],
    }  # fmt: skip


def run_scrapy(site: Site, concurrency: int, extract_text: bool) -> dict[str, Any]:
    site.reset()
    args = [sys.executable, __file__, "--scrapy", f"{site.base}/p/0", "--concurrency", str(concurrency)]
    proc = subprocess.Popen(args + ["--extract"] * extract_text, stdout=subprocess.PIPE, text=True)
    row = watch(site, [proc])
    return {**row, "scrapy_stats": json.loads(proc.communicate()[0])}


def run_cli(site: Site, tmp: Path, concurrency: int, queue: str, also: tuple[int, ...]) -> dict[str, Any]:
    """``web-index crawl``: every role in one process."""
    site.reset()
    store = tmp / f"store-{time.time()}"
    args = [CLI, "crawl", f"{site.base}/p/0", "--store", str(store), "--allow-loopback", "--settle"]
    args += ["1", "--max-pages", str(site.pages), "--max-depth", "100000", "--json"]
    args += ["--concurrency", str(concurrency), "--per-domain", str(concurrency)]
    proc = subprocess.Popen([*args, "--queue", queue], stdout=subprocess.PIPE, text=True)
    row = watch(site, [proc], also)
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:  # not settled 5 min after the last page: say so, go on
        return {**row, "hung": stop([proc])}
    assert proc.returncode == 0, proc.returncode
    return {**row, "to_published_s": round(time.time() - row["last_page"], 2), "cli": json.loads(out)}


def run_workers(
    site: Site, tmp: Path, c: int, workers: int, queue: str, also: tuple[int, ...]
) -> dict[str, Any]:
    """``workers`` indexer+crawler processes and a timer+packer on ``queue``; an ``index+crawl`` posted."""
    store = tmp / f"store-{time.time()}"
    WebIndex(store, create=True).close()
    base = [CLI, "worker", "--store", str(store), "--queue", queue, "--allow-loopback"]
    base += ["--concurrency", str(c), "--per-domain", str(c)]
    roles = [["indexer", "crawler"]] * workers + [["timer", "packer"]]
    logs = [store.with_suffix(f".{i}.log") for i in range(len(roles))]
    procs = [
        subprocess.Popen(
            base + [a for r in rs for a in ("--role", r)], stdout=subprocess.DEVNULL, stderr=log.open("w")
        )
        for rs, log in zip(roles, logs, strict=True)
    ]
    broker, row = open_broker(queue), dict[str, Any]()
    try:
        while not all("worker:" in log.read_text() for log in logs):  # every worker has started
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a worker exited: {[log.read_text() for log in logs]}")
            time.sleep(0.1)
        site.reset()
        spec = CrawlSpec(
            id=store.name, seed=f"{site.base}/p/0", max_pages=site.pages, max_depth=10**5, settle=1
        )
        broker.send("index", [encode(IndexCrawl(site=site.host, spec=spec))])
        row = watch(site, procs, also)
        with WebIndex(store, read_only=True) as index:
            files = site_files(index)
            while (generation := files.latest(site.host)) is None:
                time.sleep(0.05)
            row["to_published_s"] = round(time.time() - row["last_page"], 2)
            files.download(site.host, generation, store / "published.zst")
        decompress_pack(store / "published.zst", store / "published.sqlite")
        row["packed_pages"] = read_pack_info(store / "published.sqlite").pages
        row["dead_letters"] = sum(broker.counts(q).dead for q in ("index", "crawl", "timer", "pack"))
    finally:
        row["killed_after_sigterm"] = stop(procs)  # workers still running 30 s after SIGTERM
        broker.close()
    return row


def table(title: str, cols: list[str], rows: dict[str, list[Any]], col: int = 12) -> None:
    print(f"\n{title:32}" + "".join(f"{c:>{col}}" for c in cols))
    for name, vals in rows.items():
        print(f"{name:32}" + "".join(f"{v:>{col}}" for v in vals))


def report(r: dict[str, Any]) -> None:
    cap, p = r["server_capacity"]["pages_per_s"], r["pack"]
    cols = ["pages/s", "fetch s", "to pack s", "pages", "requests", "CPU ms/pg", "srv ms/req", "other CPU s"]
    keys = ["pages_per_s", "fetch_s", "to_published_s", "pages", "page_requests", "crawler_cpu_ms_per_page"]
    keys += ["server_cpu_ms_per_request", "other_cpu_s"]
    rows = {k: [w.get(c, "-") for c in keys] for k, w in r["crawl"].items()}
    table(f"crawl, {r['crawl_pages']:,} pages", cols, rows)
    print(f"concurrency {r['concurrency']} (per domain too) a process; site server alone: {cap:,} pages/s")
    search_bench.report(p)
    print()
    for name, w in [*r["crawl"].items(), *p["search"].items()]:
        if w.get("hung") or w.get("killed_after_sigterm"):
            print(f"{name}: {w.get('killed_after_sigterm') or w.get('hung')} process(es) hung, killed")
    for name, (met, how) in r["targets"].items():
        print(f"target {name}: {'met' if met else 'NOT met'} ({how})")


def pin_source(working_tree: bool) -> str:
    """Re-run on a copy of HEAD's src/, first on PYTHONPATH for every process started (the checkout
    may change during the run), with PYTHONHASHSEED=0 (pack_bench's vocabulary() orders a set).
    Returns the commit measured."""
    if pinned := os.environ.get("CRAWL_BENCH_COMMIT"):
        return pinned
    if working_tree:
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0",
                  "CRAWL_BENCH_COMMIT": "working tree"})  # fmt: skip
    git = ["git", "-C", str(HERE.parent)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dest = Path(tempfile.gettempdir()) / f"web-index-crawl-bench-src-{commit}"
    if not dest.exists():
        archive = subprocess.run([*git, "archive", "HEAD", "src"], capture_output=True, check=True).stdout
        Path(f"{dest}.part").mkdir(exist_ok=True)
        subprocess.run(["tar", "-x", "-C", f"{dest}.part"], input=archive, check=True)
        Path(f"{dest}.part").rename(dest)
    path = os.pathsep.join(filter(None, [str(dest / "src"), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CRAWL_BENCH_COMMIT": commit, "PYTHONPATH": path, "PYTHONHASHSEED": "0"}
    os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--pages", type=int, default=10_000)
    ap.add_argument("--pack-pages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--no-redis", action="store_true", help="skip the rows on a Redis broker")
    ap.add_argument("--working-tree", action="store_true", help="measure src/ as it is, not a copy of HEAD's")
    ap.add_argument("--serve-site", nargs=2, type=int, help=argparse.SUPPRESS)
    ap.add_argument("--scrapy", help=argparse.SUPPRESS)
    ap.add_argument("--extract", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve_site:
        return serve_site(*args.serve_site)
    if args.scrapy:
        return scrapy_crawl(args.scrapy, args.concurrency, args.extract)
    commit = pin_source(args.working_tree)
    import scrapy

    c, n = args.concurrency, args.workers
    r: dict[str, Any] = {
        "benchmark": "crawl", "date": time.strftime("%Y-%m-%d"), "commit": commit,
        "web_index_from": str(Path(web_index.__file__).parent),
        "web_index": __version__, "scrapy": scrapy.__version__, "python": platform.python_version(),
        "machine": platform.platform(), "cpus": os.cpu_count(), "sqlite": sqlite3.sqlite_version,
        "load_before": os.getloadavg()[0], "crawl_pages": args.pages, "concurrency": c, "workers": n,
    }  # fmt: skip
    redis_bin = None if args.no_redis else shutil.which("redis-server")
    site, redis = Site(args.pages), None
    try:
        with tempfile.TemporaryDirectory(prefix="web-index-crawl-bench-") as tmp_dir:
            tmp = Path(tmp_dir)
            rport = free_port()
            if redis_bin:
                redis_args = ["--port", str(rport), "--save", "", "--appendonly", "no", "--dir", tmp_dir]
                redis = subprocess.Popen([redis_bin, *redis_args], stdout=subprocess.DEVNULL)

            def queue(broker: str, kind: str) -> str:  # a fresh one each time
                kind += f"-{time.monotonic_ns()}"
                if broker == "Redis":
                    return f"redis://127.0.0.1:{rport}/0?prefix=bench-{kind}"
                return f"sqlite://{tmp}/queue-{kind}.sqlite"

            brokers = ["SQLite", "Redis"] if redis_bin else ["SQLite"]
            r["server_capacity"] = site.capacity(min(args.pages, 5000), 16)
            print(f"site server: {r['server_capacity']}", flush=True)
            steps: dict[str, Callable[[], dict[str, Any]]] = {
                "Scrapy": lambda: run_scrapy(site, c, False),
                "Scrapy + extract": lambda: run_scrapy(site, c, True),
            }
            for b in brokers:
                also = (redis.pid,) if redis and b == "Redis" else ()
                steps[f"web-index, 1 process, {b}"] = lambda b=b, a=also: run_cli(
                    site, tmp, c, queue(b, "one"), a
                )
                steps[f"web-index, {n}+1 processes, {b}"] = lambda b=b, a=also: run_workers(
                    site, tmp, c, n, queue(b, "many"), a
                )
            r["crawl"] = {}
            for name, step in steps.items():  # a row that shared the CPU with other work runs again
                tries = [step()]
                while tries[-1]["other_cpu_s"] > 0.1 * tries[-1]["fetch_s"] and len(tries) < 3:
                    print(f"{name}: {tries[-1]['other_cpu_s']} CPU s of other work: again", flush=True)
                    tries.append(step())
                calm = min(tries, key=lambda t: t["other_cpu_s"])
                r["crawl"][name] = {**calm, "tries_pages_per_s": [t["pages_per_s"] for t in tries]}
                print(f"{name}: {r['crawl'][name]}", flush=True)
            routed = {b: queue(b, "search") for b in brokers}
            r["pack"] = search_bench.pack_and_search(tmp, args.pack_pages, args.queries, routed)
    finally:
        site.close()
        if redis is not None:
            redis.terminate()
            redis.wait(10)
    crawl = r["crawl"]
    best = max(v["pages_per_s"] for k, v in crawl.items() if k.startswith("web-index"))
    p50 = r["pack"]["search"]["direct"]["http"]["p50_ms"]
    r["targets"] = {
        "crawl >= Scrapy pages/s": (best >= (scr := crawl["Scrapy"]["pages_per_s"]),
                                    f"web-index at best {best}, Scrapy {scr} pages/s"),
        "pack >= 2,000 pages/s": (r["pack"]["pages_per_s"] >= 2000, f"{r['pack']['pages_per_s']:,} pages/s"),
        "search p50 <= 10 ms": (p50 <= 10, f"GET /search p50 {p50} ms"),
    }  # fmt: skip
    report(r)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(r, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
