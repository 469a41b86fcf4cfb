"""End-to-end loads into compacted, indexed Parquet: the bulk load against the buffered path, one run.

    .venv/bin/python bench/load_bench.py [--records 200000] [--rounds 1] [--out load]
    .venv/bin/python bench/load_bench.py --modes bulk,cli-bulk --jobs 1,2 --out load-jobs

The items are the ingest benchmark's (bench/store_bench.py: ``--records`` successful GET attempts
over 200 domains, six months, 2 KB bodies, failures and HEADs beside them), built before the clock
starts. Each mode runs in a fresh process on a fresh store and is timed from the first insert to a
store with nothing buffered, no part file and every month and capture index written:

- ``buffered``: ``insert_many`` in batches of 1,000 (the production flush policy), then ``flush()``
  and ``compact()``: what loading took before bulk loads;
- ``bulk``: ``bulk_load()``, ``add`` in batches of 1,000;
- ``cli-bulk``: ``web-index insert --bulk`` reading the same attempts as JSONL (bodies in base64),
  the process's whole life (imports included).

Both stores must end up the same: the same records per type, month and domain (request ids differ:
the store assigns them), and ``verify`` clean. ``--jobs 1,2`` runs each bulk mode once per value
(``bulk_load(jobs=)``, ``insert --bulk --jobs``; modes ``bulk-j1``, ``bulk-j2``...), its items given
request ids of their own so that the stores of one mode must be the same file for file and capture
line for capture line (``same answers``, bench/_answers.py). Rates count GET records (each response of a
successful GET, redirect hops included), attempts, and records of all types (an attempt's metadata
record and each response's data record, as the standard counts them). Results:
bench/results/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _jobs import answers_digest, run_sampled  # noqa: E402

MODES = ("buffered", "bulk", "cli-bulk")

_CHILD = """
import json, sys, time, uuid
sys.path.insert(0, {bench!r})
from store_bench import _ingest_items
from web_index import WebIndex
mode, root, records, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
jobs = int(sys.argv[5]) if len(sys.argv) > 5 else 0
items = _ingest_items(records, seed)
ids = [str(uuid.UUID(int=n + 1, version=4)) for n in range(len(items))]
started = time.perf_counter()
with WebIndex(root) as index:
    if mode == "bulk":
        with index.bulk_load(**({{"jobs": jobs}} if jobs else {{}})) as load:
            for i in range(0, len(items), 1000):
                load.add(items[i : i + 1000], request_ids=ids[i : i + 1000] if jobs else None)
    else:
        for i in range(0, len(items), 1000):
            index.insert_many(items[i : i + 1000])
        index.flush()
        index.compact()
took = time.perf_counter() - started
with open("/proc/self/status") as fh:
    peak = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
print(json.dumps({{"seconds": took, "peak_rss": peak}}))
"""


def _items_jsonl(records: int, seed: int, path: Path) -> None:
    """The items as the standard's insertion requests, one JSON line each (bodies in base64)."""
    sys.path.insert(0, str(HERE))
    from store_bench import _ingest_items

    with path.open("w") as out:
        for method, url, ts, meta, data in _ingest_items(records, seed):
            responses = []
            for r in data:
                row = {k: v for k, v in r.to_dict().items() if k != "request_id"}
                if r.data is not None:
                    row["data"] = base64.b64encode(r.data).decode()
                responses.append(row)
            metadata = {k: v for k, v in meta.to_dict().items() if v is not None}
            request = {"type": method, "url": url, "timestamp": ts.isoformat(), "metadata": metadata}
            out.write(json.dumps({**request, "data": responses}) + "\n")


def run_mode(
    mode: str,
    root: Path,
    records: int,
    seed: int,
    jsonl: Path,
    env: dict[str, str] | None = None,
    jobs: int = 0,
) -> dict[str, Any]:
    """One mode's load into ``root`` in a fresh process (``env``: its environment, e.g. the
    ``PYTHONPATH`` of another checkout's code; ``jobs``: its processes, 0 to leave the default):
    seconds and peak RSS (the loader's; its workers' apart, if it has any)."""
    if mode == "cli-bulk":
        cli = Path(sys.executable).parent / "web-index"
        started = time.perf_counter()
        more = ["--jobs", str(jobs)] if jobs else []
        proc, tree = run_sampled(
            [
                "/usr/bin/time",
                "-f",
                "%M",
                str(cli),
                "insert",
                "--bulk",
                *more,
                str(jsonl),
                "--store",
                str(root),
            ],
            env=env,
        )
        took = time.perf_counter() - started
        peak = int(proc.stderr.strip().splitlines()[-1]) * 1024
        return {"seconds": took, "peak_rss": peak, "peak_rss_with_workers": tree.rss, "peak_pss": tree.pss}
    code = _CHILD.format(bench=str(HERE))
    proc, tree = run_sampled(
        [sys.executable, "-c", code, mode, str(root), str(records), str(seed), str(jobs)], env=env
    )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1])) | {
        "peak_rss_with_workers": tree.rss,
        "peak_pss": tree.pss,
    }


def store_shape(root: Path) -> dict[str, Any]:
    from web_index import WebIndex

    with WebIndex(root, read_only=True) as index:
        stats = index.stats()
        report = index.verify()
    by_partition = {f"{p.type}/{p.year}/{p.month:02d}/{p.domain}": p.records for p in stats.partitions}
    return {
        "records": stats.records,
        "by_type": _by_type(stats),
        "files": stats.files,
        "part_files": sum(p.part_files for p in stats.partitions),
        "buffered": stats.buffered_attempts,
        "verify_ok": report.ok,
        "partitions": by_partition,
        "bytes": sum(f.stat().st_size for f in root.rglob("*") if f.is_file()),
    }


