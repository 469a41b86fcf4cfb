"""Batches of simple queries on one store, bodies by page against by row group, alternated.

The same process, the same files: each round asks a fresh sample of URLs from
the dataset's manifest twice, once with the page path (``storage/pages/_reader.py``)
and once with it turned off (every body read with its row group, as before),
in alternating order, each through a fresh ``WebIndex``; wall and CPU time per
batch. On a machine shared with other work this says more than two runs made
minutes apart. Results: bench/results/<out>.json and .md.

    .venv/bin/python bench/page_ab_bench.py --store bench/data/onesite [--queries 5000] [--rounds 6]

(``bench/data/onesite`` is what ``store_bench.py --records 1000000 --domains 1
--keep-store bench/data/onesite`` builds.)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from web_index import WebIndex
from web_index.models import SimplePageQuery
from web_index.storage.pages import _known
from web_index.storage.pages import _reader as _pages

HERE = Path(__file__).resolve().parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--store", type=Path, required=True, help="a dataset folder (store/ and manifest.parquet)"
    )
    parser.add_argument("--queries", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", default="pages-ab")
    args = parser.parse_args()
    urls = sorted(set(pq.read_table(args.store / "manifest.parquet", columns=["url"]).column(0).to_pylist()))
    rng = random.Random(5)
    real = _pages.body_pages
    runs: list[dict[str, Any]] = []
    try:
        for round in range(args.rounds):
            sample = rng.sample(urls, args.queries)
            modes = ("page", "row group") if round % 2 == 0 else ("row group", "page")
            for mode in modes:
                _pages.body_pages = real if mode == "page" else (lambda handle: None)  # type: ignore[assignment]
                _known.KNOWN.clear()
                queries = [SimplePageQuery(url=u) for u in sample]
                with WebIndex(args.store / "store") as idx:
                    c0, t0 = time.process_time(), time.perf_counter()
                    answers = idx.query(queries)
                    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                hits = sum(a is not None for a in answers)
                runs.append(
                    {"round": round, "mode": mode, "wall_s": round_(wall), "cpu_s": round_(cpu), "hits": hits}
                )
                print(runs[-1], flush=True)
    finally:
        _pages.body_pages = real
    # Round 0 pays the process's cold start (month indexes, first opens): left out of the medians.
    warm = [r for r in runs if r["round"] > 0] or runs
    summary = {
        mode: {
            "wall_s": round_(statistics.median(r["wall_s"] for r in warm if r["mode"] == mode)),
            "cpu_s": round_(statistics.median(r["cpu_s"] for r in warm if r["mode"] == mode)),
        }
        for mode in ("page", "row group")
    }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit.stdout.strip(),
        "cpus": os.cpu_count(),
        "store": str(args.store),
        "queries": args.queries,
        "runs": runs,
        "median_after_round_0": summary,
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"Run {result['date']} at {result['commit']} ({result['cpus']} CPUs, shared), {args.queries} simple "
        f"queries a batch, store `{args.store.name}`",
        "",
        "| round | mode | wall s | CPU s | hits |",
        "|---|---|---:|---:|---:|",
    ]
    lines += [f"| {r['round']} | {r['mode']} | {r['wall_s']} | {r['cpu_s']} | {r['hits']} |" for r in runs]
    lines += ["", "Medians after round 0 (its cold start left out):", ""]
    lines += [f"- {m}: {s['wall_s']} s wall, {s['cpu_s']} s CPU" for m, s in summary.items()]
    (out / f"{args.out}.md").write_text("\n".join(lines) + "\n")


def round_(x: float) -> float:
    return round(x, 3)


if __name__ == "__main__":
    main()
