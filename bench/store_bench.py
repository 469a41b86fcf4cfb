"""Store benchmark: web-index against a DuckDB linear scan, on a synthetic store.

    .venv/bin/python bench/store_bench.py                 # default: 200,000 GET records, a few minutes
    .venv/bin/python bench/store_bench.py --scale S       # 1,000,000 GET records over 10,000 domains
    .venv/bin/python bench/store_bench.py --workloads simple-10k,key-10k --reuse-store PATH

Every workload runs each side (web-index, baseline) in its own subprocess, so
that the peak RSS reported is that side's own. Answers of the two sides are
compared query by query (request id, chain length, crc32 of the final body)
and any mismatch fails the run. The insert buffer is flushed before querying
(the generator flushes and compacts), so the Parquet files hold every record
and the baseline may read them alone. See bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import baseline
import synth
from web_index import FlushPolicy, WebIndex
from web_index.models import (
    AttemptMetadata,
    Page,
    PageKey,
    Query,
    RecordType,
    SimplePageQuery,
    TimeAwarePageQuery,
    iter_queries,
    read_queries,
    write_queries,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SCALES = {"S": 1_000_000, "2S": 2_000_000}
HIT_RATE = 0.8
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # simple | time-aware | key | presence | meta | head | latency | bulk | ingest | compaction
    size: int = 0


def workloads(bulk: int) -> dict[str, Workload]:
    out = [
        Workload("ingest", "ingest"),
        Workload("compaction", "compaction"),
        Workload("simple-1k", "simple", 1_000),
        Workload("simple-10k", "simple", 10_000),
        Workload("time-aware-1k", "time-aware", 1_000),
        Workload("time-aware-10k", "time-aware", 10_000),
        Workload("key-1k", "key", 1_000),
        Workload("key-10k", "key", 10_000),
        Workload("presence-10k", "presence", 10_000),
        Workload("meta-1k", "meta", 1_000),
        Workload("head-1k", "head", 1_000),
        Workload("latency", "latency", 200),
        Workload("bulk", "bulk", bulk),
    ]
    return {w.name: w for w in out}


# -- queries ----------------------------------------------------------------------


class QueryMaker:
    """Seeded query batches from the dataset's manifest: ~80% hits, ~20% misses."""

    def __init__(self, manifest: pa.Table, seed: int) -> None:
        self.rng = random.Random(seed)
        rows = manifest.to_pylist()
        self.get_pages = [r for r in rows if r["method"] == "get" and r["success"]]
        self.get_urls = sorted({r["url"] for r in rows if r["method"] == "get"})
        self.head_urls = sorted({r["url"] for r in rows if r["method"] == "head"})
        self.t0 = synth.START
        self.span = timedelta(days=182)

    def url(self, pool: Sequence[str]) -> str:
        """A stored URL (often spelled differently), or one that was never stored."""
        url = self.rng.choice(pool)
        r = self.rng.random()
        if r > HIT_RATE:
            host = url.split("/")[2]
            if r > (1 + HIT_RATE) / 2:
                host = f"unknown{self.rng.randrange(10**6)}.example.net"
            return f"https://{host}/never-fetched/{self.rng.randrange(10**9)}"
        if r < 0.1:  # another spelling of the same resource: must meet under one key
            scheme, _, host, rest = url.split("/", 3)
            return f"{scheme}//{host.upper()}:443/{rest}#fragment"
        return url

    def calibre(self) -> tuple[int | None, bool]:
        r = self.rng.random()
        if r < 0.7:
            return None, False
        if r < 0.9:
            return 30, False
        return self.rng.choice(synth.FETCHERS)[2], True

    def simple(self, n: int, type: RecordType = RecordType.GET) -> list[Query]:
        pool = self.head_urls if type.method is RecordType.HEAD else self.get_urls
        out: list[Query] = []
        for _ in range(n):
            calibre, strict = self.calibre()
            out.append(SimplePageQuery(url=self.url(pool), calibre=calibre, calibre_strict=strict, type=type))
        return out

    def time_aware(self, n: int) -> list[Query]:
        out: list[Query] = []
        for _ in range(n):
            center = self.t0 + self.span * self.rng.random()
            calibre, strict = self.calibre()
            out.append(
                TimeAwarePageQuery(
                    url=self.url(self.get_urls),
                    not_before=center - timedelta(days=30),
                    not_after=center + timedelta(days=30),
                    timestamp=center if self.rng.random() < 0.5 else None,
                    calibre=calibre,
                    calibre_strict=strict,
                )
            )
        return out

    def keys(self, n: int) -> list[Query]:
        out: list[Query] = []
        for _ in range(n):
            row = self.rng.choice(self.get_pages)
            ts = _EPOCH + timedelta(microseconds=row["ts_us"])
            rid = row["request_id"]
            r = self.rng.random()
            if r > HIT_RATE:  # a miss: right key, wrong time; or a request id from another attempt
                if r > (1 + HIT_RATE) / 2:
                    ts += timedelta(seconds=1)
                else:
                    rid = self.rng.choice(self.get_pages)["request_id"]
            out.append(PageKey(url=row["url"], timestamp=ts, request_id=rid))
        return out

    def mixed(self, n: int) -> list[Query]:
        """The bulk file: the three kinds of get query, interleaved."""
        out: list[Query] = []
        while len(out) < n:
            out += self.simple(1) + self.time_aware(1) + self.keys(1)
        return out[:n]

    def for_workload(self, w: Workload) -> list[Query]:
        makers: dict[str, Callable[[], list[Query]]] = {
            "simple": lambda: self.simple(w.size),
            "presence": lambda: self.simple(w.size),
            "time-aware": lambda: self.time_aware(w.size),
            "key": lambda: self.keys(w.size),
            "meta": lambda: self.simple(w.size, RecordType.GET_METADATA),
            "head": lambda: self.simple(w.size, RecordType.HEAD),
            "bulk": lambda: self.mixed(w.size),
            "latency": lambda: self.simple(w.size) + self.time_aware(w.size) + self.keys(w.size),
        }
        return makers[w.kind]()


