"""Issue 48's benchmark, identical payloads stored once: what a re-crawl adds to the store, the
store against a WARC export, lookups whose answer is a reference, and the loads' speed.

    .venv/bin/python bench/dedup_bench.py                        # everything (~30 min)
    .venv/bin/python bench/dedup_bench.py --quick --out dedup-quick   # a smoke run (~3 min)

``--against`` (default /work/old-40f77a0/src, a worktree of main before issue 48) is the baseline
code, run as ``PYTHONPATH=SRC`` in the same venv (as site_bench.py's ``--against``). Parts
(``--parts``):

- ``book``: the Rust book (``--site``) served on 127.0.0.1 and crawled as site_bench.py does
  (bench/_site.py: default depth, then ``--max-depth 500``), ``web-index compact``; then the same
  again (same port, so the same URLs) into the same store and compacted. Per side (``new``: this
  checkout; ``old``: ``--against``, crawling and compacting), after each: the store's bytes, and
  ``web-index export-warc`` of it (WARC.gz + its CDXJ). The bodies of every capture (``id_`` and
  ``resource``, via ``web-index serve``) are compared between the sides: a difference fails the run.
- ``synthetic``: ``--pages`` pages (bench/synth.py's URLs and HTML bodies, ``--body-kb``, over
  ``--domains`` domains, 10% with a redirect hop) bulk-loaded in 2024-01; then the same URLs again,
  90% of bodies byte-identical and 10% changed, bulk-loaded into a copy of that store with
  ``WriteOptions(share_payloads=True)`` and into another with ``False`` (a full copy), a month later
  (``next-month``: new partitions) and in the same month (``same-month``: part files, then compaction).
- ``lookups`` (on ``next-month``): N URLs whose latest capture is a reference (its row's
  ``payload_ref`` set) and N whose latest holds its body; the Resource API through ``web-index serve``
  (req/s, p50; bench/_site.py's clients) and a batch ``WebIndex.query`` of N ``SimplePageQuery`` in a
  fresh process each; both also against the unshared store (the same URLs holding their bodies).
  Answers (payload SHA-1s) are compared between the shared and the unshared store.
- ``ingest``: load_bench.py's ``buffered`` (durable ``insert_many``, flush, compact) and ``bulk``
  modes, this code against ``--against``, alternated, ``--rounds`` rounds.

Store bytes are those of ``get/``, ``get-metadata/``, ``head/``, ``head-metadata/``, ``_index/`` and
``_captures/``; the rest (``_buffer/``, ``_crawl/``, ``_locks/``, ...) is listed apart, not counted.
Timed runs are not niced and wait for a quiet machine (site_bench's rule: redone when the rest of
the machine used more than ``--max-other`` CPU s a second); the rest runs at nice 10.
Results: bench/results/<out>.json and .md.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import hashlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

import _site
import load_bench
import synth
from _dedup_report import PARTS, TARGETS, report
from _procs import code_env, free_port, stop
from _results import save
from site_bench import RUST_BOOKS, git, machine
from store_bench import _body_column_bytes

HERE = Path(__file__).resolve().parent
STARTS = {
    "first": datetime(2024, 1, 2, tzinfo=UTC),
    "next-month": datetime(2024, 2, 2, tzinfo=UTC),
    "same-month": datetime(2024, 1, 22, tzinfo=UTC),
}


@contextlib.contextmanager
def niced() -> Iterator[None]:
    """This process (and what it starts) at nice 10 meanwhile: the untimed work."""
    os.setpriority(os.PRIO_PROCESS, 0, 10)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, 0)  # root may lower it again


def store_bytes(root: Path) -> dict[str, Any]:
    def du(p: Path) -> int:
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size

    parts = {p: du(root / p) if (root / p).exists() else 0 for p in PARTS}
    other = {p.name: du(p) for p in sorted(root.iterdir()) if p.name not in PARTS}
    body = _body_column_bytes(root / "get") if (root / "get").exists() else 0
    return {"total": sum(parts.values()), "parts": parts, "get_body_column": body, "not_counted": other}


def column_bytes(folder: Path) -> dict[str, int]:
    """Compressed bytes of each column of the Parquet files under ``folder`` (from the footers),
    the footers' own bytes as ``(footers)``; largest first."""
    import pyarrow.parquet as pq

    out: dict[str, int] = {}
    for path in folder.rglob("*.parquet"):
        meta = pq.ParquetFile(path).metadata
        out["(footers)"] = out.get("(footers)", 0) + meta.serialized_size
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                col = meta.row_group(g).column(c)
                out[col.path_in_schema] = out.get(col.path_in_schema, 0) + col.total_compressed_size
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def quiet(args: argparse.Namespace, pid: int, run: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``run()`` on a quiet machine (site_bench's rule), redone up to ``--redo`` times when the rest
    of the machine (all but ``pid``'s family and the runs' children) used more than ``--max-other``."""
    disturbed = []
    for _ in range(args.redo + 1):
        _site.wait_quiet(pid, args.max_other)
        b0, k0, t0 = _site.busy(), _site._children_cpu(), time.monotonic()
        got = run()
        wall = time.monotonic() - t0
        other = _site.busy() - b0 - (_site._children_cpu() - k0) - got.get("server_cpu_s", 0.0)
        got = got | {"other_cpu_s": round(other, 1), "wall_s": round(wall, 1)}
        if other <= args.max_other * wall:
            break
        disturbed.append(got)
        print(f"  others used {other:.1f} s of CPU in {wall:.1f} s: run again", flush=True)
    return got | {"disturbed_runs": len(disturbed)}


# -- the book -------------------------------------------------------------------------------------


def book(args: argparse.Namespace) -> dict[str, Any]:
    port, out = free_port(), {}
    for side, src in (("new", None), ("old", args.against)):
        work, env = args.workdir / f"book-{side}", code_env(src)
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        store, runs = work / "store", []
        for n in (1, 2):
            crawled = _site.crawl(args.site, store, env, port)
            began = time.monotonic()
            _site.cli("compact", "--store", str(store), env=env)
            compact_s = round(time.monotonic() - began, 2)
            warc = work / f"warc-{n}"
            _site.cli("export-warc", str(warc), "--store", str(store), env=env)
            exported = {
                ext: sum(f.stat().st_size for f in warc.glob(f"*.{ext}")) for ext in ("warc.gz", "cdxj")
            }
            runs.append(
                {
                    "crawls": crawled["crawls"],
                    "compact_s": compact_s,
                    "bytes": store_bytes(store),
                    "export": exported | {"total": sum(exported.values())},
                }
            )
            print(
                f"book {side} crawl {n}: store {runs[-1]['bytes']['total']:,} B, export {exported}",
                flush=True,
            )
        _site.cli("verify", "--store", str(store), env=env)
        first, both = runs[0]["bytes"]["total"], runs[1]["bytes"]["total"]
        out[side] = {
            "runs": runs,
            "second_crawl_added": both - first,
            "ratio_second": round((both - first) / first, 3),
            "store_vs_export": [round(r["bytes"]["total"] / r["export"]["total"], 3) for r in runs],
            "stats": _site.stats(store),
            "get_columns": column_bytes(store / "get"),
            "answers": book_answers(store, src, work / "serve.log", port),
        }
    new, old = (out[s].pop("answers") for s in ("new", "old"))
    if new != old:
        bad = sorted(u for u in set(new) | set(old) if new.get(u) != old.get(u))
        raise SystemExit(
            f"book: the sides answer differently for {len(bad)} URLs, e.g. {bad[0]}: "
            f"new {new.get(bad[0])} old {old.get(bad[0])}"
        )
    out["answers_compared"] = {"urls": len(new), "captures": sum(len(v) for v in new.values()), "differ": 0}
    return out


def book_answers(store: Path, src: Path | None, log: Path, port: int) -> dict[str, list[str]]:
    """Per URL, in time order, each capture's listed status and digest, and the bodies' SHA-1s as
    ``id_`` and ``resource`` answer them (times differ between sides; nothing else may)."""
    proc, base, _ = _site.serve(store, log, str(src) if src else None)
    try:
        lines = _site.listing(base, f"http://127.0.0.1:{port}/")
        got: dict[str, list[str]] = {}
        with httpx.Client(headers={"Accept-Encoding": "identity"}, timeout=120, trust_env=False) as client:
            for _, ts, url, _mime, status, digest in sorted(lines, key=lambda x: (x[2], x[1])):
                r = client.get(_site.request(base, "id_", ts, url))
                body = f"{r.status_code} {hashlib.sha1(r.content).hexdigest()}"
                res = _site.summary("resource", client.get(_site.request(base, "resource", ts, url)))
                got.setdefault(url, []).append(f"{status} {digest} {body} {' '.join(res.split()[-3:])}")
    finally:
        stop([proc])
    return got


# -- the synthetic re-crawl -----------------------------------------------------------------------


def plan(pages: int, domains: int, seed: int) -> list[tuple[str, int, int, int]]:
    """(URL, domain rank, hops, body seed) of each page: synth.py's URLs, Zipf over the domains."""
    rng = random.Random(seed)
    names, cum = synth.domain_names(domains, rng), synth.zipf_cum_weights(domains, 1.0)
    out = []
    for i in range(pages):
        rank = i if i < domains else bisect.bisect_left(cum, rng.random() * cum[-1])
        hops = 2 if rng.random() < 0.1 else 1
        out.append((synth.url_for(names[rank], i, rng), rank, hops, rng.getrandbits(32)))
    return out


def changed(job: dict[str, Any]) -> set[int]:
    return set(
        random.Random(job["seed"] + 1).sample(range(job["pages"]), round(job["pages"] * job["changed"]))
    )


def crawl_time(job: dict[str, Any], when: str, i: int) -> datetime:
    span = timedelta(days=15 if when == "first" else 6)
    return STARTS[when] + span * i / job["pages"]


def child_load(job: dict[str, Any]) -> dict[str, Any]:
    """A crawl (``when``) of the synthetic pages bulk-loaded into ``store``, then compacted."""
    from web_index import WebIndex, WriteOptions

    bodies, new = (
        synth.BodyMaker(job["seed"], job["body_kb"]),
        changed(job) if job["when"] != "first" else set(),
    )
    began = time.perf_counter()
    with WebIndex(job["store"], write_options=WriteOptions(share_payloads=job["share"])) as index:
        with index.bulk_load() as load:
            batch = []
            for i, (url, rank, hops, seed) in enumerate(plan(job["pages"], job["domains"], job["seed"])):
                ts = crawl_time(job, job["when"], i)
                us = (ts - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
                spec = synth.Spec(
                    "get", url, us, 0, "success", hops, seed ^ 0x5EED if i in new else seed, rank
                )
                batch.append(synth.build_item(spec, bodies))
                if len(batch) == 1000:
                    load.add(batch)
                    batch = []
            load.add(batch)
        stats = index.stats()
        if stats.buffered_attempts or sum(p.part_files for p in stats.partitions):
            index.compact()
        ok = index.verify().ok
    return {"seconds": round(time.perf_counter() - began, 1), "verify_ok": ok}


def child_query(job: dict[str, Any]) -> dict[str, Any]:
    """A batch of ``SimplePageQuery`` (latest) in a fresh process, after a warm-up batch of other URLs
    and polars' import (a batch's first read of many small files imports it: ~0.5 s here, where
    PYTHONDONTWRITEBYTECODE is set, once a process); seconds, the same again, bodies' SHA-1."""
    import polars  # noqa: F401

    from web_index import WebIndex
    from web_index.models import SimplePageQuery

    queries = [SimplePageQuery(url=u) for u in job["urls"]]
    with WebIndex(job["store"], read_only=True) as index:
        index.query([SimplePageQuery(url=u) for u in job["warmup"]])
        times = []
        for _ in range(2):
            began = time.perf_counter()
            got = index.query(queries)
            times.append(time.perf_counter() - began)
    sha1 = [hashlib.sha1(p.final.data or b"").hexdigest() if p else None for p in got]
    return {"seconds": round(times[0], 3), "again_s": round(times[1], 3), "sha1": sha1}


def child(kind: str, job: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        env=env,
    )
    if done.returncode:
        raise SystemExit(f"child {kind} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def synthetic(args: argparse.Namespace) -> dict[str, Any]:
    job = {
        "pages": args.pages,
        "domains": args.domains,
        "body_kb": args.body_kb,
        "seed": args.seed,
        "changed": 0.1,
    }
    root = args.workdir / "synthetic"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    first = child("load", job | {"store": str(root / "first"), "when": "first", "share": True})
    before = store_bytes(root / "first")
    out: dict[str, Any] = {"job": job, "first": {"load": first, "bytes": before}}
    print(f"synthetic first crawl: {before['total']:,} B in {first['seconds']} s", flush=True)
    for when in args.when:
        out[when] = {}
        for side, share in (("shared", True), ("unshared", False)):
            store = root / f"{when}-{side}"
            shutil.copytree(root / "first", store)
            got = child("load", job | {"store": str(store), "when": when, "share": share})
            after = store_bytes(store)
            growth = round(after["total"] / before["total"] - 1, 4)
            out[when][side] = {"load": got, "bytes": after, "growth": growth}
            if when == "next-month":
                out[when][side]["get_columns_2024_02"] = column_bytes(store / "get" / "2024" / "02")
            print(f"synthetic {when} {side}: {after['total']:,} B, growth {growth}, {got}", flush=True)
            if when != "next-month":
                shutil.rmtree(store)
        out[when]["ratio"] = round(out[when]["shared"]["growth"] / out[when]["unshared"]["growth"], 4)
    return out


# -- lookups on the next-month stores ------------------------------------------------------------


def lookups(args: argparse.Namespace, job: dict[str, Any]) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from web_index import WebIndex

    root = args.workdir / "synthetic"
    stores = {"shared": root / "next-month-shared", "unshared": root / "next-month-unshared"}
    for store in stores.values():  # indexes of an older format (older code wrote them) written anew
        with WebIndex(store) as index:
            index.compact()
    pages = plan(job["pages"], job["domains"], job["seed"])
    new, place = changed(job), {u: i for i, (u, *_rest) in enumerate(pages)}
    refs, holds = set(), set()  # final rows of the re-crawl's month by their payload_ref
    for f in sorted((stores["shared"] / "get" / "2024" / "02").glob("*.parquet")):
        t = pq.read_table(f, columns=["url", "is_final", "payload_ref"]).to_pylist()
        for row in t:
            if row["is_final"]:
                (refs if row["payload_ref"] else holds).add(row["url"])
    expect = {pages[i][0] for i in new}
    marked = {
        "refs": len(refs),
        "holders": len(holds),
        "refs_as_planned": refs == set(place) - expect,
        "holders_as_planned": holds == expect,
    }
    rng = random.Random(args.seed)
    n = min(args.lookups, len(refs) - 100, len(holds) - 100)
    picked = {"ref": rng.sample(sorted(refs), n + 100), "holder": rng.sample(sorted(holds), n + 100)}
    urls = {k: us[:n] for k, us in picked.items()}
    warm = {k: picked["ref"][n:] + picked["holder"][n:] for k in urls}  # 100 of each kind, never timed
    bodies = synth.BodyMaker(job["seed"], job["body_kb"])
    expected = {
        k: [
            hashlib.sha1(bodies.body(u, pages[place[u]][3] ^ (0x5EED if place[u] in new else 0))).hexdigest()
            for u in us
        ]
        for k, us in urls.items()
    }
    cases = {f"{k}{'' if s == 'shared' else '-unshared'}": (s, k) for s in stores for k in urls}
    for store in stores.values():
        _site.warm(store)
    batch: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    for r in range(args.rounds):
        for case in cases if r % 2 == 0 else list(cases)[::-1]:
            s, k = cases[case]
            got = quiet(
                args,
                os.getpid(),
                lambda s=s, k=k: child(
                    "query", {"store": str(stores[s]), "urls": urls[k], "warmup": warm[k]}
                ),
            )
            if got.pop("sha1") != expected[k]:
                raise SystemExit(f"batch {case}: bodies differ from the generator's (see child_query)")
            batch[case].append(got)
            print(f"batch {case} round {r + 1}: {got['seconds']} s ({got['again_s']} s again)", flush=True)
    ts = {
        u: crawl_time(job, "next-month", place[u]).strftime("%Y%m%d%H%M%S")
        for us in urls.values()
        for u in us
    }
    servers = {s: _site.serve(p, args.workdir / f"serve-{s}.log", None) for s, p in stores.items()}
    resource: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}
    try:
        for case, (s, k) in cases.items():  # every answer checked before any timed run
            with httpx.Client(
                headers={"Accept-Encoding": "identity"}, timeout=120, trust_env=False
            ) as client:
                got = [
                    _site.summary("resource", client.get(_site.request(servers[s][1], "resource", ts[u], u)))
                    for u in urls[k]
                ]
            if [g.split()[-1] for g in got] != expected[k] or any(not g.startswith("200") for g in got):
                raise SystemExit(f"resource {case}: answers differ from the generator's bodies: {got[:3]}")
        picks = {k: [rng.choice(us) for _ in range(args.picks)] for k, us in urls.items()}
        for r in range(args.rounds):
            for case in cases if r % 2 == 0 else list(cases)[::-1]:
                (s, k), (proc, base, _) = cases[case], servers[cases[case][0]]
                reqs = [_site.request(base, "resource", ts[u], u) for u in picks[k]]
                for _ in range(args.redo + 1):
                    _site.wait_quiet(proc.pid, args.max_other)
                    got = _site.timed_run(proc.pid, reqs, args.connections, args.seconds)
                    if got["other_cpu_s"] <= args.max_other * got["wall_s"]:
                        break
                    print(f"  resource {case}: others used {got['other_cpu_s']} s, run again", flush=True)
                resource[case].append(got)
                print(
                    f"resource {case} round {r + 1}: {got['req_per_s']} req/s, p50 {got['p50_ms']} ms",
                    flush=True,
                )
    finally:
        stop([p for p, _, _ in servers.values()])
    best_b = {c: min(x["seconds"] for x in rs) for c, rs in batch.items()}
    best_r = {c: max(resource[c], key=lambda x: x["req_per_s"]) for c in cases}
    ratios = {
        "batch_ref_vs_holder": round(best_b["ref"] / best_b["holder"], 3),
        "batch_ref_vs_unshared": round(best_b["ref"] / best_b["ref-unshared"], 3),
        "resource_rps_holder_vs_ref": round(best_r["holder"]["req_per_s"] / best_r["ref"]["req_per_s"], 3),
        "resource_p50_ref_vs_holder": round(best_r["ref"]["p50_ms"] / best_r["holder"]["p50_ms"], 3),
        "resource_rps_unshared_vs_ref": round(
            best_r["ref-unshared"]["req_per_s"] / best_r["ref"]["req_per_s"], 3
        ),
        "resource_p50_ref_vs_unshared": round(best_r["ref"]["p50_ms"] / best_r["ref-unshared"]["p50_ms"], 3),
    }
    return {
        "n": n,
        "marked": marked,
        "batch": batch,
        "resource": resource,
        "best_batch_s": best_b,
        "best_resource": best_r,
        "ratios": ratios,
        "answers_compared": {"differ": 0},
        "rounds": args.rounds,
        "connections": args.connections,
        "seconds": args.seconds,
    }


# -- ingest ---------------------------------------------------------------------------------------


def ingest(args: argparse.Namespace) -> dict[str, Any]:
    work = args.workdir / "ingest"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    envs = {"new": code_env(None), "old": code_env(args.against)}
    order = [(m, s) for m in ("buffered", "bulk") for s in envs]
    runs: dict[str, list[dict[str, Any]]] = {f"{m} {s}": [] for m, s in order}
    shapes: dict[str, Any] = {}
    for r in range(args.rounds):
        for m, s in order if r % 2 == 0 else order[::-1]:
            root = work / f"{m}-{s}-{r}"
            got = quiet(
                args,
                os.getpid(),
                lambda m=m, s=s, root=root: load_bench.run_mode(
                    m, root, args.ingest_records, 7, work / "unused.jsonl", envs[s]
                ),
            )
            with niced():
                shape = load_bench.store_shape(root)
            shutil.rmtree(root)
            shapes.setdefault(m, shape["partitions"])
            if shape["partitions"] != shapes[m] or not shape["verify_ok"]:
                raise SystemExit(f"ingest {m} {s}: records differ from the other side's, or verify failed")
            got |= {
                "get_records_per_s": round(shape["by_type"]["get"] / got["seconds"]),
                "records_per_s": round(shape["records"] / got["seconds"]),
                "store_mb": round(shape["bytes"] / 1e6, 1),
            }
            runs[f"{m} {s}"].append(got)
            print(
                f"ingest {m} {s} round {r + 1}: {got['seconds']:.1f} s, {got['get_records_per_s']} GET/s",
                flush=True,
            )
    summary = {}
    for m in ("buffered", "bulk"):
        new, old = ([x["seconds"] for x in runs[f"{m} {s}"]] for s in envs)
        summary[m] = {
            "best_new_vs_old": round(min(old) / min(new), 3),
            "median_new_vs_old": round(statistics.median(old) / statistics.median(new), 3),
            "best_get_records_per_s": {
                s: max(x["get_records_per_s"] for x in runs[f"{m} {s}"]) for s in envs
            },
        }
    return {"records_argument": args.ingest_records, "rounds": args.rounds, "runs": runs, "summary": summary}


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        print(json.dumps({"load": child_load, "query": child_query}[sys.argv[2]](json.load(sys.stdin))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--parts", default="book,synthetic,lookups,ingest")
    ap.add_argument("--site", type=Path, default=RUST_BOOKS[-1] if RUST_BOOKS else None)
    ap.add_argument("--against", type=Path, default=Path("/work/old-40f77a0/src"))
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--domains", type=int, default=1_000)
    ap.add_argument("--body-kb", type=float, default=20.0)
    ap.add_argument("--when", default="next-month,same-month")
    ap.add_argument("--lookups", type=int, default=10_000, help="URLs per side of the lookups")
    ap.add_argument("--ingest-records", type=int, default=50_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--picks", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=48)
    ap.add_argument("--max-other", type=float, default=0.1)
    ap.add_argument("--redo", type=int, default=5)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/web-index-dedup-bench"))
    ap.add_argument("--quick", action="store_true", help="a small smoke run")
    ap.add_argument("--out", default="dedup")
    args = ap.parse_args()
    if args.quick:
        args.pages, args.domains, args.lookups, args.ingest_records = 5_000, 100, 300, 5_000
        args.rounds, args.seconds, args.redo = 1, 2.0, 1
    args.when, parts = args.when.split(","), args.parts.split(",")
    args.against = args.against.resolve()
    if not (args.against / "web_index" / "__init__.py").is_file():
        raise SystemExit(f"--against {args.against}: no web_index package there")
    kept = (
        json.loads((HERE / "results" / f"{args.out}.json").read_text())
        if (HERE / "results" / f"{args.out}.json").exists()
        else {}
    )
    if (
        "lookups" in parts
        and "synthetic" not in parts
        and not (kept.get("synthetic") or {}).get("next-month")
    ):
        raise SystemExit(
            "lookups need the synthetic part's next-month stores (run it, or have run it: --out)"
        )
    rec: dict[str, Any] = {
        "benchmark": "dedup",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(sys.argv),
        "code": git(HERE.parent / "src"),
        "baseline_code": git(args.against) | {"src": str(args.against)},
        "machine": machine(),
        "rounds": args.rounds,
        "connections": args.connections,
        "seconds": args.seconds,
        "picks": args.picks,
        "targets": TARGETS,
    }
    steps = {
        "book": lambda: book(args),
        "synthetic": lambda: synthetic(args),
        "lookups": lambda: lookups(args, (rec.get("synthetic") or kept["synthetic"])["job"]),
        "ingest": lambda: ingest(args),
    }
    for part, step in steps.items():
        if part in parts:
            with niced() if part in ("book", "synthetic") else contextlib.nullcontext():
                rec[part] = step()
            done = dict(rec)  # saved after every part: the parts not run (yet) the last run's, marked
            for other in steps:
                if other not in done and other in kept:
                    since = kept[other].get("kept_from") or kept["code"]["commit"] + " " + kept["date"]
                    done[other] = kept[other] | {"kept_from": since}
            if git(HERE.parent / "src")["tree"] != rec["code"]["tree"]:
                done["code_at_end"] = git(HERE.parent / "src")
            save(args.out, done, report(done))
    print("\n".join(report(done)))


if __name__ == "__main__":
    main()
