"""Scale-out benchmark: one Parquet-to-Parquet batch answered by one process
(``WebIndex.query_file``), then on a Dask LocalCluster of one and of two worker
processes (``query_file(scheduler=...)``), in the same run, on the synthetic
store at S and 2S (docs/scale.md).

    .venv/bin/python bench/dask_bench.py                        # S and 2S, 200,000 queries each
    .venv/bin/python bench/dask_bench.py --scales S --queries 50000   # keeps 2S's figures in dask.json
    .venv/bin/python bench/dask_bench.py --scales 20000 --queries 5000   # a smoke run, seconds

The datasets are store_bench's (built once by synth.py and cached in
bench/data/; S took 30 minutes on 2 shared cores, most of it writing capture
indexes). The queries are the bulk workload's (simple, time-aware and page keys interleaved, ~80% on stored
URLs). Every run is a fresh subprocess (its peak RSS its own) after the store
is read once into the page cache; the three result files must be equal row for
row. Writes bench/results/dask.json and dask.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import synth
from store_bench import SCALES, QueryMaker, machine_info, peak_rss_mb, warm_page_cache
from web_index import WebIndex
from web_index.models import write_queries

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
RUNS = ("one process", "1 worker", "2 workers")


def _proc() -> dict[str, float]:
    """This process's peak RSS (MB), CPU seconds and bytes read (rchar: page cache included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return {
        "peak_rss_mb": peak_rss_mb(),
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "read_bytes": float(io["rchar"]),
        "read_calls": float(io["syscr"]),
    }