# -- the worker side: runs in a subprocess -------------------------------------------


def describe(result: Page | AttemptMetadata | None) -> baseline.Answer:
    """The same summary of an answer as the baseline's."""
    if result is None:
        return None
    if isinstance(result, AttemptMetadata):
        assert result.request_id is not None
        return (result.request_id, 1, zlib.crc32(result.state.value.encode()))
    return (result.request_id, len(result.responses), zlib.crc32(result.final.data or b""))


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one side of one workload; return timings and answers."""
    kind, side = spec["kind"], spec["side"]
    if kind == "ingest":
        return ingest_worker(spec)
    if kind == "compaction":
        return compaction_worker(spec)
    store = Path(spec["store"])
    queries = read_queries(spec["queries"])
    if kind == "latency":
        return latency_worker(side, store, queries, spec)
    if kind == "bulk":
        return bulk_worker(side, store, Path(spec["queries"]), Path(spec["out"]), spec)
    presence = kind == "presence"
    if side == "web-index":
        with WebIndex(store, read_only=True) as idx:
            t = time.perf_counter()
            got: list[Any] = idx.presence(queries) if presence else idx.query(queries)
            seconds = time.perf_counter() - t
        answers = got if presence else [describe(r) for r in got]
    else:
        con = baseline.connect(spec.get("threads"))
        t = time.perf_counter()
        answers = baseline.run(con, store, queries, presence=presence)
        seconds = time.perf_counter() - t
    return {"seconds": seconds, "answers": answers}


def latency_worker(side: str, store: Path, queries: list[Query], spec: dict[str, Any]) -> dict[str, Any]:
    """One query at a time. The baseline, a full scan each, runs only the first few of each kind."""
    per_kind = len(queries) // 3
    take = per_kind if side == "web-index" else min(per_kind, spec["baseline_latency_n"])
    picked = [q for k in range(3) for q in queries[k * per_kind : k * per_kind + take]]
    timings: dict[str, list[float]] = {"simple": [], "time-aware": [], "key": []}
    answers: list[Any] = []
    con = baseline.connect(spec.get("threads")) if side == "baseline" else None
    with WebIndex(store, read_only=True) as idx:
        for i, q in enumerate(picked):
            name = list(timings)[i // take]
            t = time.perf_counter()
            if con is None:
                answers.append(describe(idx.query([q])[0]))
            else:
                answers.append(baseline.run(con, store, [q])[0])
            timings[name].append(time.perf_counter() - t)
    stats = {
        k: {"n": len(v), "p50_ms": _pct(v, 50) * 1e3, "p99_ms": _pct(v, 99) * 1e3} for k, v in timings.items()
    }
    return {"seconds": sum(map(sum, timings.values())), "answers": answers, "latency": stats, "take": take}


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


_BULK_SCHEMA_FIELDS: list[pa.Field[Any]] = [
    pa.field("qi", pa.int64()),
    pa.field("request_id", pa.string()),
    pa.field("rows", pa.int64()),
    pa.field("crc", pa.int64()),
]
_BULK_SCHEMA = pa.schema(_BULK_SCHEMA_FIELDS)


def bulk_worker(side: str, store: Path, src: Path, out: Path, spec: dict[str, Any]) -> dict[str, Any]:
    """Queries from a Parquet file to a Parquet file of results, end to end."""
    t = time.perf_counter()
    answers: list[Any] = []
    if side == "web-index":
        chunk: list[Query] = []
        with WebIndex(store, read_only=True) as idx, pq.ParquetWriter(out, _BULK_SCHEMA) as writer:
            for q in iter_queries(src):
                chunk.append(q)
                if len(chunk) == spec["chunk"]:
                    answers += _write_bulk(writer, len(answers), [describe(r) for r in idx.query(chunk)])
                    chunk = []
            if chunk:
                answers += _write_bulk(writer, len(answers), [describe(r) for r in idx.query(chunk)])
    else:
        con = baseline.connect(spec.get("threads"))
        got = baseline.run(con, store, read_queries(src))
        with pq.ParquetWriter(out, _BULK_SCHEMA) as writer:
            answers = _write_bulk(writer, 0, got)
    return {"seconds": time.perf_counter() - t, "answers": answers}


def _write_bulk(writer: pq.ParquetWriter, start: int, answers: list[Any]) -> list[Any]:
    rows = [
        {
            "qi": start + i,
            "request_id": a[0] if a else None,
            "rows": a[1] if a else 0,
            "crc": a[2] if a else None,
        }
        for i, a in enumerate(answers)
    ]
    writer.write_table(pa.Table.from_pylist(rows, schema=_BULK_SCHEMA))
    return answers


def _ingest_items(records: int, seed: int, domains: int = 200, body_kb: float = 2.0) -> list[Any]:
    params = synth.SynthParams(records=records, domains=domains, body_kb=body_kb, seed=seed)
    specs, _ = synth.plan_attempts(params)
    bodies = synth.BodyMaker(seed, body_kb)
    return [synth.build_item(s, bodies) for s in specs]


def ingest_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Insert into a fresh store (production flush policy); the items are built before timing."""
    items = _ingest_items(spec["records"], spec["seed"])
    mode, root = spec["mode"], Path(spec["store"])
    t = time.perf_counter()
    with WebIndex(root, durable=mode != "non-durable") as idx:
        if mode == "single":
            for item in items:
                idx.insert(*item)
        else:
            for i in range(0, len(items), spec["batch"]):
                idx.insert_many(items[i : i + spec["batch"]])
    seconds = time.perf_counter() - t
    pages = sum(1 for it in items if it[0] == "get" and it[4])
    return {
        "seconds": seconds,
        "attempts": len(items),
        "get_records": pages,
        "started": t,
        "ended": t + seconds,
    }


