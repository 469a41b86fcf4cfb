"""Pack rate and search latency: a site's pack built by the Packer, then searched
over HTTP (``web-index serve``), through a PackReader and with the bare FTS5 query.

    .venv/bin/python bench/search_bench.py [--pages 100000] [--queries 1000]

1. ``--pages`` synthetic texts (bench/pack_bench.py: Zipf-distributed made-up
   words, ~2 KB a page) written by ``SiteFiles.write_texts`` in batches of 500;
   ``Packer.pack(site, full=True)`` timed, then its phases one by one.
2. ``--queries`` one- and two-word queries drawn from the same Zipf law (so a
   query stream repeats its popular queries, as real ones do), sent one at a
   time as GET /search to ``web-index serve`` over that store (one keep-alive
   client), alternated with the same query through a ``PackReader`` (which
   keeps its last answers, as the server's does), through a ``PackReader`` that
   keeps none, and as the bare FTS5 query (``MATCH ... ORDER BY bm25 LIMIT
   10``: rowids only, no total, snippets or query parsing), the floor. Each
   side's p50/p99 over the stream, and over the queries asked for the first
   time (where no kept answer can help). crawl_bench.py also runs it through
   an orchestrator and a searcher on each broker (``serve --queue``).

Run by crawl_bench.py; on its own, results go to bench/results/search_bench.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from _procs import CLI, busy, free_port, stop, timed
from pack_bench import pages as synthetic_pages
from pack_bench import percentile, queries, vocabulary
from web_index import WebIndex, __version__
from web_index.crawl import Packer, open_broker, site_files
from web_index.search import PackReader, build_pack, compress_pack, fts_query

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "search_bench.json"
FLOOR_SQL = "SELECT rowid FROM pages_fts WHERE pages_fts MATCH ? ORDER BY bm25(pages_fts) LIMIT 10"
SIDES = ("http", "reader", "reader_no_cache", "floor")


def pack_and_search(tmp: Path, n: int, n_queries: int, brokers: dict[str, str]) -> dict[str, Any]:
    site, store = "site.example", tmp / "pack-store"
    vocab = vocabulary(random.Random(1), 50_000)
    texts = synthetic_pages(n, 2, vocab, 2048)
    out: dict[str, Any] = {"pages": n, "text_mib": round(sum(len(p.text.encode()) for p in texts) / 2**20, 1)}
    with WebIndex(store, create=True) as index:
        files = site_files(index)
        _, out["write_texts_s"] = timed(
            lambda: [files.write_texts(site, texts[i : i + 500]) for i in range(0, n, 500)]
        )
        broker, db = open_broker(f"sqlite://{tmp}/pack-queue.sqlite"), tmp / "pack.sqlite"
        busy0, cpu0 = busy(), time.process_time()
        (generation, _, pages), pack_s = timed(
            lambda: Packer(broker, files, workdir=tmp / "pk").pack(site, full=True)
        )
        out["pack_other_cpu_s"] = round(busy() - busy0 - (time.process_time() - cpu0), 1)
        broker.close()
        assert pages == n, (pages, n)
        zstd_mib = round(files.pack_size(site, generation) / 2**20, 1)  # as published
        out.update(pack_s=pack_s, pages_per_s=round(n / pack_s), zstd_mib=zstd_mib)
        # The same steps again one by one, to see where the time goes.
        again, out["phase_read_texts_s"] = timed(lambda: list(files.read_texts(site, files.text_files(site))))
        _, out["phase_build_pack_s"] = timed(lambda: build_pack(db, site, again, watermark="bench"))
        _, out["phase_compress_s"] = timed(lambda: compress_pack(db, tmp / "pack.sqlite.zst"))
        out["pack_mib"] = round(db.stat().st_size / 2**20, 1)
    qs, warm = queries(n_queries, 3, vocab), queries(20, 4, vocab)
    out["search"] = {"direct": search_http(store, db, site, qs, warm, None, tmp)}
    for name, queue in brokers.items():
        out["search"][f"routed ({name})"] = search_http(store, db, site, qs, warm, queue, tmp)
    return out


def search_http(
    store: Path, db: Path, site: str, qs: list[str], warm: list[str], queue: str | None, tmp: Path
) -> Any:
    """p50/p99 of GET /search on ``web-index serve``, next to PackReader and the bare FTS5 query."""
    port, procs = free_port(), []
    serve = [CLI, "serve", "--store", str(store), "--port", str(port)]
    if queue is not None:  # an orchestrator and a searcher, and the server routing through them
        shutil.rmtree(tmp / "searcher", ignore_errors=True)
        roles = ["--role", "orchestrator", "--role", "searcher", "--heartbeat", "0.5"]
        worker = [CLI, "worker", "--store", str(store), "--queue", queue, *roles, "--workdir"]
        procs.append(subprocess.Popen([*worker, str(tmp / "searcher")], stderr=subprocess.DEVNULL))
        serve += ["--queue", queue]
    procs.append(subprocess.Popen(serve, stderr=subprocess.DEVNULL))
    times: dict[str, list[float]] = {side: [] for side in SIDES}
    floor = sqlite3.connect(db.absolute().as_uri() + "?mode=ro&immutable=1", uri=True)
    try:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client,
            PackReader(db) as reader,
            PackReader(db, cached_answers=0) as bare_reader,
        ):

            def get(q: str) -> httpx.Response:
                return client.get("/search", params={"site": site, "q": q})

            t, first = time.perf_counter(), None
            while first is None or first.status_code != 200:  # up, with the site's pack loaded
                if time.perf_counter() - t > 120:
                    raise RuntimeError(f"serve never answered 200: {first and first.text}")
                try:
                    first = get(warm[0])
                except httpx.TransportError:
                    time.sleep(0.1)
            first_s = time.perf_counter() - t
            sides: dict[str, Callable[[str], Any]] = {
                "http": lambda q: get(q).raise_for_status().json()["total"],
                "reader": lambda q: reader.search(q).total,
                "reader_no_cache": lambda q: bare_reader.search(q).total,
                "floor": lambda q: floor.execute(FLOOR_SQL, (fts_query(q),)).fetchall(),
            }
            for q in warm:  # page cache and statements warm; other queries than the stream's
                for side in sides.values():
                    side(q)
            for q in qs:  # alternated, so that no side gets a warmer cache
                answers = []
                for name, side in sides.items():
                    t = time.perf_counter()
                    answers.append(side(q))
                    times[name].append(time.perf_counter() - t)
                assert answers[0] == answers[1] == answers[2], (q, answers[:3])
    finally:
        floor.close()
        killed = stop(procs)
    seen: set[str] = set()
    new = [not (q in seen or seen.add(q)) for q in qs]  # type: ignore[func-returns-value]
    out: dict[str, Any] = {
        "queries": len(qs),
        "first_asked": sum(new),
        "first_answer_s": round(first_s, 2),
        "killed_after_sigterm": killed,
    }
    for name, xs in times.items():
        fresh = [x for x, n in zip(xs, new, strict=True) if n]
        out[name] = {
            "p50_ms": round(1000 * statistics.median(xs), 2),
            "p99_ms": round(1000 * percentile(xs, 99), 2),
            "first_asked_p50_ms": round(1000 * statistics.median(fresh), 2),
        }
    return out


def report(p: dict[str, Any]) -> None:
    print(f"\npack: {p['pages']:,} pages ({p['text_mib']} MiB of text; write_texts {p['write_texts_s']} s): "
          f"Packer.pack {p['pack_s']} s = {p['pages_per_s']:,} pages/s -> {p['pack_mib']} MiB, "
          f"{p['zstd_mib']} MiB zstd; one by one: read texts {p['phase_read_texts_s']} s, build_pack "
          f"{p['phase_build_pack_s']} s, compress {p['phase_compress_s']} s")  # fmt: skip
    heads = ["GET /search", "PackReader", "no answers kept", "bare FTS5"]
    print(f"\n{'search ms: p50/p99 (p50 first asked)':40}" + "".join(f"{h:>22}" for h in heads))
    for name, r in p["search"].items():
        cells = [f"{r[x]['p50_ms']}/{r[x]['p99_ms']} ({r[x]['first_asked_p50_ms']})" for x in SIDES]
        print(f"{name:40}" + "".join(f"{c:>22}" for c in cells))
    some = next(iter(p["search"].values()))
    print(f"{some['queries']} queries, {some['first_asked']} asked for the first time")


def main() -> None:
    if os.environ.get("PYTHONHASHSEED") != "0":  # pack_bench's vocabulary() orders a set
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "PYTHONHASHSEED": "0"})
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    args = ap.parse_args()
    r: dict[str, Any] = {
        "benchmark": "search", "date": time.strftime("%Y-%m-%d"), "web_index": __version__,
        "python": platform.python_version(), "machine": platform.platform(), "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version, "load_before": os.getloadavg()[0],
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="web-index-search-bench-") as tmp:
        r["pack"] = pack_and_search(
            Path(tmp), args.pages, args.queries, {"SQLite": f"sqlite://{tmp}/q.sqlite"}
        )
    report(r["pack"])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(r, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
