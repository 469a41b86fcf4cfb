"""Durable ``insert_many`` into the SQLite buffer: this code against another tree, one run.

    .venv/bin/python bench/insert_bench.py [--records 50000] [--rounds 3] [--against SRC] [--out insert]

The items are the ingest benchmark's (bench/store_bench.py: ``--records`` successful GET attempts
over 200 domains, six months, 2 KB bodies, failures and HEADs beside them), built once by this
code and handed to every run pickled, so that both sides insert the same objects. Each run is a
fresh process on a fresh store, ``WebIndex(root, durable=...)``, timed from the first
``insert_many`` (batches of 1,000, the production flush policy) to the last one's return; modes
``durable`` and ``non-durable``, the sides alternated round by round. ``--against SRC`` runs the
same in a ``web_index`` package at SRC (``PYTHONPATH``, the same venv), e.g. a worktree of an
older commit. The rate counts GET records (successful GET attempts), as docs/performance.md's
Ingest table does.

Then, in this process and for this code alone, where an attempt's time goes: the items validated
(``validate_items``), each response's capture line made (``attempt_lines``, what the buffer keeps
for CDX lookups), each attempt's blob encoded, each timed over the whole input (best of three, the
URL caches emptied first, as for a crawl's new URLs), and the whole ``insert_many`` of the same
input less those: SQLite's share (its rows, indexes, commit and WAL) with the bookkeeping around
it. Results: bench/results/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import os
import pickle
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _results  # noqa: E402
from _procs import busy, code_env  # noqa: E402

_CHILD = """
import json, pickle, sys, time
from web_index import WebIndex
items_path, root, durable = sys.argv[1], sys.argv[2], sys.argv[3] == "durable"
with open(items_path, "rb") as f:
    items = pickle.load(f)
with WebIndex(root, durable=durable) as index:
    started = time.perf_counter()
    for i in range(0, len(items), 1000):
        index.insert_many(items[i : i + 1000])
    seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds}))
"""


def _run(items: Path, root: Path, mode: str, src: Path | None) -> dict[str, Any]:
    import json

    before = busy()
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(items), str(root), mode],
        env=code_env(src),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{mode} run with PYTHONPATH={src} failed:\n{done.stderr}")
    shutil.rmtree(root, ignore_errors=True)
    # CPU the machine spent beyond this run's one busy core: another job beside it.
    other = max(0.0, (busy() - before) - wall) / wall
    return json.loads(done.stdout.strip().splitlines()[-1]) | {"other_cpu_per_s": round(other, 2)}


def phases(items: list[Any]) -> dict[str, float]:
    """Microseconds an attempt for each step an insert takes (see the module's docstring)."""
    import msgspec

    from web_index import WebIndex, urls
    from web_index._attempts import validate_items
    from web_index.ingest import Limits
    from web_index.storage.buffer.base import attempt_lines

    encode = msgspec.msgpack.Encoder().encode
    limits = Limits()

    def cold() -> None:
        # The URLs' caches emptied: every URL of a crawl is new to the process that stores it.
        urls.surt_key.cache_clear()
        urls._domain_of_host.cache_clear()

    def best(fn: Any) -> float:
        times = []
        for _ in range(3):
            cold()
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        return min(times) / len(items) * 1e6

    batches = [items[i : i + 1000] for i in range(0, len(items), 1000)]
    attempts = [a for b in batches for a in validate_items(b, None, limits)]
    out = {
        "validation": best(lambda: [validate_items(b, None, limits) for b in batches]),
        "capture_lines": best(lambda: [attempt_lines(a.responses) for a in attempts]),
        "blob_encoding": best(lambda: [encode((a.metadata, a.responses)) for a in attempts]),
    }
    totals = []
    for _ in range(3):
        with tempfile.TemporaryDirectory() as tmp, WebIndex(Path(tmp) / "s") as index:
            cold()
            started = time.perf_counter()
            for b in batches:
                index.insert_many(b)
            totals.append(time.perf_counter() - started)
    out["insert_many"] = min(totals) / len(items) * 1e6
    out["sqlite_and_the_rest"] = out["insert_many"] - sum(
        out[k] for k in ("validation", "capture_lines", "blob_encoding")
    )
    return {k: round(v, 2) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--against", type=Path, help="a src folder holding another web_index")
    ap.add_argument("--out", default="insert")
    args = ap.parse_args()
    if args.against is not None and not (args.against / "web_index" / "__init__.py").is_file():
        raise SystemExit(f"--against {args.against}: no web_index package there")
    from store_bench import _ingest_items

    items = _ingest_items(args.records, 7)
    pages = sum(1 for it in items if it[0] == "get" and it[4])
    sides: dict[str, Path | None] = {"this": None}
    if args.against is not None:
        sides["against"] = args.against.resolve()
    order = [(m, s) for m in ("durable", "non-durable") for s in sides]
    runs: dict[str, list[dict[str, Any]]] = {f"{m} {s}": [] for m, s in order}
    with tempfile.TemporaryDirectory(dir=HERE.parent) as tmp:
        items_path = Path(tmp) / "items.pickle"
        items_path.write_bytes(pickle.dumps(items))
        for r in range(args.rounds):
            for mode, side in order if r % 2 == 0 else order[::-1]:
                got = _run(items_path, Path(tmp) / f"{mode}-{side}-{r}", mode, sides[side])
                got["get_records_per_s"] = round(pages / got["seconds"])
                runs[f"{mode} {side}"].append(got)
                print(f"round {r + 1} {mode} {side}: {got['get_records_per_s']:,} GET records/s", flush=True)
    summary = {
        name: {
            "median_get_records_per_s": round(statistics.median(x["get_records_per_s"] for x in rs)),
            "best_get_records_per_s": max(x["get_records_per_s"] for x in rs),
        }
        for name, rs in runs.items()
    }
    profile = phases(items)
    record = {
        "when": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
        "python": platform.python_version(),
        "attempts": len(items),
        "get_records": pages,
        "against": str(sides.get("against")),
        "rounds": args.rounds,
        "runs": runs,
        "summary": summary,
        "phases_us_per_attempt": profile,
    }
    lines = [
        f"# Durable insert_many, {record['when']}",
        "",
        f"{len(items):,} attempts ({pages:,} GET records), batches of 1,000, {args.rounds} rounds alternated;"
        f" `this` is the working tree, `against` {record['against']}. {record['machine']}.",
        "",
        "| mode and side | median GET records/s | best | every round | other CPU a second |",
        "|---|---:|---:|---|---|",
    ]
    for name, rs in runs.items():
        s = summary[name]
        every = ", ".join(f"{x['get_records_per_s']:,}" for x in rs)
        other = ", ".join(str(x["other_cpu_per_s"]) for x in rs)
        median, best = s["median_get_records_per_s"], s["best_get_records_per_s"]
        lines.append(f"| {name} | {median:,} | {best:,} | {every} | {other} |")
    lines += ["", "Where an attempt's time goes (this code, in process, µs an attempt, best of 3):", ""]
    lines += ["| step | µs |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in profile.items()]
    _results.save(args.out, record, lines)


if __name__ == "__main__":
    main()
