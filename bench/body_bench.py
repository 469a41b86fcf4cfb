"""Peak memory of one large body through the store: insert, flush, query, compact.

Each size runs in a fresh process (VmHWM is a high-water mark); the figure
is the peak minus the process's size before the body existed, as a multiple of
the body. Results: bench/results/body.json and .md.

    .venv/bin/python bench/body_bench.py [--sizes 8,32,64]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

_CHILD = """
import os, sys, time
from datetime import UTC, datetime
from web_index import WebIndex
from web_index.models import AttemptMetadata, Response, SimplePageQuery

def rss():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
size, root, phase = int(sys.argv[1]), sys.argv[2], sys.argv[3]
t = datetime(2024, 8, 1, tzinfo=UTC)
url = "https://big.example.com/file"
with WebIndex(root) as idx:
    if phase == "insert":
        base = rss()
        body = os.urandom(size)  # incompressible: the worst case for every copy
        meta = AttemptMetadata(state="success", url=url, fetcher_name="b", fetcher_version="1",
                               fetcher_calibre=10)
        resp = Response(url=url, request_url=url, status_code=200, headers={}, timestamp=t, data=body,
                        is_final=True, fetcher_name="b", fetcher_version="1", fetcher_calibre=10)
        started = time.perf_counter()
        idx.insert("get", url, t, meta, [resp])
        del body, resp
    else:
        base = rss()
        started = time.perf_counter()
        if phase == "flush":
            idx.flush()
        elif phase == "query":
            page = idx.query([SimplePageQuery(url=url)])[0]
            assert page is not None and len(page.data) == size
            del page
        elif phase == "compact":
            idx.compact()
    took = time.perf_counter() - started
with open("/proc/self/status") as fh:  # VmHWM: exec resets it, unlike ru_maxrss
    peak = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
print(base, peak, took)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="8,32,64", help="body sizes in MiB")
    args = parser.parse_args()
    rows = []
    for mib in (int(s) for s in args.sizes.split(",")):
        size = mib << 20
        with tempfile.TemporaryDirectory() as tmp:
            root = str(Path(tmp) / "store")
            for phase in ("insert", "flush", "query", "compact"):
                out = subprocess.run(
                    [sys.executable, "-c", _CHILD, str(size), root, phase],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.split()
                base, peak, took = int(out[0]), int(out[1]), float(out[2])
                rows.append(
                    {
                        "body_mib": mib,
                        "phase": phase,
                        "extra_mib": round((peak - base) / 2**20, 1),
                        "x_body": round((peak - base) / size, 2),
                        "seconds": round(took, 2),
                    }
                )
                print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    result = {"date": time.strftime("%Y-%m-%d"), "commit": commit.stdout.strip(), "rows": rows}
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "body.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = ["| body | phase | peak extra RSS | x body | seconds |", "|---|---|---|---|---|"]
    lines += [
        f"| {r['body_mib']} MiB | {r['phase']} | {r['extra_mib']} MiB | {r['x_body']} | {r['seconds']} |"
        for r in rows
    ]
    head = f"Run {result['date']} at {result['commit']}\n\n"
    (out_dir / "body.md").write_text(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
