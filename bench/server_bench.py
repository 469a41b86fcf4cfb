"""The archive server against pywb 2.10 over the same captures, in one run: CDX ``closest``
lookups, Resource API requests and prefix queries over HTTP.

    .venv/bin/python bench/server_bench.py                                  # ~10 min the first time
    .venv/bin/python bench/server_bench.py --prefix-captures 1000000 --workloads prefix --out server-prefix-1m

Datasets (built once, cached under ``--workdir``, deterministic from ``--seed``):

- *main*: ``--records`` successful GET attempts (100,000) over ``--domains`` (1,000) domains,
  the shape of bench/synth.py (a Zipf law: a few large sites with thousands of paths, many small
  domains; six months, 1-4 fetches a URL, failures, HEADs, redirect chains, 1-5 KB HTML bodies),
  stored with ``WebIndex.insert_many`` in batches, then ``flush()`` and ``compact()``, and
  exported with ``export_warcs`` to ``.warc.gz`` + a sorted CDXJ, which pywb serves;
- *prefix*: one site (``www.bigsite.com``) with ``--prefix-captures`` captures (100,000; the
  issue's figure is 1,000,000), two a URL, in ``--prefix-sections`` sections, tiny bodies.

Servers, each a process of its own on a free 127.0.0.1 port: ``web-index serve`` (this
checkout's .venv), pywb's ``warcserver`` (its CDX server ``/store/index`` and Resource API
``/store/resource``: the like-for-like side) and pywb's ``wayback`` (the front end users reach:
``/store/cdx``, which asks its warcserver over HTTP, and the ``id_`` replay).

Workloads, the same queries to every side, from a client process of its own
(bench/_http_client.py: httpx, keep-alive):

- ``cdx-closest``: ``cdx?url=U&closest=TS&limit=1`` for ``--queries`` captures drawn from the
  CDXJ, TS within 3 days of the capture; the sides must answer the same capture;
- ``resource``: the capture closest to TS as a WARC record (web-index and warcserver
  ``resource?url=U&closest=TS``), and pywb wayback's ``/store/TSid_/U`` (the archived response,
  read from the WARC); the payloads and Memento-Datetime must agree;
- ``prefix``: ``cdx?url=P&matchType=prefix&limit=1000`` on the prefix dataset, P the site root
  (``--prefix-repeat`` times) and ``--prefix-queries`` sections: the time to the whole answer.

Latency (p50/p99) is sequential, the sides alternated query by query (each query's first side
rotates); throughput is each side alone under ``--connections`` (8, then 32) keep-alive
connections for ``--seconds`` (15) each. Before each run the dataset's files are read once (the
VM pages out idle files: see bench/README.md), unless ``--no-warm``. Results:
bench/results/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import hashlib
import json
import os
import platform
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

import _pywb
import synth
from _procs import CLI, busy, cpu_seconds, free_port, stop
from pack_bench import percentile
from web_index import WebIndex, WriteOptions, __version__
from web_index.archive import export_warcs, find_captures, parse_cdx_query
from web_index.models import AttemptMetadata, AttemptState, Response

HERE = Path(__file__).resolve().parent
GENERATOR_VERSION = 1
COLL = "store"  # web-index serve's collection name; pywb's is made the same
SIDES = ("web-index", "pywb warcserver", "pywb wayback")
PYWB = SIDES[1:]
WORKLOADS = ("cdx-closest", "resource", "prefix")
BATCH = 5_000  # attempts an insert_many
CLOSEST_WITHIN = timedelta(days=3)
PREFIX_LIMIT = 1000
BIG_HOST = "www.bigsite.com"
# Leaf frames of py-spy stacks that are waits, not work (py-spy -f raw --function).
IDLE_FRAMES = ("_worker (concurrent/futures/thread.py", "run (asyncio/runners.py")


# -- datasets -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MainParams:
    records: int = 100_000
    domains: int = 1_000
    seed: int = 1

    def folder(self, workdir: Path) -> Path:
        return workdir / f"main-{self.records}-{_digest(self)}"


@dataclass(frozen=True)
class PrefixParams:
    captures: int = 100_000
    sections: int = 50
    seed: int = 1

    def folder(self, workdir: Path) -> Path:
        return workdir / f"prefix-{self.captures}-{_digest(self)}"


def _digest(params: Any) -> str:
    # The store's body page size names the dataset too: a store built with other pages
    # (16 KiB before 2026-11-30) is not the one this code would write.
    pages = WriteOptions().body_page_bytes
    text = json.dumps({**dataclasses.asdict(params), "v": GENERATOR_VERSION, "pages": pages}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:10]


def ensure_dataset(params: MainParams | PrefixParams, workdir: Path) -> tuple[Path, dict[str, Any]]:
    """The dataset's folder (``store/``, ``warc/``, ``info.json``), built if missing."""
    folder = params.folder(workdir)
    info_path = folder / "info.json"
    if info_path.exists():
        # A dataset built before capture indexes existed gets them here; a no-op otherwise.
        with WebIndex(folder / "store") as index:
            index.compact()
        return folder, json.loads(info_path.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    print(f"building {folder} ...", flush=True)
    times: dict[str, float] = {}
    t = time.perf_counter()
    with WebIndex(folder / "store", create=True, durable=False) as index:
        attempts = _insert(index, params)
        times["insert_s"] = round(time.perf_counter() - t, 1)
        index.flush()
        times["flush_s"] = round(time.perf_counter() - t - times["insert_s"], 1)
        t_compact = time.perf_counter()
        index.compact()
        times["compact_s"] = round(time.perf_counter() - t_compact, 1)
    t_export = time.perf_counter()
    with WebIndex(folder / "store", read_only=True) as index:
        report = export_warcs(index, folder / "warc", name="bench")
    times["export_s"] = round(time.perf_counter() - t_export, 1)
    times["total_s"] = round(time.perf_counter() - t, 1)
    assert report.cdxj is not None
    info = {
        "params": dataclasses.asdict(params),
        "generator_version": GENERATOR_VERSION,
        "attempts": attempts,
        "captures": report.responses + report.revisits,
        "revisits": report.revisits,
        "warc_files": len(report.files),
        "warc_bytes": report.bytes,
        "cdxj_bytes": report.cdxj.stat().st_size,
        "store_bytes": _du(folder / "store"),
        "store_files": sum(1 for p in (folder / "store").rglob("*.parquet")),
        "build": times,
        "built_at": _git_head(),
        "load_during_build": [round(x, 2) for x in os.getloadavg()],
    }
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    print(f"built in {times['total_s']} s: {json.dumps(info)}", flush=True)
    return folder, info


def _insert(index: WebIndex, params: MainParams | PrefixParams) -> int:
    if isinstance(params, MainParams):
        sp = synth.SynthParams(records=params.records, domains=params.domains, seed=params.seed)
        specs, _ = synth.plan_attempts(sp)
        bodies = synth.BodyMaker(sp.seed, sp.body_kb)
        for i in range(0, len(specs), BATCH):
            index.insert_many([synth.build_item(s, bodies) for s in specs[i : i + BATCH]])
        return len(specs)
    items = _prefix_items(params)
    done = 0
    while batch := [item for _, item in zip(range(BATCH * 2), items, strict=False)]:
        index.insert_many(batch)
        done += len(batch)
    return done


def prefix_sections(params: PrefixParams) -> list[str]:
    rng = random.Random(f"server-bench-sections-{params.seed}")
    return [f"{rng.choice(synth._WORDS)}-{k}" for k in range(params.sections)]


def _prefix_items(params: PrefixParams) -> Any:
    """``params.captures`` GET attempts of one site: URLs in sections, two captures each
    (the second 1-60 days after the first), 100-byte bodies."""
    rng = random.Random(f"server-bench-prefix-{params.seed}")
    sections = prefix_sections(params)
    name, version, calibre, _ = synth.FETCHERS[0]
    span = int(timedelta(days=120).total_seconds())
    for n in range(params.captures):
        u = n // 2
        path = f"/{sections[u % len(sections)]}/{synth._WORDS[u % len(synth._WORDS)]}-{u}"
        if n % 2 == 0:
            first = synth.START + timedelta(seconds=rng.randrange(span))
            ts = first
        else:
            ts = first + timedelta(seconds=rng.randrange(86_400, 60 * 86_400))
        url = f"https://{BIG_HOST}{path}"
        meta = AttemptMetadata(
            state=AttemptState.SUCCESS,
            url=url,
            fetcher_name=name,
            fetcher_version=version,
            fetcher_calibre=calibre,
            run_time=0.1,
        )
        body = f"<html><title>{path}</title><p>capture {n}</p></html>\n".encode()
        response = Response(
            url=url,
            request_url=url,
            status_code=200,
            headers={"content-type": "text/html"},
            timestamp=ts + timedelta(milliseconds=80),
            data=body,
            is_final=True,
            fetcher_name=name,
            fetcher_version=version,
            fetcher_calibre=calibre,
        )
        yield ("get", url, ts, meta, [response])


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def warm(paths: list[Path]) -> None:
    """Read every file once so that the servers find it in the page cache (bench/README.md)."""
    for root in paths:
        for p in sorted(q for q in root.rglob("*") if q.is_file()):
            with p.open("rb") as fh:
                while fh.read(1 << 22):
                    pass


# -- servers --------------------------------------------------------------------------------


class Servers:
    """web-index serve and pywb's warcserver and wayback over one dataset."""

    def __init__(
        self,
        folder: Path,
        workdir: Path,
        *,
        pywb_nodelay: bool = False,
        serve_workers: int = 1,
        pywb_workers: int = 1,
    ) -> None:
        self.procs: dict[str, subprocess.Popen[Any]] = {}
        self.base: dict[str, str] = {}
        try:
            self._start(folder, workdir, pywb_nodelay, serve_workers, pywb_workers)
        except BaseException:
            self.close()
            raise

    def _start(
        self, folder: Path, workdir: Path, pywb_nodelay: bool, serve_workers: int, pywb_workers: int
    ) -> None:
        port = free_port()
        log = (workdir / f"serve-{folder.name}.log").open("ab")
        command = [CLI, "serve", "--store", str(folder / "store"), "--port", str(port)]
        self.procs["web-index"] = subprocess.Popen(
            [*command, "--workers", str(serve_workers)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.base["web-index"] = f"http://127.0.0.1:{port}"
        pywb_dir = workdir / f"pywb-{folder.name}"
        pywb_dir.mkdir(exist_ok=True)
        _pywb.layout(
            pywb_dir, sorted((folder / "warc").glob("*.warc.gz")), folder / "warc" / "bench.cdxj", COLL
        )
        for side, kind in (("pywb warcserver", "warcserver"), ("pywb wayback", "wayback")):
            workers = pywb_workers if kind == "warcserver" else 1
            self.procs[side], self.base[side] = _pywb.start(
                kind, pywb_dir, COLL, nodelay=pywb_nodelay, workers=workers
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.base["web-index"] + "/", timeout=5, trust_env=False)
                break
            except httpx.TransportError:
                if self.procs["web-index"].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("web-index serve did not start; see its log in --workdir") from None
                time.sleep(0.2)

    def cpu(self) -> dict[str, float]:
        """CPU seconds (user + system) each server has used so far (with ``--workers``, its
        processes' together)."""
        return {side: sum(cpu_seconds(pid) for pid in _family(p.pid)) for side, p in self.procs.items()}

    def peak_rss_mib(self) -> dict[str, float]:
        """Each server's peak RSS (with ``--workers``, its processes' peaks added up)."""
        out = {}
        for side, p in self.procs.items():
            out[side] = 0.0
            for pid in _family(p.pid):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        out[side] = round(out[side] + int(line.split()[1]) / 1024, 1)
        return out

    def close(self) -> int:
        return stop(list(self.procs.values()))


def _family(pid: int) -> list[int]:
    """``pid`` and the processes it started (a server's workers), from /proc."""
    out = [pid]
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\nPPid:\t{pid}\n" in status.read_text():
                out.append(int(status.parent.name))
        except OSError:
            continue
    return out


def cdx_path(side: str) -> str:
    return f"/{COLL}/index" if side == "pywb warcserver" else f"/{COLL}/cdx"


def request_for(workload: str, side: str, base: str, q: dict[str, str]) -> tuple[str, str]:
    """The URL asking ``side`` for query ``q`` in ``workload``, and how to read its answer."""
    if workload == "cdx-closest":
        return base + cdx_path(side) + "?" + urlencode(
            {"url": q["url"], "closest": q["closest"], "limit": 1}
        ), "cdx"
    if workload == "resource":
        if side == "pywb wayback":
            return f"{base}/{COLL}/{q['closest']}id_/{q['url']}", "replay"
        return f"{base}/{COLL}/resource?" + urlencode({"url": q["url"], "closest": q["closest"]}), "record"
    params = {"url": q["url"], "matchType": "prefix", "limit": PREFIX_LIMIT}
    return base + cdx_path(side) + "?" + urlencode(params), "cdx"


def client(job: dict[str, Any]) -> dict[str, Any]:
    """Run one job in a fresh client process (bench/_http_client.py); ``process_cpu_s`` is that
    process's whole CPU time, start-up included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, str(HERE / "_http_client.py")],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"client failed ({done.returncode}):\n{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result: dict[str, Any] = json.loads(done.stdout)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    result["process_cpu_s"] = round(cpu, 2)
    return result


# -- queries --------------------------------------------------------------------------------


def sample_queries(cdxj: Path, n: int, seed: int) -> list[dict[str, str]]:
    """``n`` captures drawn from the CDXJ (revisits left out), each asked for at a moment
    within ``CLOSEST_WITHIN`` of it."""
    lines = [line for line in cdxj.read_text().splitlines() if '"warc/revisit"' not in line]
    rng = random.Random(f"server-bench-queries-{seed}")
    out = []
    for line in rng.sample(lines, min(n, len(lines))):
        _, ts, rest = line.split(" ", 2)
        when = datetime.strptime(ts, "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        shift = rng.uniform(-1, 1) * CLOSEST_WITHIN.total_seconds()
        closest = (when + timedelta(seconds=shift)).strftime("%Y%m%d%H%M%S")
        out.append({"url": json.loads(rest)["url"], "capture": ts, "closest": closest})
    return out


def prefix_queries(params: PrefixParams, n: int, repeat: int, seed: int) -> list[dict[str, str]]:
    rng = random.Random(f"server-bench-prefixes-{seed}")
    sections = prefix_sections(params)
    root = [{"url": f"{BIG_HOST}/", "kind": "root"}] * repeat
    picked = rng.sample(sections, min(n, len(sections)))
    return root + [{"url": f"{BIG_HOST}/{s}/", "kind": "section"} for s in picked]


# -- running --------------------------------------------------------------------------------


def ms(seconds: list[float], p: float) -> float:
    return round(1000 * (statistics.median(seconds) if p == 50 else percentile(seconds, p)), 2)


def run_sequential(
    servers: Servers, workload: str, queries: list[dict[str, str]], warmup: list[dict[str, str]]
) -> dict[str, Any]:
    """Every query to every side, one at a time, the sides alternated; latencies and the
    comparison of their answers."""
    if warmup:
        client({"mode": "sequential", "timeout": 600, "requests": _alternated(servers, workload, warmup)})
    cpu0, busy0, t0 = servers.cpu(), busy(), time.perf_counter()
    requests = _alternated(servers, workload, queries)
    got = client({"mode": "sequential", "timeout": 600, "requests": requests})
    wall = time.perf_counter() - t0
    cpu1 = servers.cpu()
    by_side: dict[str, list[float]] = {s: [] for s in SIDES}
    answers: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    for (side, _, _), secs, answer in zip(requests, got["seconds"], got["answers"], strict=True):
        by_side[side].append(secs)
        answers[side].append(answer)
    server_cpu = {s: cpu1[s] - cpu0[s] for s in SIDES}
    out: dict[str, Any] = {
        "queries": len(queries),
        "wall_s": round(wall, 1),
        "client_cpu_s": got["process_cpu_s"],
        "other_cpu_s": round(busy() - busy0 - sum(server_cpu.values()) - got["process_cpu_s"], 1),
        "sides": {},
    }
    for side in SIDES:
        xs = by_side[side]
        statuses: dict[str, int] = {}
        for a in answers[side]:
            statuses[str(a["status"])] = statuses.get(str(a["status"]), 0) + 1
        out["sides"][side] = {
            "p50_ms": ms(xs, 50),
            "p99_ms": ms(xs, 99),
            "mean_ms": round(1000 * statistics.fmean(xs), 2),
            "max_ms": round(1000 * max(xs), 2),
            "statuses": statuses,
            "server_cpu_ms_per_req": round(1000 * server_cpu[side] / len(xs), 2),
            "each_ms": [round(1000 * x, 2) for x in xs],  # in the order of ``asked``
        }
    out["asked"] = queries
    out["mismatches"] = compare(workload, queries, answers)
    if workload == "prefix":
        kinds = [q["kind"] for q in queries]
        out["lines"] = {s: sorted({a.get("lines", 0) for a in answers[s]}) for s in SIDES}
        for kind in ("root", "section"):
            out[kind] = {
                s: {
                    "p50_ms": ms([x for x, k in zip(by_side[s], kinds, strict=True) if k == kind], 50),
                    "p99_ms": ms([x for x, k in zip(by_side[s], kinds, strict=True) if k == kind], 99),
                    "n": kinds.count(kind),
                }
                for s in SIDES
            }
    return out


def _alternated(servers: Servers, workload: str, queries: list[dict[str, str]]) -> list[list[str]]:
    requests = []
    for i, q in enumerate(queries):
        for k in range(len(SIDES)):
            side = SIDES[(i + k) % len(SIDES)]
            url, kind = request_for(workload, side, servers.base[side], q)
            requests.append([side, url, kind])
    return requests


def compare(
    workload: str, queries: list[dict[str, str]], answers: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Where the sides' answers to one query differ: status, then what the workload answers
    (cdx: the first line's timestamp and URL, and for a prefix every line's key and timestamp;
    resource: Memento-Datetime, the archived status and the payload's crc32; pywb wayback's id_
    answer is the archived response itself, an archived 301 included)."""

    def key(workload: str, a: dict[str, Any]) -> Any:
        if a["status"] != 200:
            return ("status", a["status"])
        if workload == "cdx-closest":
            return tuple(a["first"])
        if workload == "prefix":
            return (a["lines"], a["keys_crc"])
        return (a["memento"], a["http_status"], a["payload_crc"])

    found: dict[str, Any] = {}
    for other in PYWB:
        bad = []
        for i, q in enumerate(queries):
            mine, theirs = key(workload, answers["web-index"][i]), key(workload, answers[other][i])
            if mine != theirs:
                bad.append({"query": q, "web-index": answers["web-index"][i], other: answers[other][i]})
        found[other] = {"count": len(bad), "examples": bad[:5]}
    return found


def run_concurrent(
    servers: Servers,
    workload: str,
    queries: list[dict[str, str]],
    args: argparse.Namespace,
    files: list[Path],
) -> dict[str, dict[str, Any]]:
    """Each side alone under ``n`` keep-alive connections, for each ``n`` of ``--connections``."""
    out: dict[str, dict[str, Any]] = {}
    for conns in args.connections:
        level = out[str(conns)] = {}
        for side in SIDES:
            if not args.no_warm:
                warm(files)
            urls = [request_for(workload, side, servers.base[side], q)[0] for q in queries]
            cpu0, busy0, load = servers.cpu(), busy(), os.getloadavg()[0]
            job = {"mode": "concurrent", "urls": urls, "connections": conns, "seconds": args.seconds}
            got = client(job | {"timeout": 600})
            server_cpu = servers.cpu()[side] - cpu0[side]
            xs, n = got["seconds"], len(got["seconds"])
            level[side] = r = {
                "requests": n,
                "elapsed_s": got["elapsed_s"],
                "req_per_s": round(n / got["elapsed_s"], 1),
                "p50_ms": ms(xs, 50) if xs else None,
                "p99_ms": ms(xs, 99) if xs else None,
                "statuses": got["statuses"],
                "errors": got["errors"],
                "first_errors": got["first_errors"],
                "server_cpu_s": round(server_cpu, 1),
                "server_cpu_ms_per_req": round(1000 * server_cpu / max(n, 1), 2),
                "client_cpu_s": got["process_cpu_s"],
                "other_cpu_s": round(busy() - busy0 - server_cpu - got["process_cpu_s"], 1),
                "load_before": round(load, 2),
            }
            print(
                f"  {workload} x{conns} {side}: {r['req_per_s']} req/s (p50 {r['p50_ms']} ms, "
                f"server CPU {r['server_cpu_ms_per_req']} ms/req, other CPU {r['other_cpu_s']} s)",
                flush=True,
            )
    return out


def best_rps(r: dict[str, Any], side: str) -> tuple[float, str]:
    """A side's highest req/s over the connection counts run, and that count."""
    return max((level[side]["req_per_s"], conns) for conns, level in r["concurrent"].items())


def profile(folder: Path, workload: str, queries: list[dict[str, str]], top: int = 18) -> dict[str, Any]:
    """cProfile of what the CDX handler runs for these queries (``find_captures``; the Resource
    API's ``closest_capture`` reads the same rows), in this process: where web-index's time goes."""
    prof = cProfile.Profile()
    with WebIndex(folder / "store", read_only=True) as index:
        t = time.perf_counter()
        prof.enable()
        for q in queries:
            params = {"url": [q["url"]], "matchType": ["prefix"], "limit": [str(PREFIX_LIMIT)]}
            if workload != "prefix":
                params = {"url": [q["url"]], "closest": [q["closest"]], "limit": ["1"]}
            find_captures(index, parse_cdx_query(params), source=COLL)
        prof.disable()
        total = time.perf_counter() - t
    stats = pstats.Stats(prof)
    rows = []
    for (path, line, func), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": f"{Path(path).name}:{line}({func})",
                "calls": calls,
                "own_s": round(tottime, 3),
                "cum_s": round(cumtime, 3),
                "cum_pct": round(100 * cumtime / total, 1),
                "own_pct": round(100 * tottime / total, 1),
            }
        )
    return {
        "queries": len(queries),
        "seconds": round(total, 2),
        "ms_per_query": round(1000 * total / len(queries), 1),
        "by_cum": sorted(rows, key=lambda r: -r["cum_s"])[:top],
        "by_own": sorted(rows, key=lambda r: -r["own_s"])[:top],
    }


def py_spy(
    binary: str, servers: Servers, workload: str, queries: list[dict[str, str]], seconds: float, out: Path
) -> dict[str, Any]:
    """py-spy (sampling, 100 Hz, active threads) on the web-index server during an extra x8 run of
    ``workload`` (not one of the measured runs): where the server's own time goes, request handling
    included. Returns the frames most often on the stack (inclusive) and on top of it (self)."""
    pid = servers.procs["web-index"].pid
    rec = subprocess.Popen(
        [binary, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "100", "--format",
         "raw", "--function", "--output", str(out)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    time.sleep(1.0)  # attached before the load starts
    urls = [request_for(workload, "web-index", servers.base["web-index"], q)[0] for q in queries]
    got = client(
        {"mode": "concurrent", "urls": urls, "connections": 8, "seconds": seconds - 2, "timeout": 600}
    )
    _, err = rec.communicate(timeout=120)
    if rec.returncode != 0 or not out.exists():
        return {"error": err[-500:]}
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = idle = 0
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        if frames[-1].startswith(IDLE_FRAMES):  # a pool thread waiting for work, the loop in epoll
            idle += n
            continue
        total += n
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n

    def top(counts: dict[str, int], k: int = 25) -> list[dict[str, Any]]:
        best = sorted(counts.items(), key=lambda kv: -kv[1])[:k]
        return [{"frame": f, "samples": c, "pct": round(100 * c / total, 1)} for f, c in best]

    return {
        "workload": workload,
        "requests": len(got["seconds"]),
        "samples": total,
        "idle_samples": idle,
        "raw": str(out),
        "inclusive": top(inclusive),
        "self": top(own),
    }


# -- report ---------------------------------------------------------------------------------


def _git_head() -> str:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    # From the checkout's root: "src" from bench/ named a folder that does not exist, never modified.
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--", "src"], capture_output=True, text=True, cwd=HERE.parent
    )
    return head.stdout.strip() + ("+src-modified" if dirty.stdout.strip() else "")


def targets(res: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets, against pywb's warcserver (its CDX server and Resource API) and, for
    reference, its wayback front end."""
    rows = []
    for w in ("cdx-closest", "resource"):
        if w not in res["workloads"]:
            continue
        r = res["workloads"][w]
        wi_rps, wi_conns = best_rps(r, "web-index")
        wi_p50 = r["sequential"]["sides"]["web-index"]["p50_ms"]
        for other in PYWB:
            rps, conns = best_rps(r, other)
            p50 = r["sequential"]["sides"][other]["p50_ms"]
            rows.append(
                {
                    "target": f"{w}: req/s at least 3x {other}'s (each side's best)",
                    "measured": f"{wi_rps} (x{wi_conns}) vs {rps} (x{conns}) req/s: {wi_rps / rps:.3f}x",
                    "met": wi_rps >= 3 * rps,
                }
            )
            rows.append(
                {
                    "target": f"{w}: p50 no higher than {other}'s",
                    "measured": f"{wi_p50} vs {p50} ms",
                    "met": wi_p50 <= p50,
                }
            )
    if "prefix" in res["workloads"]:
        r = res["workloads"]["prefix"]["sequential"]
        n = res["datasets"]["prefix"]["captures"]
        s = r["sides"]["web-index"]
        rows.append(
            {
                "target": f"prefix, first {PREFIX_LIMIT:,} lines of a site of {n:,} captures: under 100 ms",
                "measured": f"p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms (pywb warcserver: p50 "
                f"{r['sides']['pywb warcserver']['p50_ms']} ms)",
                "met": s["p99_ms"] < 100,
            }
        )
    return rows


def write_results(res: dict[str, Any], stem: str) -> None:
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(res, indent=2) + "\n")
    ds = res["datasets"]
    lines = [
        f"Run {res['date']} at {res['commit']}, web-index {res['web_index']} against pywb {res['pywb']}; "
        f"{res['cpus']} cores, load {res['load_before']} before (1-min average)."
        + (
            " pywb with TCP_NODELAY set on its connections (--pywb-nodelay; as shipped it is not)."
            if res.get("pywb_nodelay")
            else " pywb as shipped (no TCP_NODELAY: see the notes)."
        )
        + (
            f" web-index serve with --workers {res['serve_workers']} (its CPU and RSS: its processes'"
            " together)."
            if res.get("serve_workers", 1) > 1
            else ""
        )
        + (
            f" pywb's warcserver under gunicorn with {res['pywb_workers']} gevent workers (its CPU and"
            " RSS: its processes' together; gunicorn sets TCP_NODELAY); wayback one process."
            if res.get("pywb_workers", 1) > 1
            else " pywb one process each."
        ),
    ]
    if "main" in ds:
        d = ds["main"]
        lines.append(
            f"Main dataset: {d['params']['records']:,} GET records ({d['attempts']:,} attempts) over "
            f"{d['params']['domains']:,} domains, {d['captures']:,} captures (redirect hops included); "
            f"store {d['store_bytes'] / 2**20:,.0f} MiB in {d['store_files']:,} files, "
            f"WARC {d['warc_bytes'] / 2**20:,.0f} MiB, CDXJ {d['cdxj_bytes'] / 2**20:,.1f} MiB."
        )
    if "prefix" in ds:
        d = ds["prefix"]
        lines.append(
            f"Prefix dataset: one site, {d['captures']:,} captures in {d['params']['sections']} sections; "
            f"store {d['store_bytes'] / 2**20:,.0f} MiB, CDXJ {d['cdxj_bytes'] / 2**20:,.1f} MiB."
        )
    lines += [
        "",
        f"Latency: sequential, one keep-alive connection a side, sides alternated query by query; "
        f"throughput: each side alone under {' and '.join(f'x{n}' for n in res['connections'])} "
        f"keep-alive connections, {res['seconds']} s each. Client: a process of its own (httpx for "
        "latency; raw HTTP/1.1 on one event loop for throughput, ~0.09 ms of CPU a request). "
        "Ratios: web-index ÷ that side (req/s: higher is better for web-index; p50: lower is).",
        "",
    ]
    levels = [
        str(n)
        for n in res["connections"]
        if any(str(n) in r.get("concurrent", {}) for r in res["workloads"].values())
    ]
    head = ["workload", "side", "p50 ms", "p99 ms"]
    for n in levels:
        head += [f"req/s x{n}", f"p50 / p99 ms x{n}", f"server CPU ms/req x{n}"]
    head += ["web-index ÷ side: " + ", ".join([*(f"req/s x{n}" for n in levels), "p50"]), "answers differ"]
    lines += ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for w, r in res["workloads"].items():
        seq, conc = r["sequential"], r.get("concurrent", {})
        for side in SIDES:
            s = seq["sides"][side]
            cells = [w, side, s["p50_ms"], s["p99_ms"]]
            for n in levels:
                c = conc.get(n, {}).get(side)
                cells += (
                    [f"{c['req_per_s']:,}", f"{c['p50_ms']} / {c['p99_ms']}", c["server_cpu_ms_per_req"]]
                    if c
                    else ["", "", s["server_cpu_ms_per_req"] if n == levels[0] else ""]
                )
            ratio, differ = "", ""
            if side != "web-index":
                wi = seq["sides"]["web-index"]
                parts = [
                    f"{conc[n]['web-index']['req_per_s'] / conc[n][side]['req_per_s']:.3f}x"
                    for n in levels
                    if n in conc
                ]
                ratio = ", ".join([*parts, f"{wi['p50_ms'] / s['p50_ms']:.1f}x"])
                differ = f"{seq['mismatches'][side]['count']} / {seq['queries']}"
            cells += [ratio, differ]
            lines.append("| " + " | ".join(str(x) for x in cells) + " |")
    if "prefix" in res["workloads"]:
        p = res["workloads"]["prefix"]["sequential"]
        lines += [
            "",
            "Prefix queries by kind (p50 / p99 ms, sequential):",
            "",
            "| prefix | queries | " + " | ".join(SIDES) + " |",
            "|---|---:|" + "---:|" * len(SIDES),
        ]
        for kind in ("root", "section"):
            k = p[kind]
            lines.append(
                f"| {kind} | {k['web-index']['n']} | "
                + " | ".join(f"{k[s]['p50_ms']} / {k[s]['p99_ms']}" for s in SIDES)
                + " |"
            )
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    lines += [
        f"| {t['target']} | {t['measured']} | {'yes' if t['met'] else '**no**'} |" for t in res["targets"]
    ]
    for w, r in res.get("profile", {}).items():
        lines += [
            "",
            f"cProfile of web-index's handler code for {r['queries']} {w} queries in one process "
            f"({r['ms_per_query']} ms a query), top by cumulative time:",
            "",
            "| function | calls | cum s | cum % | own % |",
            "|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| `{x['function']}` | {x['calls']:,} | {x['cum_s']} | {x['cum_pct']} | {x['own_pct']} |"
            for x in r["by_cum"]
        ]
    for w, r in res.get("py_spy", {}).items():
        if "error" in r:
            lines += ["", f"py-spy failed: {r['error']}"]
            continue
        lines += [
            "",
            f"py-spy of the web-index server during an extra x8 {w} run ({r['requests']} requests, "
            f"{r['samples']:,} samples at 100 Hz of its threads at work, {r['idle_samples']:,} more of pool "
            "threads waiting for work and of the event loop in epoll left out; raw stacks at the JSON's "
            "path): frames on the stack (inclusive) and on top of it (self), % of samples at work:",
            "",
            "| inclusive | % | self | % |",
            "|---|---:|---|---:|",
        ]
        for a, b in zip(r["inclusive"][:20], r["self"][:20], strict=False):
            lines.append(f"| `{a['frame']}` | {a['pct']} | `{b['frame']}` | {b['pct']} |")
    disturbed = []
    for w, r in res["workloads"].items():
        seq = r["sequential"]
        if seq["other_cpu_s"] > 0.1 * seq["wall_s"]:
            disturbed.append(f"{w} sequential: {seq['other_cpu_s']} s in {seq['wall_s']} s")
        for n, level in r.get("concurrent", {}).items():
            for side, c in level.items():
                if c["other_cpu_s"] > 0.1 * c["elapsed_s"]:
                    disturbed.append(f"{w} x{n} {side}: {c['other_cpu_s']} s in {c['elapsed_s']} s")
    lines += [
        "",
        "Other CPU (the machine's busy time less the servers' and the client's): "
        + (
            "; ".join(disturbed) + " (more than 0.1 s a second)"
            if disturbed
            else "under 0.1 s a second in every run"
        ),
    ]
    lines += [""] + [f"- {n}" for n in res["notes"]]
    (out / f"{stem}.md").write_text("\n".join(lines) + "\n")


NOTES = [
    "pywb warcserver is pywb's own CDX server (/store/index) and Resource API (/store/resource, the "
    "capture's WARC record read from the WARC file): the like-for-like side. pywb wayback is its front "
    "end: /store/cdx asks the warcserver inside the same process over HTTP (a new connection a query), "
    "and /store/TSid_/URL (the resource row) loads the record the same way and answers the archived "
    "response, not a WARC record.",
    "web-index answers from the store: a CDX query bisects the capture index of each month of the "
    "URL's partition (WebIndex.captures) and merges the months, a prefix stopping at its limit; a "
    "Resource answer loads the capture's response by its page key. The WARC files are pywb's only.",
    "Server CPU ms/req: the server process's user + system CPU over the run / requests answered "
    "(under load for rows with req/s).",
    "pywb as shipped leaves Nagle's algorithm on (gevent's pywsgi; web-index's uvicorn sets "
    "TCP_NODELAY): its chunked answers go out in several writes, and on a keep-alive connection asked "
    "again at once the last write waits for the client's delayed ACK, ~40 ms. The sequential runs "
    "mostly miss it (between two queries to one side the other sides answer: its p99 shows it); the "
    "x8 and x32 runs hit it on every answer, so there pywb's req/s is bounded by connections / 44 ms "
    "while its CPU a request says what it could do. --pywb-nodelay sets TCP_NODELAY on pywb's "
    "connections to measure that.",
    "Other CPU is approximate: processes' CPU is accounted exactly, the machine's busy time from "
    "/proc/stat ticks, so it can come out a little below zero.",
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument(
        "--records", type=int, default=100_000, help="successful GET attempts of the main dataset"
    )
    ap.add_argument("--domains", type=int, default=1_000)
    ap.add_argument("--prefix-captures", type=int, default=100_000, help="captures of the one big site")
    ap.add_argument("--prefix-sections", type=int, default=50)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--queries", type=int, default=300, help="sequential queries a side (cdx-closest, resource)"
    )
    ap.add_argument("--warmup", type=int, default=20, help="queries a side before the timed ones")
    ap.add_argument("--prefix-queries", type=int, default=20, help="section prefixes")
    ap.add_argument("--prefix-repeat", type=int, default=5, help="times the site root prefix is asked")
    ap.add_argument(
        "--connections",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[8, 32],
        help="keep-alive connections of the throughput runs, comma-separated (8,32)",
    )
    ap.add_argument("--seconds", type=float, default=15.0, help="of each concurrent run")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/web-index-server-bench"))
    ap.add_argument("--no-warm", action="store_true")
    ap.add_argument("--profile", action="store_true", help="cProfile web-index's handler code (in process)")
    ap.add_argument(
        "--py-spy",
        nargs="?",
        const=shutil.which("py-spy") or "py-spy",
        default=None,
        metavar="PATH",
        help="with --profile: also py-spy the web-index server during an extra cdx-closest run",
    )
    ap.add_argument(
        "--pywb-nodelay",
        action="store_true",
        help="set TCP_NODELAY on pywb's connections (pywb as shipped does not: see bench/README.md)",
    )
    ap.add_argument(
        "--pywb-workers",
        type=int,
        default=1,
        help="pywb's warcserver as this many gunicorn gevent worker processes (as deployed)",
    )
    ap.add_argument(
        "--serve-workers",
        type=int,
        default=1,
        help="web-index serve --workers N (pywb's warcserver and wayback stay one process each)",
    )
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--rewrite-md", action="store_true", help="no run: write <out>.md again from <out>.json")
    ap.add_argument("--out", default="server")
    args = ap.parse_args()
    if args.rewrite_md:
        write_results(json.loads((HERE / "results" / f"{args.out}.json").read_text()), args.out)
        return
    workloads = [w for w in args.workloads.split(",") if w]
    if unknown := set(workloads) - set(WORKLOADS):
        ap.error(f"unknown workloads {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    pywb_version = _pywb.check_venv()
    args.workdir.mkdir(parents=True, exist_ok=True)
    main_p = MainParams(args.records, args.domains, args.seed)
    prefix_p = PrefixParams(args.prefix_captures, args.prefix_sections, args.seed)
    datasets: dict[str, tuple[Path, dict[str, Any]]] = {}
    if {"cdx-closest", "resource"} & set(workloads):
        datasets["main"] = ensure_dataset(main_p, args.workdir)
    if "prefix" in workloads:
        datasets["prefix"] = ensure_dataset(prefix_p, args.workdir)
    if args.build_only:
        return
    res: dict[str, Any] = {
        "benchmark": "server",
        "date": time.strftime("%Y-%m-%d"),
        "commit": _git_head(),
        "web_index": __version__,
        "pywb": pywb_version,
        "python": platform.python_version(),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 2),
        "connections": args.connections,
        "seconds": args.seconds,
        "queries": args.queries,
        "warm": not args.no_warm,
        "pywb_nodelay": args.pywb_nodelay,
        "serve_workers": args.serve_workers,
        "pywb_workers": args.pywb_workers,
        "datasets": {k: v[1] for k, v in datasets.items()},
        "workloads": {},
        "peak_rss_mib": {},
        "notes": list(NOTES),
    }
    for name, (folder, _info) in datasets.items():
        files = [folder / "store", folder / "warc"]
        if not args.no_warm:
            warm(files)
        servers = Servers(
            folder,
            args.workdir,
            pywb_nodelay=args.pywb_nodelay,
            serve_workers=args.serve_workers,
            pywb_workers=args.pywb_workers,
        )
        try:
            if name == "main":
                sample = sample_queries(folder / "warc" / "bench.cdxj", args.queries + args.warmup, args.seed)
                warmup, queries = sample[: args.warmup], sample[args.warmup :]
                mine = [w for w in ("cdx-closest", "resource") if w in workloads]
            else:
                queries = prefix_queries(prefix_p, args.prefix_queries, args.prefix_repeat, args.seed)
                warmup = [
                    {"url": f"{BIG_HOST}/{s}/", "kind": "section"} for s in prefix_sections(prefix_p)[:2]
                ]
                mine = ["prefix"]
            for w in mine:
                if not args.no_warm:
                    warm(files)
                load = round(os.getloadavg()[0], 2)
                print(f"{w}: {len(queries)} queries a side, sequential (load {load}) ...", flush=True)
                r: dict[str, Any] = {"load_before": load}
                r["sequential"] = run_sequential(servers, w, queries, warmup)
                for side in SIDES:
                    s = r["sequential"]["sides"][side]
                    print(
                        f"  {w} {side}: p50 {s['p50_ms']} ms, p99 {s['p99_ms']} ms, {s['statuses']}",
                        flush=True,
                    )
                print(
                    f"  differ: { {k: v['count'] for k, v in r['sequential']['mismatches'].items()} }, "
                    f"other CPU {r['sequential']['other_cpu_s']} s",
                    flush=True,
                )
                if w != "prefix":
                    r["concurrent"] = run_concurrent(servers, w, queries, args, files)
                res["workloads"][w] = r
            if args.profile and args.py_spy and name == "main":
                print("py-spy of web-index serve during an extra cdx-closest run ...", flush=True)
                spy = args.workdir / "py-spy-cdx-closest.txt"
                res.setdefault("py_spy", {})["cdx-closest"] = py_spy(
                    args.py_spy, servers, "cdx-closest", queries, args.seconds, spy
                )
            res["peak_rss_mib"][name] = servers.peak_rss_mib()
        finally:
            servers.close()
        if args.profile:
            res.setdefault("profile", {})
            if name == "main":
                res["profile"]["cdx-closest"] = profile(folder, "cdx-closest", queries[:50])
            else:
                res["profile"]["prefix"] = profile(folder, "prefix", queries[:1] + queries[-3:])
    res["load_after"] = round(os.getloadavg()[0], 2)
    res["targets"] = targets(res)
    write_results(res, args.out)
    for t in res["targets"]:
        print(f"{'met' if t['met'] else 'NOT met'}: {t['target']}: {t['measured']}")
    print(f"results in bench/results/{args.out}.json and .md")


if __name__ == "__main__":
    main()
