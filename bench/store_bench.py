"""Store benchmark: web-index against a DuckDB linear scan, on a synthetic store.

    .venv/bin/python bench/store_bench.py                 # default: 200,000 GET records, a few minutes
    .venv/bin/python bench/store_bench.py --scale S       # 1,000,000 GET records over 10,000 domains
    .venv/bin/python bench/store_bench.py --workloads simple-10k,key-10k --reuse-store PATH
    .venv/bin/python bench/store_bench.py --scale S --workloads key-1k --sides baseline
    .venv/bin/python bench/store_bench.py --compare results/store-S.json results/store-2S.json

Every workload runs each side (web-index, baseline) in its own subprocess, so
that the peak RSS reported is that side's own. Answers of the two sides are
compared query by query (request id, chain length, crc32 of the final body)
and any mismatch fails the run (``--sides`` runs one side only, unchecked).
The generator writes every record into compacted Parquet files (the insert
buffer is empty), so the baseline may read the files alone. See bench/README.md.
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
from concurrent.futures import ThreadPoolExecutor
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
    read_queries,
    write_queries,
)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
SCALES = {"S": 1_000_000, "2S": 2_000_000, "10S": 10_000_000}
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
        cols = {name: manifest.column(name).to_pylist() for name in ("url", "method", "ts_us", "request_id")}
        success = manifest.column("success").to_pylist()
        rows = zip(cols["url"], cols["method"], cols["ts_us"], cols["request_id"], success, strict=True)
        # (url, ts_us, request_id) of every successful GET attempt, in manifest order.
        self.get_pages = [(u, t, r) for u, m, t, r, ok in rows if m == "get" and ok]
        self.get_urls = sorted({u for u, m in zip(cols["url"], cols["method"], strict=True) if m == "get"})
        self.head_urls = sorted({u for u, m in zip(cols["url"], cols["method"], strict=True) if m == "head"})
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
            url, ts_us, rid = self.rng.choice(self.get_pages)
            ts = _EPOCH + timedelta(microseconds=ts_us)
            r = self.rng.random()
            if r > HIT_RATE:  # a miss: right key, wrong time; or a request id from another attempt
                if r > (1 + HIT_RATE) / 2:
                    ts += timedelta(seconds=1)
                else:
                    rid = self.rng.choice(self.get_pages)[2]
            out.append(PageKey(url=url, timestamp=ts, request_id=rid))
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
    if kind == "bulk":  # reads its queries itself: a million held here would count as web-index's memory
        return bulk_worker(side, store, Path(spec["queries"]), Path(spec["out"]), spec)
    queries = read_queries(spec["queries"])
    if kind == "latency":
        return latency_worker(side, store, queries, spec)
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
    """Queries from a Parquet file to a Parquet file of results, end to end.

    web-index writes full results (bodies included) with ``WebIndex.query_file``;
    the baseline writes only each answer's summary, which favours it. The
    summaries compared are read back from web-index's file after the clock stops.
    """
    if side == "web-index":
        jobs = spec.get("bulk_jobs") or 1
        from _jobs import TreePeak

        with TreePeak(os.getpid()) as tree:
            t = time.perf_counter()
            with WebIndex(store, read_only=True) as idx:
                idx.query_file(src, out, jobs=jobs)  # its default batches of 20,000
            seconds = time.perf_counter() - t
        # The peak of the run itself (with its worker processes, summed): reading the results
        # back for the check (below) holds a million summaries and is the benchmark's.
        rss = max(peak_rss_mb(), tree.rss / 2**20)
        answers = _answers_of_result_file(out)
        return {
            "seconds": seconds,
            "answers": answers,
            "run_peak_rss_mb": rss,
            "jobs": jobs,
            "pss_mb": tree.pss / 2**20,
        }
    t = time.perf_counter()
    con = baseline.connect(spec.get("threads"))
    got = baseline.run(con, store, read_queries(src))
    with pq.ParquetWriter(out, _BULK_SCHEMA) as writer:
        answers = _write_bulk(writer, 0, got)
    return {"seconds": time.perf_counter() - t, "answers": answers}


def _answers_of_result_file(path: Path) -> list[Any]:
    """The same summary as ``describe`` of each row of a RESULT_SCHEMA file, in order."""
    answers: list[Any] = []
    for batch in pq.ParquetFile(path).iter_batches(columns=["found", "request_id", "responses", "state"]):
        for row in batch.to_pylist():
            if not row["found"]:
                answers.append(None)
            elif row["responses"] is not None:
                chain = row["responses"]
                answers.append((row["request_id"], len(chain), zlib.crc32(chain[-1]["data"] or b"")))
            else:
                answers.append((row["request_id"], 1, zlib.crc32(row["state"].encode())))
    return answers


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


_WARM = True  # --no-warm turns it off


def warm_page_cache(store: Path) -> float:
    """Read every file of ``store`` once, so that the run that follows finds the store
    in the OS page cache, and return the seconds it took.

    The benchmark machine's kernel pages out file pages idle for about a minute
    (DAMON, ``/sys/kernel/mm/damon``), so a store read by one workload is partly
    cold again for the next; both sides get the same warm-up before each run.
    """
    t = time.perf_counter()
    paths = [p for p in store.rglob("*") if p.is_file()]

    def read(path: Path) -> None:
        with path.open("rb", buffering=0) as fh:
            while fh.read(1 << 20):
                pass

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(read, paths, chunksize=256))
    return time.perf_counter() - t


def run_side(spec: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Run a worker subprocess (after warming the page cache for a query workload);
    return its result plus its own peak RSS."""
    if _WARM and spec["kind"] not in ("ingest", "compaction"):
        warm_page_cache(Path(spec["store"]))
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
    for side in ctx["sides"]:
        sides[side] = run_side(
            {**base, "side": side, "out": str(tmp / f"{w.name}.{side}.results.parquet")}, tmp
        )
    wi, bl = sides.get("web-index"), sides.get("baseline")
    out: dict[str, Any] = {"queries": len(queries)}
    if w.kind == "latency":
        out["latency"] = {}
        if wi is not None:
            out["latency"]["web_index"] = wi["latency"]
        if bl is not None:
            out["latency"]["baseline"] = bl["latency"]
    if wi is not None and bl is not None:
        if w.kind == "latency":
            take, per = bl["take"], w.size
            idx = [k * per + i for k in range(3) for i in range(take)]
            out["hits"] = check(w.name, [wi["answers"][i] for i in idx], bl["answers"])
            out["hits_checked"] = len(idx)
        else:
            out["hits"] = check(w.name, wi["answers"], bl["answers"], queries)
    else:  # one side only: nothing to compare the answers with
        only = wi if wi is not None else bl
        assert only is not None
        out["hits"] = sum(1 for x in only["answers"] if x)
        out["unchecked"] = True
    if wi is not None:
        out["web_index_s"] = wi["seconds"]
        out["web_index_rss_mb"] = wi["peak_rss_mb"]
        if "jobs" in wi:
            out["web_index_jobs"] = wi["jobs"]
            out["web_index_pss_mb"] = wi["pss_mb"]
    if bl is not None:
        out["baseline_s"] = bl["seconds"]
        out["baseline_rss_mb"] = bl["peak_rss_mb"]
    if wi is not None and bl is not None:
        if w.kind == "latency":
            # Totals of different query counts: only per-kind p50s compare.
            lat = out["latency"]
            out["ratio_p50"] = {
                k: lat["baseline"][k]["p50_ms"] / v["p50_ms"] for k, v in lat["web_index"].items()
            }
        else:
            out["ratio"] = bl["seconds"] / wi["seconds"]
    return out