def compaction_worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Flush several rounds of inserts (several parts per partition), then time ``compact()``."""
    items = _ingest_items(spec["records"], spec["seed"], domains=spec["domains"])
    root = Path(spec["store"])
    rounds = spec["rounds"]
    flush_s = 0.0
    with WebIndex(root, durable=False, policy=FlushPolicy(max_rows=1 << 40, compact_parts=0)) as idx:
        step = -(-len(items) // rounds)
        for i in range(0, len(items), step):
            idx.insert_many(items[i : i + step])
            t = time.perf_counter()
            idx.flush()
            flush_s += time.perf_counter() - t
        before = _store_bytes(root)
        parts = sum(1 for _ in root.glob("*/*/*/*.parquet"))
        t = time.perf_counter()
        partitions = idx.compact()
        seconds = time.perf_counter() - t
    return {
        "seconds": seconds,
        "flush_seconds": flush_s,
        "attempts": len(items),
        "partitions": partitions,
        "part_files": parts,
        "bytes_in": before,
    }


# -- the parent side ----------------------------------------------------------------


def run_side(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Run a worker subprocess; return its result plus its own peak RSS."""
    spec_path = tmp / f"spec-{spec['workload']}-{spec['side']}-{spec.get('mode', '')}.json"
    out_path = spec_path.with_suffix(".out.json")
    spec = {**spec, "result": str(out_path)}
    spec_path.write_text(json.dumps(spec))
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(spec_path)])
    return _collect(proc, out_path, spec)