def _worker_proc() -> dict[str, float]:
    # Runs on a Dask worker (pickled by value from __main__): the same as _proc, self-contained.
    import resource as res
    from pathlib import Path as Where

    usage = res.getrusage(res.RUSAGE_SELF)
    io = dict(line.split(": ") for line in Where("/proc/self/io").read_text().splitlines())
    hwm = next(ln for ln in Where("/proc/self/status").read_text().splitlines() if ln.startswith("VmHWM:"))
    return {
        "peak_rss_mb": int(hwm.split()[1]) / 1024,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "read_bytes": float(io["rchar"]),
        "read_calls": float(io["syscr"]),
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """One run, in its own process: ``workers`` 0 is one process, else a LocalCluster of that many."""
    store, src, out, workers = Path(spec["store"]), spec["queries"], spec["out"], spec["workers"]
    if workers == 0:
        before = _proc()
        t = time.perf_counter()
        with WebIndex(store, read_only=True) as index:
            index.query_file(src, out)
        seconds = time.perf_counter() - t
        return {"seconds": seconds, "client": _delta(before, _proc()), "workers": []}
    from distributed import Client, LocalCluster

    t = time.perf_counter()
    with (
        LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        started = time.perf_counter() - t
        workers_before = client.run(_worker_proc)
        before = _proc()
        t = time.perf_counter()
        with WebIndex(store, read_only=True) as index:
            index.query_file(src, out, scheduler=cluster.scheduler_address)
        seconds = time.perf_counter() - t
        client_stats = _delta(before, _proc())
        workers_after = client.run(_worker_proc)
    return {
        "seconds": seconds,
        "cluster_start_s": started,
        "client": client_stats,
        "workers": [_delta(workers_before[w], workers_after[w]) for w in sorted(workers_after)],
    }


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: after[k] if k == "peak_rss_mb" else after[k] - before[k] for k in after}


def _run_in_subprocess(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    warm_page_cache(Path(spec["store"]))
    path = tmp / f"spec-{spec['workers']}.json"
    path.write_text(json.dumps(spec))
    proc = subprocess.run([sys.executable, __file__, "--run", str(path)], check=False)
    if proc.returncode != 0:
        raise SystemExit(f"run with {spec['workers']} workers failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(path.with_suffix(".out.json").read_text())
    return result


def _same_rows(a: str, b: str) -> bool:
    """Whether two result files hold the same rows in the same order (a batch at a time)."""
    left = pq.ParquetFile(a).iter_batches(batch_size=4096)
    right = pq.ParquetFile(b).iter_batches(batch_size=4096)
    return all(x.equals(y) for x, y in zip(left, right, strict=True))


def bench_scale(scale: str, queries: int, seed: int, tmp: Path) -> dict[str, Any]:
    records = SCALES[scale] if scale in SCALES else int(scale)
    params = synth.SynthParams(records=records, domains=10_000 if scale in SCALES else 1_000)
    folder = synth.dataset_dir(params)
    info = synth.ensure_dataset(params, folder)
    store = folder / "store"
    files = [p for p in store.rglob("*.parquet")]
    maker = QueryMaker(pq.read_table(folder / "manifest.parquet"), seed)
    src = tmp / f"queries-{scale}.parquet"
    write_queries(src, maker.mixed(queries))
    del maker
    runs: dict[str, Any] = {}
    for name, workers in zip(RUNS, (0, 1, 2), strict=True):
        out = str(tmp / f"results-{scale}-{workers}.parquet")
        spec = {"store": str(store), "queries": str(src), "out": out, "workers": workers}
        runs[name] = _run_in_subprocess(spec, tmp)
        runs[name]["out"] = out
        print(f"  {scale} {name}: {runs[name]['seconds']:.2f} s", flush=True)
    first = runs[RUNS[0]]["out"]
    for name in RUNS[1:]:
        if not _same_rows(first, runs[name]["out"]):
            raise SystemExit(f"{scale}: {name} answered differently from one process")
    hits = sum(pq.read_table(first, columns=["found"]).column("found").to_pylist())
    for r in runs.values():
        os.remove(r.pop("out"))
    return {
        "records": info["params"]["records"],
        "domains": info["params"]["domains"],
        "store_files": len(files),
        "store_bytes": sum(p.stat().st_size for p in files),
        "queries": queries,
        "hits": hits,
        "runs": runs,
    }


def markdown(report: dict[str, Any]) -> str:
    m = report["machine"]
    lines = [
        f"### Dask scale-out, {report['date']}",
        "",
        f"Machine: {m['cpu_count']} x {m['cpu_model']}, {m['memory_gib']} GiB; Python {m['python']}, "
        f"distributed {report['distributed']}; commit {m['git_commit'][:10]}.",
        "One batch of mixed queries (simple, time-aware, page keys; bodies written) from a Parquet file "
        "to a Parquet file; the cluster is a LocalCluster on the same machine (threads_per_worker=1), "
        "started before the clock. Answers checked equal row for row. Warm OS page cache.",
        "",
        "| scale | run | wall s | queries/s | vs one process | client CPU s | client peak RSS MB "
        "| worker CPU s (each) | worker peak RSS MB (each) | read by workers MB | read KB / query |",
        "|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|",
    ]
    for scale, s in report["scales"].items():
        base = s["runs"][RUNS[0]]["seconds"]
        for name in RUNS:
            r = s["runs"][name]
            ws = r["workers"]
            cpu = " / ".join(f"{w['cpu_s']:.1f}" for w in ws) or "-"
            rss = " / ".join(f"{w['peak_rss_mb']:,.0f}" for w in ws) or "-"
            read = sum(w["read_bytes"] for w in ws) if ws else r["client"]["read_bytes"]
            when = f", run {s['run']['date']}" if "run" in s else ""
            lines.append(
                f"| {scale} ({s['records']:,} records, {s['store_files']:,} files{when}) | {name} "
                f"| {r['seconds']:.2f} | {s['queries'] / r['seconds']:,.0f} | {base / r['seconds']:.2f}x "
                f"| {r['client']['cpu_s']:.1f} | {r['client']['peak_rss_mb']:,.0f} "
                f"| {cpu} | {rss} "
                f"| {read / 1e6:,.0f} | {read / s['queries'] / 1e3:.1f} |"
            )
    lines += [
        "",
        "Queries: "
        + "; ".join(f"{k} {v['queries']:,} ({v['hits']:,} hits)" for k, v in report["scales"].items())
        + ". Client CPU includes the in-process scheduler; a run's read bytes are read() calls "
        "(rchar), page cache included: what an object store would be asked for, give or take the "
        "footers its read cache keeps.",
    ]
    return "\n".join(lines) + "\n"


def _keep_other_scales(report: dict[str, Any], path: Path) -> None:
    """Keep the scales of an earlier run that this one did not run (each says its date and commit)."""
    if not path.exists():
        return
    earlier = json.loads(path.read_text())
    for scale, result in earlier["scales"].items():
        if scale not in report["scales"]:
            result.setdefault("run", {"date": earlier["date"], "commit": earlier["machine"]["git_commit"]})
            report["scales"][scale] = result
    order = sorted(report["scales"], key=lambda k: SCALES.get(k, 0))
    report["scales"] = {k: report["scales"][k] for k in order}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--scales", nargs="+", default=["S", "2S"], help="S, 2S, or a number of records (1,000 domains)"
    )
    ap.add_argument("--queries", type=int, default=200_000, help="queries in the batch (default 200,000)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        spec = json.loads(args.run.read_text())
        args.run.with_suffix(".out.json").write_text(json.dumps(run(spec)))
        return
    import distributed

    report: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine_info(),
        "distributed": distributed.__version__,
        "scales": {},
    }
    with tempfile.TemporaryDirectory(prefix="dask-bench-") as tmp:
        for scale in args.scales:
            report["scales"][scale] = bench_scale(scale, args.queries, args.seed, Path(tmp))
    name = "dask" if set(args.scales) <= set(SCALES) else "dask-" + "-".join(args.scales)
    _keep_other_scales(report, RESULTS / f"{name}.json")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / f"{name}.md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