def ingest_workload(ctx: dict[str, Any], tmp: Path) -> dict[str, Any]:
    """Each mode ``ingest_rounds`` times, the modes interleaved round by round (so
    that a slow minute of the machine hits every mode alike); the median round."""
    n, rounds = ctx["ingest_records"], ctx["ingest_rounds"]
    modes = [
        ("durable-batch", n, 1),
        ("non-durable", n, 1),
        ("single", ctx["single_inserts"], 1),
        ("two-process", n, 2),
    ]
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode, _, _ in modes}
    for r in range(rounds):
        for mode, records, procs in modes:
            root = tmp / f"ingest-{mode}-{r}"
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
            runs[mode].append(
                {
                    "processes": procs,
                    "attempts": attempts,
                    "get_records": pages,
                    "seconds": span,
                    "attempts_per_s": attempts / span,
                    "get_records_per_s": pages / span,
                    "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
                }
            )
            shutil.rmtree(root, ignore_errors=True)
    out: dict[str, Any] = {}
    for mode, rs in runs.items():
        mid = sorted(rs, key=lambda r: r["get_records_per_s"])[len(rs) // 2]
        every = [r["get_records_per_s"] for r in rs]
        out[mode] = {**mid, "rounds": len(rs), "round_get_records_per_s": every}
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


def store_stats(root: Path) -> dict[str, Any]:
    """Files and bytes per type (and of the key index), with the Parquet footers' share.

    A footer's length is in the file's last 8 bytes (4-byte length, ``PAR1``):
    the serialised ``FileMetaData``, i.e. ``metadata.serialized_size``. The
    page indexes (column and offset indexes) sit before it and are not counted.
    """
    out: dict[str, Any] = {}
    groups = {t.value: root / t.value for t in RecordType} | {"index": root / "_index"}
    for name, folder in groups.items():
        files = nbytes = footer = 0
        for path in folder.rglob("*.parquet"):
            with path.open("rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                fh.seek(max(0, size - 8))
                tail = fh.read(8)
            files += 1
            nbytes += size
            if len(tail) == 8 and tail[4:] == b"PAR1":
                footer += int.from_bytes(tail[:4], "little") + 8
        out[name] = {"files": files, "bytes": nbytes, "footer_bytes": footer}
    out[RecordType.GET.value]["body_column_bytes"] = _body_column_bytes(root / RecordType.GET.value)
    data = [v for k, v in out.items() if k != "index"]
    out["data"] = {k: sum(v[k] for v in data) for k in ("files", "bytes", "footer_bytes")}
    out["all"] = {k: out["data"][k] + out["index"][k] for k in ("files", "bytes", "footer_bytes")}
    return out


def _body_column_bytes(folder: Path) -> int:
    """Compressed bytes of the ``data`` (body) column in every file of the folder (from the footers)."""
    total = 0
    for path in folder.rglob("*.parquet"):
        meta = pq.ParquetFile(path).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        if "data" not in names:
            continue
        col = names.index("data")
        total += sum(meta.row_group(r).column(col).total_compressed_size for r in range(meta.num_row_groups))
    return total


def size_target(stats: dict[str, Any], info: dict[str, Any]) -> dict[str, Any] | None:
    """The issue's target: store bytes <= 1.1 x zstd(bodies, each alone) + 200 bytes a record.

    Two readings of "record": a successful GET (a page), or any stored attempt
    (GET and HEAD, failures included). Store bytes: every Parquet file, key
    index included (the insert buffer is empty).
    """
    zstd = info.get("body_zstd_bytes")
    if zstd is None:  # a dataset from an older generator
        return None
    store, data = stats["all"]["bytes"], stats["data"]["bytes"]
    body_column = stats[RecordType.GET.value].get("body_column_bytes", 0)
    out: dict[str, Any] = {
        "store_bytes": store,
        "data_bytes": data,  # without the key index
        "body_column_bytes": body_column,  # the bodies as stored: pages of many bodies compressed together
        "body_bytes": info["body_bytes"],
        "body_zstd_bytes": zstd,
    }
    for reading, records in (("per_get_record", info["get_pages"]), ("per_attempt", info["attempts"])):
        limit = 1.1 * zstd + 200 * records
        out[reading] = {
            "records": records,
            "limit_bytes": round(limit),
            "ratio": store / limit,
            "ok": store <= limit,
            "ratio_without_index": data / limit,
            "overhead_bytes_per_record": (store - 1.1 * zstd) / records,
            # Everything but the body column, per record: what the "200 bytes" is meant to cover.
            "non_body_bytes_per_record": (store - body_column) / records,
        }
    return out


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

    # The markdown snippet is also the console report: it is plain enough to read.
    Console(width=150).print(markdown(report), markup=False, highlight=False)


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def markdown(report: dict[str, Any]) -> str:
    ds, m, w = report["dataset"], report["machine"], report["workloads"]
    st = report["store"]
    lines = [
        f"### Store benchmark, {report['label']} ({report['date']})",
        "",
        f"Store: {ds['get_pages']:,} GET records ({ds['get_response_rows']:,} response rows), "
        f"{ds['get_failed']:,} failed GET attempts, {ds['head_attempts']:,} HEAD attempts, "
        f"{ds['urls']:,} URLs over {ds['domains']:,} domains, six months; "
        f"{st['files']:,} Parquet files, {st['bytes'] / 1e6:,.0f} MB "
        f"({st['bytes_per_get_record']:,.0f} bytes per GET record, all types and the key index included)"
        + (
            " -- built by older store code than this run's: figures may not be current"
            if ds.get("stale_store_code")
            else ""
        )
        + ".",
        f"Machine: {m['cpu_count']} x {m['cpu_model']}, {m['memory_gib']} GiB; Python {m['python']}, "
        f"pyarrow {m['pyarrow']}, DuckDB {m['duckdb']}, polars {m['polars']}; commit {m['git_commit'][:10]}"
        f"{' (src modified)' if m['src_dirty'] else ''}.",
        "Baseline: one DuckDB statement per batch over every file of the type (linear scan), same semantics; "
        "answers checked equal query by query"
        + ("" if report.get("sides", "both") == "both" else f" (not here: {report['sides']} side only)")
        + ". Warm OS page cache.",
    ]
    earlier: dict[str, list[str]] = {}
    for name, r in w.items():
        if r.get("commit") not in (None, m["git_commit"][:10]):
            earlier.setdefault(r["commit"], []).append(name)
    lines += [f"Kept from a run at commit {c}: {', '.join(names)}." for c, names in earlier.items()]
    lines += _size_lines(st)
    lines += [
        "",
        "| workload | queries | hits | web-index s | DuckDB scan s | ratio (scan / web-index) "
        "| peak RSS web-index / DuckDB (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in w.items():
        if "queries" in r and name != "latency":
            jobs = f" ({r['web_index_jobs']} worker processes)" if r.get("web_index_jobs", 1) > 1 else ""
            unchecked = " (unchecked)" if r.get("unchecked") else ""
            pss = f" (PSS {r['web_index_pss_mb']:.0f})" if r.get("web_index_pss_mb") else ""
            lines.append(
                f"| {name}{jobs} | {r['queries']:,} | {r['hits']:,}{unchecked} "
                f"| {_fmt(r.get('web_index_s'), '.2f')} | {_fmt(r.get('baseline_s'), '.2f')} "
                f"| {_fmt(r.get('ratio'), '.1f', 'x')} "
                f"| {_fmt(r.get('web_index_rss_mb'), '.0f')}{pss} / {_fmt(r.get('baseline_rss_mb'), '.0f')} |"
            )
    if "latency" in w:
        lines += [
            "",
            "| single query | web-index p50 / p99 ms | DuckDB scan p50 / p99 ms | ratio of p50s |",
            "|---|---:|---:|---:|",
        ]
        lat = w["latency"]["latency"]
        for kind in ("simple", "time-aware", "key"):
            a, b = lat.get("web_index", {}).get(kind), lat.get("baseline", {}).get(kind)
            ratio = b["p50_ms"] / a["p50_ms"] if a and b else None
            lines.append(
                f"| {kind} (n={a['n'] if a else 0} / {b['n'] if b else 0}) "
                f"| {_fmt(a and a['p50_ms'], '.1f')} / {_fmt(a and a['p99_ms'], '.1f')} "
                f"| {_fmt(b and b['p50_ms'], '.0f')} / {_fmt(b and b['p99_ms'], '.0f')} "
                f"| {_fmt(ratio, '.0f', 'x')} |"
            )
    if "ingest" in w:
        lines += [
            "",
            "| ingest (median round) | attempts | GET records/s | attempts/s | every round, GET records/s "
            "| peak RSS MB |",
            "|---|---:|---:|---:|---|---:|",
        ]
        for mode, r in w["ingest"].items():
            if not isinstance(r, dict):  # "commit"
                continue
            every = ", ".join(f"{x:,.0f}" for x in r.get("round_get_records_per_s", [r["get_records_per_s"]]))
            lines.append(
                f"| {mode} ({r['processes']} proc) | {r['attempts']:,} | {r['get_records_per_s']:,.0f} "
                f"| {r['attempts_per_s']:,.0f} | {every} | {r['peak_rss_mb']:.0f} |"
            )
    if "compaction" in w:
        c = w["compaction"]
        lines.append(
            f"\n- compaction: {c['attempts']:,} attempts in {c['part_files']:,} part files, "
            f"{c['partitions']:,} partitions: {c['seconds']:.1f} s ({c['attempts_per_s']:,.0f} attempts/s, "
            f"{c['mb_per_s']:.1f} MB/s); flush {c['flush_attempts_per_s']:,.0f} attempts/s"
        )
    g = ds.get("seconds", {})
    if "validate" in g:
        if "compaction" not in w:  # else the compaction line opened the list
            lines.append("")
        lines.append(
            f"- generation ({ds['attempts']:,} attempts, {ds.get('workers', 2)} worker processes, files "
            f"written directly in compacted form; per phase the slowest worker): plan {g['plan']} s, "
            f"build + validate {g['validate']} s, tables {g['tables']} s, write {g['write']} s; "
            f"workers {g['workers']} s, then compact() {g['compact']} s; total {g['total']} s"
        )
    return "\n".join(lines) + "\n"


def _size_lines(st: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "| files | count | MB | footers MB | footer share |",
        "|---|---:|---:|---:|---:|",
    ]
    for name in (*(t.value for t in RecordType), "index", "all"):
        t = st["types"][name]
        share = t["footer_bytes"] / t["bytes"] if t["bytes"] else 0.0
        lines.append(
            f"| {name} | {t['files']:,} | {t['bytes'] / 1e6:,.1f} | {t['footer_bytes'] / 1e6:,.1f} "
            f"| {share:.0%} |"
        )
    target = st.get("target")
    if target:
        lines.append("")
        lines.append(
            f"Size target (store <= 1.1 x zstd-3 of each final body alone + 200 bytes a record): "
            f"store {target['store_bytes'] / 1e6:,.1f} MB, bodies {target['body_bytes'] / 1e6:,.1f} MB raw, "
            f"{target['body_zstd_bytes'] / 1e6:,.1f} MB zstd; the body column takes "
            f"{target.get('body_column_bytes', 0) / 1e6:,.1f} MB in the store (pages of many bodies "
            "compressed together; the synthetic bodies draw on one pool of paragraphs, which favours that)."
        )
        for reading, label in (("per_get_record", "GET record"), ("per_attempt", "stored attempt")):
            r = target[reading]
            lines.append(
                f"- a record = a {label} ({r['records']:,}): limit {r['limit_bytes'] / 1e6:,.1f} MB, "
                f"store / limit = {r['ratio']:.3f} ({'met' if r['ok'] else 'NOT met'}; "
                f"{r.get('ratio_without_index', r['ratio']):.3f} without the key index); "
                f"{r['overhead_bytes_per_record']:,.0f} bytes a record beyond 1.1 x zstd; "
                f"everything but the body column: {r.get('non_body_bytes_per_record', 0):,.0f} bytes a record"
            )
    return lines


# -- main ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000, help="successful GET attempts in the store")
    ap.add_argument(
        "--scale", choices=sorted(SCALES), help="S = 1,000,000 GET records, 2S = 2,000,000, 10S = 10,000,000"
    )
    ap.add_argument("--domains", type=int, help="default: 1,000 (10,000 with --scale)")
    ap.add_argument("--workloads", default="all", help="comma-separated names, or 'all'")
    ap.add_argument(
        "--sides",
        choices=["both", "web-index", "baseline"],
        default="both",
        help="run both sides (and compare answers) or one; one side writes store-<tag>-<side>.json",
    )
    ap.add_argument("--keep-store", type=Path, help="build (or reuse) the dataset in this folder")
    ap.add_argument("--reuse-store", type=Path, help="use the finished dataset in this folder; never build")
    ap.add_argument("--bulk-queries", type=int, help="default 30,000 (1,000,000 with --scale)")
    ap.add_argument("--ingest-records", type=int, default=50_000)
    ap.add_argument("--ingest-rounds", type=int, default=3, help="each ingest mode this many times; median")
    ap.add_argument("--single-inserts", type=int, default=2_000)
    ap.add_argument("--compact-records", type=int, default=10_000, help="attempts in the compaction store")
    ap.add_argument("--baseline-latency-n", type=int, default=5, help="single queries per kind for the scan")
    ap.add_argument("--duckdb-threads", type=int, help="default: DuckDB's own (all cores)")
    ap.add_argument(
        "--bulk-jobs", type=int, default=os.cpu_count() or 1, help="query_file's jobs (default: the cores)"
    )
    ap.add_argument(
        "--no-warm", action="store_true", help="do not read the store into the page cache before each run"
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--compare",
        nargs=2,
        type=Path,
        metavar=("SMALL", "LARGE"),
        help="no run: table of LARGE/SMALL time ratios per workload from two result files "
        "(e.g. results/store-S.json results/store-2S.json)",
    )
    ap.add_argument(
        "--growth",
        nargs=2,
        metavar=("SMALL", "LARGE"),
        choices=sorted(SCALES),
        help="run the web-index side of --workloads (default simple-10k) on both scales, alternating, "
        "--repeat rounds, plus the baseline once per scale; write results/growth-SMALL-vs-LARGE.*",
    )
    ap.add_argument("--repeat", type=int, default=5, help="rounds of --growth (default 5)")
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
        if not args.scale:
            label = f"{info['params']['records']:,} records"
        return args.reuse_store, info, label
    folder = args.keep_store or synth.dataset_dir(params)
    return folder, synth.ensure_dataset(params, folder), label


def _keep_other_workloads(report: dict[str, Any], path: Path, order: list[str]) -> None:
    """A run of some workloads updates the result file of the same dataset: the
    workloads it did not run are kept from the file, each with its own commit."""
    if not path.exists():
        return
    old = json.loads(path.read_text())
    if old.get("dataset", {}).get("folder") != report["dataset"]["folder"]:
        return
    merged = {}
    for name in order:
        if name in report["workloads"]:
            merged[name] = report["workloads"][name]
        elif name in old.get("workloads", {}):
            merged[name] = {"commit": old["machine"]["git_commit"][:10], **old["workloads"][name]}
    report["workloads"] = merged


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        spec = json.loads(args.worker.read_text())
        result = worker(spec)
        result["peak_rss_mb"] = result.pop("run_peak_rss_mb", None) or peak_rss_mb()
        Path(spec["result"]).write_text(json.dumps(result))
        return
    global _WARM
    _WARM = not args.no_warm
    if args.growth:
        growth(args)
        return
    if args.compare:
        text = compare_scales(*args.compare)
        out = RESULTS / f"scales-{args.compare[0].stem}-vs-{args.compare[1].stem}.md"
        out.write_text(text)
        print(text + f"\n(written to {out})")
        return
    folder, info, label = dataset_for(args)
    store = folder / "store"
    stale = info.get("store_code") != synth.store_code()
    if stale:
        print(
            f"WARNING: {folder} was written by store code that writes differently from the current one "
            "(rows, schemas, write options or key index): its files are not what the store writes now. "
            "Delete the folder to rebuild it."
        )
    baseline.assert_no_superseded(store)
    bulk = args.bulk_queries or (1_000_000 if args.scale else 30_000)
    catalogue = workloads(bulk)
    names = list(catalogue) if args.workloads == "all" else [n.strip() for n in args.workloads.split(",")]
    unknown = [n for n in names if n not in catalogue]
    if unknown:
        raise SystemExit(f"unknown workloads {unknown}; choose from {list(catalogue)}")
    sides = ["web-index", "baseline"] if args.sides == "both" else [args.sides]
    if "web-index" not in sides:
        skipped = [n for n in names if catalogue[n].kind in ("ingest", "compaction")]
        if skipped:
            print(f"skipping {skipped}: web-index only")
        names = [n for n in names if n not in skipped]
    maker = QueryMaker(pq.read_table(folder / "manifest.parquet"), args.seed)
    opts = {
        "threads": args.duckdb_threads,
        "baseline_latency_n": args.baseline_latency_n,
        "bulk_jobs": args.bulk_jobs,
    }
    ctx = {
        "store": store,
        "opts": opts,
        "sides": sides,
        "ingest_records": args.ingest_records,
        "ingest_rounds": args.ingest_rounds,
        "single_inserts": args.single_inserts,
        "compact_records": args.compact_records,
    }
    stats = store_stats(store)
    size = stats["all"]["bytes"]
    report: dict[str, Any] = {
        "label": label,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "sides": args.sides,
        "machine": machine_info(),
        "dataset": {**info, "folder": str(folder), "stale_store_code": stale},
        "store": {
            "files": stats["all"]["files"],
            "bytes": size,
            "bytes_per_get_record": size / info["get_pages"],
            "types": stats,
            "target": size_target(stats, info),
        },
        "workloads": {},
    }
    (HERE / "data").mkdir(exist_ok=True)  # absent when the dataset was kept elsewhere
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
            report["workloads"][name]["commit"] = report["machine"]["git_commit"][:10]
            print(f"    {json.dumps(report['workloads'][name], default=str)[:300]}", flush=True)
    RESULTS.mkdir(exist_ok=True)
    tag = result_tag(args.scale or f"{info['params']['records'] // 1000}k", args.sides)
    _keep_other_workloads(report, RESULTS / f"store-{tag}.json", list(catalogue))
    (RESULTS / f"store-{tag}.json").write_text(json.dumps(report, indent=2, default=str))
    (RESULTS / f"store-{tag}.md").write_text(markdown(report))
    print_report(report)


def growth(args: argparse.Namespace) -> None:
    """How the time of a batch grows with the store: the same workloads on two
    scales, alternated in one run (ABBA order, so that a machine getting faster
    or slower through the run weighs on both scales alike), medians reported.
    Separate runs minutes apart differed by up to 10% on this machine."""
    small, large = args.growth
    names = ["simple-10k"] if args.workloads == "all" else [n.strip() for n in args.workloads.split(",")]
    catalogue = workloads(0)
    bad = [n for n in names if n not in catalogue or catalogue[n].kind in ("ingest", "compaction", "bulk")]
    if bad:
        raise SystemExit(f"--growth runs query workloads only, not {bad}")
    scales: dict[str, dict[str, Any]] = {}
    for scale in (small, large):
        folder, info, _label = dataset_for(argparse.Namespace(**{**vars(args), "scale": scale}))
        if info.get("store_code") != synth.store_code():
            raise SystemExit(f"{folder} was written by other store code: delete it to rebuild")
        maker = QueryMaker(pq.read_table(folder / "manifest.parquet"), args.seed)
        scales[scale] = {"store": folder / "store", "info": info, "maker": maker}
    samples: dict[str, dict[str, list[float]]] = {n: {small: [], large: []} for n in names}
    out: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": machine_info(),
        "scales": {
            sc: {"get_records": v["info"]["get_pages"], "store_code": v["info"]["store_code"]}
            for sc, v in scales.items()
        },
        "repeat": args.repeat,
        "workloads": {},
    }
    opts = {"threads": args.duckdb_threads, "baseline_latency_n": args.baseline_latency_n}
    with tempfile.TemporaryDirectory(prefix="wi-growth-", dir=HERE / "data") as tmpname:
        tmp = Path(tmpname)
        specs: dict[tuple[str, str], dict[str, Any]] = {}
        for name in names:
            w = catalogue[name]
            for sc, v in scales.items():
                qpath = tmp / f"{name}-{sc}.queries.parquet"
                queries = v["maker"].for_workload(w)
                write_queries(qpath, queries)
                specs[name, sc] = {
                    "workload": f"{name}-{sc}",
                    "kind": w.kind,
                    "store": str(v["store"]),
                    "queries": str(qpath),
                    "out": str(tmp / f"{name}-{sc}.results.parquet"),
                    **opts,
                }
        answers: dict[tuple[str, str], list[Any]] = {}
        for r in range(args.repeat):
            order = (small, large) if r % 2 == 0 else (large, small)
            for name in names:
                for sc in order:
                    res = run_side({**specs[name, sc], "side": "web-index"}, tmp)
                    samples[name][sc].append(res["seconds"])
                    answers.setdefault((name, sc), res["answers"])
                    print(f"[{time.strftime('%H:%M:%S')}] round {r + 1} {name} {sc}: {res['seconds']:.3f} s")
        for name in names:
            rec: dict[str, Any] = {"web_index_s": samples[name]}
            for sc in (small, large):
                bl = run_side({**specs[name, sc], "side": "baseline"}, tmp)
                check(f"{name}-{sc}", answers[name, sc], bl["answers"])
                rec.setdefault("baseline_s", {})[sc] = bl["seconds"]
                print(
                    f"[{time.strftime('%H:%M:%S')}] baseline {name} {sc}: {bl['seconds']:.2f} s, same answers"
                )
            med = {sc: _median(samples[name][sc]) for sc in (small, large)}
            rec["web_index_median_s"] = med
            rec["ratio_of_medians"] = med[large] / med[small]
            rec["round_ratios"] = [
                b / a for a, b in zip(samples[name][small], samples[name][large], strict=True)
            ]
            rec["baseline_ratio"] = rec["baseline_s"][large] / rec["baseline_s"][small]
            out["workloads"][name] = rec
    RESULTS.mkdir(exist_ok=True)
    stem = RESULTS / f"growth-{small}-vs-{large}"
    stem.with_suffix(".json").write_text(json.dumps(out, indent=2, default=str))
    text = growth_markdown(out, small, large)
    stem.with_suffix(".md").write_text(text)
    print(text)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def growth_markdown(out: dict[str, Any], small: str, large: str) -> str:
    sc = out["scales"]
    m = out["machine"]
    lines = [
        f"### Growth: {large} against {small} ({out['date']})",
        "",
        f"GET records {sc[small]['get_records']:,} -> {sc[large]['get_records']:,}. Each web-index run "
        f"is a fresh process; {out['repeat']} rounds, the scales alternated (ABBA). The baseline (DuckDB "
        "scan) ran once per scale, and its answers equalled web-index's. "
        f"Machine: {m['cpu_count']} x {m['cpu_model']}, {m['memory_gib']} GiB; commit {m['git_commit'][:10]}"
        f"{' (+ uncommitted changes)' if m['src_dirty'] else ''}.",
        "",
        f"| workload | web-index {small} median s | web-index {large} median s | {large} / {small} "
        f"| per-round ratios | baseline {small} s | baseline {large} s | baseline ratio |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for name, r in out["workloads"].items():
        med = r["web_index_median_s"]
        rounds = ", ".join(f"{x:.2f}" for x in r["round_ratios"])
        lines.append(
            f"| {name} | {med[small]:.3f} | {med[large]:.3f} | **{r['ratio_of_medians']:.2f}x** | {rounds} "
            f"| {r['baseline_s'][small]:.2f} | {r['baseline_s'][large]:.2f} | {r['baseline_ratio']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def compare_scales(small_path: Path, large_path: Path) -> str:
    """Markdown: per workload and side, the seconds at both scales and their ratio."""
    small, large = json.loads(small_path.read_text()), json.loads(large_path.read_text())

    def records(r: dict[str, Any]) -> int:
        return int(r["dataset"]["get_pages"])

    lines = [
        f"### Scaling: {large['label']} against {small['label']}",
        "",
        f"GET records {records(small):,} -> {records(large):,} (x{records(large) / records(small):.2f}); "
        f"store {small['store']['bytes'] / 1e6:,.0f} -> {large['store']['bytes'] / 1e6:,.0f} MB "
        f"(x{large['store']['bytes'] / small['store']['bytes']:.2f}).",
        "",
        "| workload | side | small s | large s | large / small | peak RSS small / large MB |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, a in small["workloads"].items():
        b = large["workloads"].get(name)
        if b is None:
            continue
        rows: list[tuple[str, float | None, float | None, Any, Any]] = []
        if name == "latency":
            for side in ("web_index", "baseline"):
                for kind in ("simple", "time-aware", "key"):
                    x = a.get("latency", {}).get(side, {}).get(kind)
                    y = b.get("latency", {}).get(side, {}).get(kind)
                    if x and y:
                        rows.append((f"{side} {kind} p50", x["p50_ms"] / 1e3, y["p50_ms"] / 1e3, None, None))
        elif "seconds" in a:  # compaction
            rows.append(
                ("web_index", a["seconds"], b.get("seconds"), a.get("peak_rss_mb"), b.get("peak_rss_mb"))
            )
        elif "queries" in a:
            for side in ("web_index", "baseline"):
                if f"{side}_s" in a and f"{side}_s" in b:
                    rows.append(
                        (side, a[f"{side}_s"], b[f"{side}_s"], a[f"{side}_rss_mb"], b[f"{side}_rss_mb"])
                    )
        for side, x, y, rx, ry in rows:
            ratio = y / x if x and y else None
            lines.append(
                f"| {name} | {side} | {_fmt(x, '.3f')} | {_fmt(y, '.3f')} | {_fmt(ratio, '.2f', 'x')} "
                f"| {_fmt(rx, '.0f')} / {_fmt(ry, '.0f')} |"
            )
    return "\n".join(lines) + "\n"


def result_tag(scale: str, sides: str) -> str:
    """``S``, ``200k``...; a one-sided run gets its own file: ``S-baseline``."""
    return scale if sides == "both" else f"{scale}-{sides}"


if __name__ == "__main__":
    main()