def _collect(proc: subprocess.Popen[bytes], out_path: Path, spec: dict[str, Any]) -> dict[str, Any]:
    if proc.wait() != 0:
        raise SystemExit(f"worker {spec['workload']}/{spec['side']} failed with exit code {proc.returncode}")
    result: dict[str, Any] = json.loads(out_path.read_text())
    return result


def peak_rss_mb() -> float:
    """This process's peak RSS.

    Read from VmHWM, which exec resets: ``wait4``'s ``ru_maxrss`` of a child
    starts from the parent's peak at fork, so it would report the parent's.
    """
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def check(name: str, a: list[Any], b: list[Any], queries: Sequence[Query] | None = None) -> int:
    """Fail loudly unless both sides answered every query the same; return the number of hits."""
    a = [tuple(x) if isinstance(x, list) else x for x in a]
    b = [tuple(x) if isinstance(x, list) else x for x in b]
    if len(a) != len(b):
        raise SystemExit(f"MISMATCH in {name}: {len(a)} answers vs {len(b)}")
    bad = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if bad:
        i = bad[0]
        q = queries[i] if queries is not None else i
        raise SystemExit(
            f"MISMATCH in {name}: {len(bad)} of {len(a)} answers differ; first {q!r}: {a[i]} vs {b[i]}"
        )
    return sum(1 for x in a if x)


def query_workload(w: Workload, maker: QueryMaker, ctx: dict[str, Any], tmp: Path) -> dict[str, Any]:
    queries = maker.for_workload(w)
    qpath = tmp / f"{w.name}.queries.parquet"
    write_queries(qpath, queries)
    base = {
        "workload": w.name,
        "kind": w.kind,
        "store": str(ctx["store"]),
        "queries": str(qpath),
        **ctx["opts"],
    }
    sides = {}
    for side in ("web-index", "baseline"):
        sides[side] = run_side(
            {**base, "side": side, "out": str(tmp / f"{w.name}.{side}.results.parquet")}, tmp
        )
    wi, bl = sides["web-index"], sides["baseline"]
    if w.kind == "latency":
        take, per = bl["take"], w.size
        idx = [k * per + i for k in range(3) for i in range(take)]
        hits = check(w.name, [wi["answers"][i] for i in idx], bl["answers"])
    else:
        hits = check(w.name, wi["answers"], bl["answers"], queries)
    out = {
        "queries": len(queries),
        "hits": hits,
        "web_index_s": wi["seconds"],
        "baseline_s": bl["seconds"],
        "ratio": bl["seconds"] / wi["seconds"],
        "web_index_rss_mb": wi["peak_rss_mb"],
        "baseline_rss_mb": bl["peak_rss_mb"],
    }
    if w.kind == "latency":
        # Totals of different query counts: only per-kind p50s compare.
        del out["ratio"]
        out["latency"] = {"web_index": wi["latency"], "baseline": bl["latency"]}
        out["ratio_p50"] = {k: bl["latency"][k]["p50_ms"] / v["p50_ms"] for k, v in wi["latency"].items()}
        out["hits_checked"] = len(idx)
    return out