def _by_type(stats: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in stats.partitions:
        out[p.type] = out.get(p.type, 0) + p.records
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000, help="successful GET attempts")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=1, help="times each mode runs (alternated)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--out", default="load")
    ap.add_argument("--jobs", default="", help="comma list: each bulk mode once per value (e.g. 1,2)")
    args = ap.parse_args()
    jobs = [int(j) for j in args.jobs.split(",") if j]
    modes = [f"{m}-j{j}" for m in args.modes.split(",") for j in (jobs if m != "buffered" else [0]) or [0]]
    work = Path(tempfile.mkdtemp(prefix="wi-load-bench-"))
    try:
        jsonl = work / "items.jsonl"
        if any(m.startswith("cli-bulk") for m in modes):
            _items_jsonl(args.records, args.seed, jsonl)
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        shapes: dict[str, dict[str, Any]] = {}
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else list(reversed(modes)):
                root = work / f"{mode}-{r}"
                name, _, j = mode.rpartition("-j")
                got = run_mode(name, root, args.records, args.seed, jsonl, jobs=int(j))
                shape = store_shape(root)
                if int(j) and name == "bulk":  # the CLI's items get the store's ids: not comparable
                    shape["answers"] = answers_digest(root)
                shapes.setdefault(mode, shape)
                got.update({k: shape[k] for k in ("records", "files", "part_files", "buffered", "verify_ok")})
                runs[mode].append(got)
                peak, ok = got["peak_rss"] / 2**20, "ok" if got["verify_ok"] else "FAILED"
                print(f"{mode} round {r}: {got['seconds']:.1f} s, {peak:.0f} MiB, verify {ok}", flush=True)
                shutil.rmtree(root)
        report = _report(args, runs, shapes)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = HERE / "results" / args.out
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


def _report(args: argparse.Namespace, runs: dict[str, Any], shapes: dict[str, Any]) -> dict[str, Any]:
    base = next(iter(shapes.values()))
    same = {m: s["partitions"] == base["partitions"] for m, s in shapes.items()}
    # A mode's stores with ids of their own (--jobs): the same files and capture lines.
    first_of = {m.rpartition("-j")[0]: s.get("answers") for m, s in reversed(shapes.items())}
    same_answers = {m: s.get("answers") == first_of[m.rpartition("-j")[0]] for m, s in shapes.items()}
    pages = base["by_type"].get("get", 0)  # GET responses, redirect hops included
    attempts = base["by_type"].get("get-metadata", 0) + base["by_type"].get("head-metadata", 0)
    summary = {}
    for mode, rounds in runs.items():
        seconds = sorted(r["seconds"] for r in rounds)[len(rounds) // 2]
        summary[mode] = {
            "seconds": round(seconds, 2),
            "every_round_s": [round(r["seconds"], 2) for r in rounds],
            "pages_per_s": round(pages / seconds),
            "attempts_per_s": round(attempts / seconds),
            "records_per_s": round(base["records"] / seconds),
            "peak_rss_mib": round(max(r["peak_rss"] for r in rounds) / 2**20),
            "peak_rss_with_workers_mib": round(max(r["peak_rss_with_workers"] for r in rounds) / 2**20),
            "peak_pss_mib": round(max(r["peak_pss"] for r in rounds) / 2**20),
            "files": shapes[mode]["files"],
            "store_mb": round(shapes[mode]["bytes"] / 1e6, 1),
            "same_records_as_first": same[mode],
            "same_answers_as_j1": same_answers[mode] if shapes[mode].get("answers") else None,
            "verify_ok": all(r["verify_ok"] for r in rounds),
            "left_buffered_or_parts": any(r["buffered"] or r["part_files"] for r in rounds),
        }
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit.stdout.strip(),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "records_argument": args.records,
        "pages": pages,
        "attempts": attempts,
        "records": base["records"],
        "rounds": args.rounds,
        "modes": summary,
    }


def markdown(r: dict[str, Any]) -> str:
    lines = [
        f"Run {r['date']} at {r['commit']}, {r['machine']['cpus']} cores, Python {r['machine']['python']}: "
        f"{r['attempts']:,} attempts ({r['pages']:,} GET records, hops included; {r['records']:,} records "
        "of all types), "
        f"2 KB bodies over 200 domains and six months; median of {r['rounds']} round(s), each in a fresh "
        "process on a fresh store, timed to a compacted, indexed store.",
        "",
        "| mode | seconds | GET records/s | attempts/s | records/s | peak RSS MiB | with workers MiB "
        "| PSS with workers MiB | files | store MB | same records | same answers | verify |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for mode, m in r["modes"].items():
        lines.append(
            f"| {mode} | {m['seconds']} | {m['pages_per_s']:,} | {m['attempts_per_s']:,} | "
            f"{m['records_per_s']:,} | "
            f"{m['peak_rss_mib']:,} | {m['peak_rss_with_workers_mib']:,} | {m.get('peak_pss_mib', '')} | "
            f"{m['files']:,} | {m['store_mb']} | "
            f"{'yes' if m['same_records_as_first'] else 'NO'} | "
            f"{ {None: '', True: 'yes', False: 'NO'}[m.get('same_answers_as_j1')] } | "
            f"{'ok' if m['verify_ok'] else 'FAILED'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
