"""Time of compacting a month of many small partitions, as a crawl of many sites leaves it.

Builds (once, cached under ``--workdir``) a store of one month holding
``--domains`` domains, each with two part files of each type (two flushes of one
attempt a domain), then compacts a fresh copy of it in a fresh process, and
flushes one more attempt a domain into another (buffered before the clock);
``--jobs cluster`` compacts it on a Dask ``LocalCluster`` of two single-threaded
worker processes (started before the clock: ``compact(scheduler=...)``). With
``--against SRC`` the same jobs are run by the code under ``SRC`` too (a
checkout's ``src`` folder, imported through ``PYTHONPATH``), rounds alternated,
so the two are compared in one run. Linear work shows as the same milliseconds a
partition at every size. Results: bench/results/<out>.json and .md (``--out``,
``compact-many``).

    .venv/bin/python bench/compact_many_bench.py [--domains 1000,4000] [--rounds 2] [--against SRC]
    .venv/bin/python bench/compact_many_bench.py --jobs cluster --domains 1000 --out compact-many-cluster
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WHEN = datetime(2024, 5, 3, tzinfo=UTC)

_CHILD = """
import sys, time
sys.path.insert(0, sys.argv[3])
from compact_many_bench import items
from web_index import WebIndex
with WebIndex(sys.argv[1]) as idx:
    if sys.argv[2] == "flush":  # one more attempt a domain, buffered first
        idx.insert_many(items(int(sys.argv[4]), "late", minutes=5))
        started = time.perf_counter()
        changed = idx.flush()
    elif sys.argv[2] == "cluster":
        from distributed import LocalCluster
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
            started = time.perf_counter()
            changed = idx.compact(scheduler=c.scheduler_address)
            took = time.perf_counter() - started
        print(changed, took)
        sys.exit(0)
    else:
        started = time.perf_counter()
        changed = idx.compact()
print(changed, time.perf_counter() - started)
"""


def items(domains: int, page: str, *, minutes: int) -> list[tuple[Any, ...]]:
    """One successful GET attempt a domain, as ``WebIndex.insert_many`` takes them."""
    from web_index.models import AttemptMetadata, Response

    out: list[tuple[Any, ...]] = []
    at = WHEN + timedelta(minutes=minutes)
    for d in range(domains):
        url = f"https://site{d:06d}.example/{page}"
        response = Response(
            url=url, request_url=url, status_code=200, headers={"content-type": "text/html"},
            timestamp=at, data=f"<html>{url}</html>".encode(), is_final=True,
            fetcher_name="bench", fetcher_version="1", fetcher_calibre=10,
        )  # fmt: skip
        meta = AttemptMetadata(
            state="success", url=url, fetcher_name="bench", fetcher_version="1", fetcher_calibre=10
        )
        out.append(("get", url, at, meta, [response]))
    return out


def build(store: Path, domains: int) -> None:
    from web_index import WebIndex

    with WebIndex(store, create=True) as index:
        for flush in range(2):
            index.insert_many(items(domains, f"page{flush}", minutes=flush))
            index.flush()


def timed(job: str, store: Path, scratch: Path, src: Path, domains: int) -> tuple[int, float]:
    """``job`` (``compact``, ``flush`` or ``cluster``) on a fresh copy of ``store``, by the code
    under ``src``."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(store, scratch, symlinks=True)
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(scratch), job, str(HERE), str(domains)],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if out.returncode:
        sys.exit(out.stderr)
    changed, took = out.stdout.split()
    return int(changed), float(took)


def _commit(src: Path) -> str:
    out = subprocess.run(
        ["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return out.stdout.strip() or "?"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--domains", default="1000,4000", help="comma-separated domain counts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--against", type=Path, help="another checkout's src folder, compared in the same run"
    )
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/web-index-compact-many"))
    parser.add_argument("--jobs", default="compact,flush", help="of compact, flush, cluster")
    parser.add_argument("--out", default="compact-many", help="results name under bench/results")
    args = parser.parse_args()
    sides = {"this": ROOT / "src"}
    if args.against is not None:
        sides["against"] = args.against.resolve()
    rows = []
    for domains in [int(d) for d in args.domains.split(",")]:
        store = args.workdir / f"month-{domains}"
        if not store.exists():
            print(f"building {domains} domains x 2 parts under {store} ...", flush=True)
            build(store.with_suffix(".tmp"), domains)
            store.with_suffix(".tmp").rename(store)
        files = len(list((store / "get" / "2024" / "05").glob("*.parquet")))
        expecting = {"compact": 2 * domains, "flush": domains, "cluster": 2 * domains}
        for job in args.jobs.split(","):
            expected = expecting[job]
            times: dict[str, list[float]] = {side: [] for side in sides}
            for r in range(args.rounds):
                for side in sides if r % 2 == 0 else reversed(sides):  # alternated: ABBA
                    changed, took = timed(job, store, args.workdir / "scratch", sides[side], domains)
                    assert changed == expected, (job, side, changed)
                    times[side].append(took)
                    print(f"  {domains} domains, {job}, {side}: {took:.2f} s", flush=True)
            for side, took in times.items():
                best = min(took)
                rows.append(
                    {"domains": domains, "files_a_month_folder": files, "job": job, "side": side,
                     "commit": _commit(sides[side]), "seconds": [round(t, 2) for t in took],
                     "best_s": round(best, 2), "ms_a_partition": round(best / expected * 1000, 2)}
                )  # fmt: skip
    result = {"date": time.strftime("%Y-%m-%d"), "rounds": args.rounds, "runs": rows}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"Run {result['date']}: one month of N domains, two part files a domain and type; `compact()` of"
        " it (`cluster`: on a LocalCluster of two worker processes), and `flush()` of one more attempt a"
        " domain into it, each in a fresh process on a fresh copy (best of"
        f" {args.rounds}; a partition: a domain's get and get-metadata partitions for compact and"
        " cluster, a domain for flush).",
        "",
        "| domains | files in the month folder | job | code | seconds | ms a partition |",
        "|---:|---:|---|---|---:|---:|",
        *(
            f"| {r['domains']:,} | {r['files_a_month_folder']:,} | {r['job']} | {r['side']} ({r['commit']})"
            f" | {r['best_s']} | {r['ms_a_partition']} |"
            for r in rows
        ),
    ]
    (HERE / "results" / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