def ingest_workload(ctx: dict[str, Any], tmp: Path) -> dict[str, Any]:
    n, out = ctx["ingest_records"], {}
    modes = [
        ("durable-batch", n, 1),
        ("non-durable", n, 1),
        ("single", ctx["single_inserts"], 1),
        ("two-process", n, 2),
    ]
    for mode, records, procs in modes:
        root = tmp / f"ingest-{mode}"
        spec = {
            "workload": "ingest",
            "kind": "ingest",
            "side": "web-index",
            "store": str(root),
            "batch": 1000,
        }
        spec["mode"] = "durable-batch" if mode == "two-process" else mode
        specs = [{**spec, "records": records // procs, "seed": 11 + k, "tag": k} for k in range(procs)]
        results = _run_parallel(specs, tmp, mode)
        # Two processes: the rate is all records over the span from first start to last end.
        span = max(r["ended"] for r in results) - min(r["started"] for r in results)
        attempts = sum(r["attempts"] for r in results)
        pages = sum(r["get_records"] for r in results)
        out[mode] = {
            "processes": procs,
            "attempts": attempts,
            "get_records": pages,
            "seconds": span,
            "attempts_per_s": attempts / span,
            "get_records_per_s": pages / span,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
        }
        shutil.rmtree(root, ignore_errors=True)
    return out


def _run_parallel(specs: list[dict[str, Any]], tmp: Path, tag: str) -> list[dict[str, Any]]:
    procs = []
    for k, spec in enumerate(specs):
        spec_path = tmp / f"spec-ingest-{tag}-{k}.json"
        out_path = spec_path.with_suffix(".out.json")
        spec = {**spec, "result": str(out_path)}
        spec_path.write_text(json.dumps(spec))
        proc = subprocess.Popen([sys.executable, __file__, "--worker", str(spec_path)])
        procs.append((proc, out_path, spec))
    return [_collect(p, o, s) for p, o, s in procs]


def compaction_workload(ctx: dict[str, Any], tmp: Path) -> dict[str, Any]:
    root = tmp / "compaction"
    spec = {"workload": "compaction", "kind": "compaction", "side": "web-index", "store": str(root)}
    r = run_side({**spec, "records": ctx["compact_records"], "domains": 100, "seed": 23, "rounds": 4}, tmp)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "attempts": r["attempts"],
        "partitions": r["partitions"],
        "part_files": r["part_files"],
        "seconds": r["seconds"],
        "attempts_per_s": r["attempts"] / r["seconds"],
        "mb_per_s": r["bytes_in"] / r["seconds"] / 1e6,
        "flush_seconds_total": r["flush_seconds"],
        "flush_attempts_per_s": r["attempts"] / r["flush_seconds"],
        "peak_rss_mb": r["peak_rss_mb"],
    }


def _store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.parquet"))


def machine_info() -> dict[str, Any]:
    import duckdb
    import polars

    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=HERE, check=False
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "src"], capture_output=True, text=True, cwd=HERE, check=False
    )
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kb / 1024**2, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pyarrow": pa.__version__,
        "duckdb": duckdb.__version__,
        "polars": polars.__version__,
        "git_commit": commit.stdout.strip(),
        "src_dirty": bool(dirty.stdout.strip()),
    }


# -- reporting ------------------------------------------------------------------------


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=150)
    table = Table(title=f"web-index store benchmark ({report['label']})")
    for col in ("workload", "queries", "hits", "web-index s", "DuckDB s", "ratio", "RSS wi/duck MB"):
        table.add_column(col, justify="right" if col != "workload" else "left", no_wrap=True)
    for name, r in report["workloads"].items():
        if "ratio" in r:
            table.add_row(
                name,
                f"{r['queries']:,}",
                f"{r['hits']:,}",
                f"{r['web_index_s']:.2f}",
                f"{r['baseline_s']:.2f}",
                f"{r['ratio']:.1f}x",
                f"{r['web_index_rss_mb']:.0f} / {r['baseline_rss_mb']:.0f}",
            )
    console.print(table)
    # The rest (store size, latency, ingest, compaction) as the markdown snippet has it.
    text = markdown(report)
    console.print(text[text.index("Store:") : text.index("| workload")], markup=False)
    tables = text[text.index("| workload") :]
    console.print(tables[tables.find("\n\n") :], markup=False)


