"""Peak memory of a bulk load whose records are one partition: one site's archive, one month.

    .venv/bin/python bench/one_site_load_bench.py [--gib 1.5] [--jobs 1,2] [--against SRC]

A site crawled in a month is one partition (type, month, registrable domain), and a commit used to
hold a partition's spilled rows as one table, so a load's memory grew with the biggest site it
held. Each side loads ``--gib`` GiB of bodies (8 KiB each, incompressible, so the file is as big
as the data; every 10th body repeats an earlier one, so payloads are shared) of one domain and
month with ``bulk_load(jobs=)`` in a fresh process, and reports the wall time and the peak RSS of
the loader (VmHWM) and of the loader with its workers (sampled every 50 ms). ``--against SRC``
runs the same load with another checkout's ``src`` (e.g. a worktree of the commit before) in the
same run. Both stores must hold the same records and pass ``verify``. Results:
bench/results/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _jobs import run_sampled  # noqa: E402

MIB = 1 << 20
BODY = 8 << 10

_CHILD = """
import json, random, sys, time, uuid
from datetime import UTC, datetime, timedelta
from web_index import WebIndex
from web_index.models import AttemptMetadata, AttemptState, Response
root, count, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(7)
fetcher = dict(fetcher_name="bench", fetcher_version="1", fetcher_calibre=10)
t0 = datetime(2024, 5, 1, tzinfo=UTC)
kept = []

def item(n):
    url = f"https://www.one-site.example/page/{{n}}"
    when = t0 + timedelta(seconds=n)
    body = kept[rng.randrange(len(kept))] if kept and n % 10 == 9 else rng.randbytes({body})
    if len(kept) < 64:
        kept.append(body)
    meta = AttemptMetadata(state=AttemptState.SUCCESS, url=url, **fetcher)
    response = Response(url=url, request_url=url, status_code=200, headers={{"content-type": "text/html"}},
                        timestamp=when, data=body, is_final=True, **fetcher)
    return ("get", url, when, meta, [response])

started = time.perf_counter()
with WebIndex(root) as index:
    with index.bulk_load(jobs=jobs) as load:
        for start in range(0, count, 1000):
            numbers = range(start, min(count, start + 1000))
            ids = [str(uuid.UUID(int=n + 1, version=4)) for n in numbers]
            load.add([item(n) for n in numbers], request_ids=ids)
took = time.perf_counter() - started
with open("/proc/self/status") as fh:
    peak = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
print(json.dumps({{"seconds": took, "peak_rss": peak}}))
"""


def run_side(root: Path, count: int, jobs: int, src: Path | None) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    code = _CHILD.format(body=BODY)
    proc, tree = run_sampled([sys.executable, "-c", code, str(root), str(count), str(jobs)], env=env)
    return dict(json.loads(proc.stdout.strip().splitlines()[-1])) | {"peak_rss_with_workers": tree.rss}


def shape(root: Path) -> dict[str, Any]:
    from web_index import WebIndex

    with WebIndex(root, read_only=True) as index:
        stats = index.stats()
        return {
            "records": sorted((p.type, p.records, p.part_files) for p in stats.partitions),
            "verify_ok": index.verify().ok,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.5, help="GiB of bodies in the one partition")
    ap.add_argument("--jobs", default="1,2")
    ap.add_argument("--against", type=Path, help="another checkout's src, loaded the same way")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/web-index-one-site"))
    ap.add_argument("--out", default="one-site-load")
    args = ap.parse_args()
    count = int(args.gib * (1 << 30) / BODY)
    sides = [("new", None)] + ([("before", args.against)] if args.against else [])
    rows = []
    shapes = {}
    for jobs in [int(j) for j in args.jobs.split(",")]:
        for name, src in sides:
            root = args.workdir / f"{name}-j{jobs}"
            shutil.rmtree(root, ignore_errors=True)
            got = run_side(root, count, jobs, src)
            shapes[f"{name}-j{jobs}"] = shape(root)
            shutil.rmtree(root, ignore_errors=True)
            rows.append({"side": name, "jobs": jobs} | got)
            print(
                f"{name} jobs={jobs}: {got['seconds']:.1f} s, peak RSS {got['peak_rss'] / MIB:,.0f} MiB, "
                f"with workers {got['peak_rss_with_workers'] / MIB:,.0f} MiB",
                flush=True,
            )
    same = all(s == next(iter(shapes.values())) for s in shapes.values())
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    result = {
        "benchmark": "one_site_load_bench",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "commit": commit.stdout.strip(),
        "against": str(args.against) if args.against else None,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "gib": args.gib,
        "records": count,
        "body_bytes": BODY,
        "runs": rows,
        "shapes": shapes,
        "same_records_and_verified": same and all(s["verify_ok"] for s in shapes.values()),
    }
    out = HERE / "results" / args.out
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"# One site's archive bulk-loaded: one partition of {args.gib} GiB ({count:,} bodies of "
        f"{BODY // 1024} KiB, every 10th repeated)",
        "",
        f"Run {result['date']} at {result['commit']}, {result['cpus']} cores; "
        f"`bench/one_site_load_bench.py --gib {args.gib} --jobs {args.jobs}"
        + (f" --against {args.against}`" if args.against else "`")
        + f". Same records, verify clean on every store: {result['same_records_and_verified']}.",
        "",
        "| code | jobs | seconds | peak RSS, loader | with workers |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['side']} | {r['jobs']} | {r['seconds']:.1f} | {r['peak_rss'] / MIB:,.0f} MiB "
            f"| {r['peak_rss_with_workers'] / MIB:,.0f} MiB |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print(f"results in {out}.json and .md")
    if not result["same_records_and_verified"]:
        raise SystemExit(f"the stores differ or fail verify: {shapes}")


if __name__ == "__main__":
    main()
