"""Peak memory and time of compacting one big partition.

Builds a store with one GET partition of ``--gb`` gigabytes of bodies (2 KB of
incompressible bytes each, so the files are as big as the data) in
``--parts`` part files plus a compacted file, the way flushes and an earlier
compaction leave it, then compacts it in a fresh process and reports that
process's peak RSS (VmHWM) and wall time. Results: bench/results/compact.json
and .md.

    .venv/bin/python bench/compact_bench.py [--gb 5] [--parts 8] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
BODY = 2048

# The peak is VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a
# child of this (big) builder process would report the builder's peak.
_CHILD = """
import sys, time
from web_index import FlushPolicy, WebIndex
started = time.perf_counter()
with WebIndex(sys.argv[1], policy=FlushPolicy(compact_parts=0)) as idx:
    changed = idx.compact()
took = time.perf_counter() - started
with open("/proc/self/status") as fh:
    peak = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
print(changed, peak, took)
"""


def build(root: Path, gb: float, parts: int) -> int:
    """Write ``parts`` part files and one compacted file of one partition; return rows."""
    import pyarrow as pa

    from web_index.models import RecordType
    from web_index.storage import Partition, WriteOptions
    from web_index.storage._files import write_partition_file
    from web_index.storage._schema import SCHEMAS
    from web_index.storage.backends import LocalBackend

    backend = LocalBackend(root)
    root.mkdir(parents=True, exist_ok=True)
    total = int(gb * (1 << 30) / BODY)
    files = parts + 1
    per_file = total // files
    start_us = 1_722_470_400_000_000  # 2024-08-01
    made = 0
    for f in range(files):
        for kind in (RecordType.GET, RecordType.GET_METADATA):
            rows: list[pa.Table] = []
            # Written in slices so that building the bench never holds a whole file.
            partition = Partition(kind, 2024, 8, "big.example.com")
            part = None if f == 0 else str(uuid.uuid4())
            names = SCHEMAS[kind].names
            n = per_file
            keys = [f"https://big.example.com/{f:02d}/{i:09d}" for i in range(n)]
            rids = [_rid(f, i) for i in range(n)]
            ts = [start_us + f * 1_000_000 + i for i in range(n)]
            cols: dict[str, object] = {
                "url_key": keys,
                "url": keys,
                "attempt_timestamp": ts,
                "timestamp": ts,
                "request_id": rids,
                "chain_index": [0] * n,
                "request_url": keys,
                "status_code": [200] * n,
                "headers": ["{}"] * n,
                "retry_attempt": [0] * n,
                "is_final": [True] * n,
                "fetcher_name": ["bench"] * n,
                "fetcher_version": ["1"] * n,
                "fetcher_calibre": [10] * n,
                "state": ["success"] * n,
                "logs": [None] * n,
                "traceback": [None] * n,
                "run_time": [0.1] * n,
            }
            if kind is RecordType.GET:
                cols["data"] = pa.array([os.urandom(BODY) for _ in range(n)], type=pa.large_binary())
            arrays = []
            for name in names:
                field = SCHEMAS[kind].field(name)
                values = cols[name]
                if isinstance(values, pa.Array):
                    arrays.append(values)
                elif pa.types.is_timestamp(field.type):
                    arrays.append(pa.array(values, type=pa.int64()).cast(field.type))
                else:
                    arrays.append(pa.array(values, type=field.type))
            table = pa.Table.from_arrays(arrays, schema=SCHEMAS[kind])
            rows.append(table)
            write_partition_file(backend, partition, table, WriteOptions(), part=part)
            del table, rows, cols
        made += per_file
        print(f"  file {f + 1}/{files} written", flush=True)
    return made


def _rid(f: int, i: int) -> str:
    """A canonical UUIDv7-shaped request id, distinct per (file, row) and sorted like them."""
    a, b = f"{f:012x}", f"{i:018x}"
    return f"{a[:8]}-{a[8:12]}-7{b[:3]}-8{b[3:6]}-{b[6:18]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=5.0, help="bodies in the partition, GiB")
    parser.add_argument("--parts", type=int, default=8)
    parser.add_argument("--keep", help="build the store here and keep it")
    args = parser.parse_args()
    tmp = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="wi-compact-bench-"))
    root = tmp / "store"
    try:
        if not root.exists():
            print(f"building {args.gb} GiB in {args.parts} parts + 1 compacted file under {root}")
            rows = build(root, args.gb, args.parts)
        else:
            rows = -1
        size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
        out = subprocess.run([sys.executable, "-c", _CHILD, str(root)], capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr)
        changed, peak, took = out.stdout.split()
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        result = {
            "date": time.strftime("%Y-%m-%d"),
            "commit": commit.stdout.strip(),
            "gb": args.gb,
            "parts": args.parts,
            "rows": rows,
            "store_bytes": size,
            "partitions_changed": int(changed),
            "peak_rss_mib": round(int(peak) / 2**20, 1),
            "seconds": round(float(took), 1),
        }
        print(result)
        (HERE / "results").mkdir(exist_ok=True)
        (HERE / "results" / "compact.json").write_text(json.dumps(result, indent=2) + "\n")
        (HERE / "results" / "compact.md").write_text(
            f"Run {result['date']} at {result['commit']}: one GET partition, {size / 2**30:.2f} GiB of files"
            f" ({args.parts} parts + a compacted file), compacted in {result['seconds']} s,"
            f" peak RSS {result['peak_rss_mib']} MiB.\n"
        )
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