def markdown(report: dict[str, Any]) -> str:
    ds, m, w = report["dataset"], report["machine"], report["workloads"]
    lines = [
        f"### Store benchmark, {report['label']} ({report['date']})",
        "",
        f"Store: {ds['get_pages']:,} GET records ({ds['get_response_rows']:,} response rows), "
        f"{ds['get_failed']:,} failed GET attempts, {ds['head_attempts']:,} HEAD attempts, "
        f"{ds['urls']:,} URLs over {ds['domains']:,} domains, six months; "
        f"{report['store']['files']:,} Parquet files, {report['store']['bytes'] / 1e6:,.0f} MB "
        f"({report['store']['bytes_per_get_record']:,.0f} bytes per GET record, all types included).",
        f"Machine: {m['cpu_count']} x {m['cpu_model']}, {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, DuckDB {m['duckdb']}, polars {m['polars']}; commit {m['git_commit'][:10]}"
        f"{' (src modified)' if m['src_dirty'] else ''}.",
        "Baseline: one DuckDB statement per batch over every file of the type (linear scan), same semantics; "
        "answers checked equal query by query. Warm OS page cache.",
        "",
        "| workload | queries | hits | web-index s | DuckDB scan s | ratio (scan / web-index) "
        "| peak RSS web-index / DuckDB (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in w.items():
        if "ratio" in r:
            lines.append(
                f"| {name} | {r['queries']:,} | {r['hits']:,} | {r['web_index_s']:.2f} "
                f"| {r['baseline_s']:.2f} | {r['ratio']:.1f}x "
                f"| {r['web_index_rss_mb']:.0f} / {r['baseline_rss_mb']:.0f} |"
            )
    if "latency" in w:
        lines += [
            "",
            "| single query | web-index p50 / p99 ms | DuckDB scan p50 / p99 ms | ratio of p50s |",
            "|---|---:|---:|---:|",
        ]
        lat = w["latency"]["latency"]
        for kind in ("simple", "time-aware", "key"):
            a, b = lat["web_index"][kind], lat["baseline"][kind]
            lines.append(
                f"| {kind} (n={a['n']} / {b['n']}) | {a['p50_ms']:.1f} / {a['p99_ms']:.1f} "
                f"| {b['p50_ms']:.0f} / {b['p99_ms']:.0f} | {b['p50_ms'] / a['p50_ms']:.0f}x |"
            )
    if "ingest" in w:
        lines += [
            "",
            "| ingest | attempts | GET records/s | attempts/s | peak RSS MB |",
            "|---|---:|---:|---:|---:|",
        ]
        for mode, r in w["ingest"].items():
            lines.append(
                f"| {mode} ({r['processes']} proc) | {r['attempts']:,} | {r['get_records_per_s']:,.0f} "
                f"| {r['attempts_per_s']:,.0f} | {r['peak_rss_mb']:.0f} |"
            )
    if "compaction" in w:
        c = w["compaction"]
        lines.append(
            f"\n- compaction: {c['attempts']:,} attempts in {c['part_files']:,} part files, "
            f"{c['partitions']:,} partitions: {c['seconds']:.1f} s ({c['attempts_per_s']:,.0f} attempts/s, "
            f"{c['mb_per_s']:.1f} MB/s); flush {c['flush_attempts_per_s']:,.0f} attempts/s"
        )
    g = ds.get("seconds", {})
    if g:
        lines.append(
            f"- generation (non-durable insert_many of {ds['attempts']:,} attempts): "
            f"insert {g['insert_non_durable']} s "
            f"({ds['attempts'] / g['insert_non_durable']:,.0f} attempts/s), "
            f"flush {g['flush']} s, compact {g['compact']} s (listing memoised, see README)"
        )
    return "\n".join(lines) + "\n"


# -- main ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000, help="successful GET attempts in the store")
    ap.add_argument("--scale", choices=sorted(SCALES), help="S = 1,000,000 GET records, 2S = 2,000,000")
    ap.add_argument("--domains", type=int, help="default: 1,000 (10,000 with --scale)")
    ap.add_argument("--workloads", default="all", help="comma-separated names, or 'all'")
    ap.add_argument("--keep-store", type=Path, help="build (or reuse) the dataset in this folder")
    ap.add_argument("--reuse-store", type=Path, help="use the finished dataset in this folder; never build")
    ap.add_argument("--bulk-queries", type=int, help="default 30,000 (1,000,000 with --scale)")
    ap.add_argument("--ingest-records", type=int, default=20_000)
    ap.add_argument("--single-inserts", type=int, default=2_000)
    ap.add_argument("--compact-records", type=int, default=10_000, help="attempts in the compaction store")
    ap.add_argument("--baseline-latency-n", type=int, default=5, help="single queries per kind for the scan")
    ap.add_argument("--duckdb-threads", type=int, help="default: DuckDB's own (all cores)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def dataset_for(args: argparse.Namespace) -> tuple[Path, dict[str, Any], str]:
    records = SCALES[args.scale] if args.scale else args.records
    domains = args.domains or (10_000 if args.scale else 1_000)
    params = synth.SynthParams(records=records, domains=domains)
    label = f"scale {args.scale}" if args.scale else f"{records:,} records"
    if args.reuse_store:
        info = synth.load_info(args.reuse_store)
        if info is None:
            raise SystemExit(f"no finished dataset in {args.reuse_store}")
        return args.reuse_store, info, label
    folder = args.keep_store or synth.dataset_dir(params)
    return folder, synth.ensure_dataset(params, folder), label


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker.read_text())
        result = worker(spec)
        result["peak_rss_mb"] = peak_rss_mb()
        Path(spec["result"]).write_text(json.dumps(result))
        return
    folder, info, label = dataset_for(args)
    store = folder / "store"
    nfiles = baseline.assert_no_superseded(store)
    bulk = args.bulk_queries or (1_000_000 if args.scale else 30_000)
    catalogue = workloads(bulk)
    names = list(catalogue) if args.workloads == "all" else [n.strip() for n in args.workloads.split(",")]
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; choose from {list(catalogue)}")
    maker = QueryMaker(pq.read_table(folder / "manifest.parquet"), args.seed)
    opts = {"threads": args.duckdb_threads, "baseline_latency_n": args.baseline_latency_n, "chunk": 10_000}
    ctx = {
        "store": store,
        "opts": opts,
        "ingest_records": args.ingest_records,
        "single_inserts": args.single_inserts,
        "compact_records": args.compact_records,
    }
    size = _store_bytes(store)
    report: dict[str, Any] = {
        "label": label,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine_info(),
        "dataset": {**info, "folder": str(folder)},
        "store": {"files": nfiles, "bytes": size, "bytes_per_get_record": size / info["get_pages"]},
        "workloads": {},
    }
    with tempfile.TemporaryDirectory(prefix="wi-bench-", dir=HERE / "data") as tmpname:
        tmp = Path(tmpname)
        for name in names:
            w = catalogue[name]
            print(f"[{time.strftime('%H:%M:%S')}] {name} ...", flush=True)
            if w.kind == "ingest":
                report["workloads"][name] = ingest_workload(ctx, tmp)
            elif w.kind == "compaction":
                report["workloads"][name] = compaction_workload(ctx, tmp)
            else:
                report["workloads"][name] = query_workload(w, maker, ctx, tmp)
            print(f"    {json.dumps(report['workloads'][name], default=str)[:300]}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    tag = args.scale or f"{info['params']['records'] // 1000}k"
    (RESULTS / f"store-{tag}.json").write_text(json.dumps(report, indent=2, default=str))
    (RESULTS / f"store-{tag}.md").write_text(markdown(report))
    print_report(report)


if __name__ == "__main__":
    main()
