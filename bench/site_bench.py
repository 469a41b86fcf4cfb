"""A real site through the archive server: the Resource API and ``id_`` mementos of a crawled
documentation site, bodies read by page against the same records with paging off, in one run.

    .venv/bin/python bench/site_bench.py                       # the Rust book of the local toolchain
    .venv/bin/python bench/site_bench.py --site DIR --connections 4 --seconds 10

The site (``--site``: a folder of HTML; by default the Rust book that rustup installs with the
toolchain's docs, pages of 10-700 KB) is served by ``python -m http.server`` on 127.0.0.1 and
crawled with ``web-index crawl`` (pages only, as issue 38 measured it), then compacted: the
*paged* store, as a crawl leaves it (files with at least 256 KiB of bodies are written with body
pages and the page index). The *whole row group* store holds the same records (the same request
ids, times and bodies) inserted again with paging off (``WriteOptions(paged_min_bytes=...)`` past
any file), flushed and compacted: how every store was read before bodies by page.

Each store is served by ``web-index serve`` in a process of its own, alone on the machine, and
asked for every crawled page as a WARC record (``/store/resource?url=U&closest=TS``) and as the
archived response (``/store/TSid_/U``): first once each in turn, the answers of both stores
compared (SHA-1 of the archived response's body), then ``--connections`` keep-alive clients for
``--seconds`` (bench/_http_client.py's raw HTTP/1.1 client, a process of its own). Results:
bench/results/site.json and .md (req/s, p50/p99, server CPU a request).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import msgspec

from _procs import CLI, cpu_seconds, free_port, stop
from _results import save
from web_index import WebIndex, WriteOptions, __version__
from web_index.models import AttemptMetadata, Page

HERE = Path(__file__).parent
RUST_BOOKS = sorted(Path.home().glob(".rustup/toolchains/*/share/doc/rust/html/book"))
WORKLOADS = ("resource", "id_")
NEVER_PAGED = WriteOptions(paged_min_bytes=1 << 62)


def crawl(site: Path, work: Path, max_pages: int) -> Path:
    """The site crawled into ``work/paged`` and compacted (once: kept while ``work`` is)."""
    store = work / "paged"
    if (work / "crawled.json").exists():
        return store
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait(f"http://127.0.0.1:{port}/")
        seed = f"http://127.0.0.1:{port}/index.html"
        began = time.monotonic()
        subprocess.run(
            [CLI, "crawl", seed, "--store", str(store), "--allow-loopback", "--settle", "0.5",
             "--max-pages", str(max_pages), "--json"],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        seconds = time.monotonic() - began
    finally:
        stop([server])
    subprocess.run([CLI, "compact", "--store", str(store)], check=True, stdout=subprocess.DEVNULL)
    (work / "crawled.json").write_text(json.dumps({"seed": seed, "crawl_s": round(seconds, 1)}))
    return store


def unpaged_copy(paged: Path, dest: Path) -> None:
    """The paged store's records again, same request ids, in files read by whole row groups."""
    if dest.exists():
        return
    with WebIndex(paged, read_only=True) as source:
        metadata = {m.request_id: m for m in source.scan("get-metadata") if isinstance(m, AttemptMetadata)}
        items, ids = [], []
        for page in source.scan("get"):
            assert isinstance(page, Page)
            meta = msgspec.structs.replace(metadata[page.request_id], request_id=None)  # the store's to give
            hops = [msgspec.structs.replace(r, request_id=None) for r in page.responses]
            items.append(("get", page.url, page.timestamp, meta, hops))
            ids.append(page.request_id)
    with WebIndex(dest, write_options=NEVER_PAGED) as index:
        index.insert_many(items, request_ids=ids)  # type: ignore[arg-type]
        index.flush()
        index.compact()


def captures(store: Path) -> list[tuple[str, str]]:
    """(14-digit timestamp, URL) of every final 200 page in the store."""
    out = []
    with WebIndex(store, read_only=True) as index:
        for page in index.scan("get"):
            assert isinstance(page, Page)
            if page.responses[-1].status_code == 200:
                out.append((f"{page.timestamp:%Y%m%d%H%M%S}", page.url))
    return sorted(out)


def files(store: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq

    gets = sorted((store / "get").rglob("*.parquet"))
    paged = 0
    for f in gets:
        meta = pq.ParquetFile(f).metadata
        paged += any(meta.row_group(0).column(c).has_offset_index for c in range(meta.num_columns))
    return {"get_files": len(gets), "get_bytes": sum(f.stat().st_size for f in gets), "paged_files": paged}


def urls(base: str, caught: list[tuple[str, str]], workload: str) -> list[str]:
    if workload == "resource":
        return [f"{base}/store/resource?{urlencode({'url': u, 'closest': ts})}" for ts, u in caught]
    return [f"{base}/store/{ts}id_/{quote(u, safe=':/?=&')}" for ts, u in caught]


def serve(store: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        [CLI, "serve", "--store", str(store), "--port", str(port), "--no-ui"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    _wait(base + "/store/cdx?url=x")
    return proc, base


def _wait(url: str) -> None:
    for _ in range(300):
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer")


def answers(base: str, caught: list[tuple[str, str]]) -> dict[str, list[str]]:
    """What each request answers (status, SHA-1 of the archived body), to compare the stores."""
    out: dict[str, list[str]] = {}
    with httpx.Client(headers={"Accept-Encoding": "identity"}, timeout=60) as client:
        for workload in WORKLOADS:
            got = []
            for url in urls(base, caught, workload):
                r = client.get(url)
                body = r.content if workload == "id_" else r.content.split(b"\r\n\r\n", 2)[-1]
                got.append(f"{r.status_code} {hashlib.sha1(body).hexdigest()}")
            out[workload] = got
    return out


def load(proc: subprocess.Popen[bytes], base: str, caught: list[tuple[str, str]], workload: str,
         connections: int, seconds: float) -> dict[str, Any]:  # fmt: skip
    job = {"mode": "concurrent", "urls": urls(base, caught, workload), "connections": connections,
           "seconds": seconds, "timeout": 120}  # fmt: skip
    cpu0 = cpu_seconds(proc.pid)
    done = subprocess.run(
        [sys.executable, str(HERE / "_http_client.py")], input=json.dumps(job), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    cpu = cpu_seconds(proc.pid) - cpu0
    got = json.loads(done.stdout)
    lat = sorted(got["seconds"])
    n = len(lat)
    return {
        "req_per_s": round(n / got["elapsed_s"], 1),
        "p50_ms": round(1000 * statistics.median(lat), 2),
        "p99_ms": round(1000 * lat[int(0.99 * (n - 1))], 2),
        "server_cpu_ms_per_req": round(1000 * cpu / n, 3),
        "statuses": got["statuses"],
        "errors": got["errors"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--site", type=Path, default=RUST_BOOKS[-1] if RUST_BOOKS else None)
    ap.add_argument("--max-pages", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2, help="each store served this many times, alternated")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/web-index-site-bench"))
    ap.add_argument("--out", default="site")
    args = ap.parse_args()
    if args.site is None or not args.site.is_dir():
        raise SystemExit("no site: give --site DIR (a folder of HTML), or install the Rust docs (rustup)")
    paged = crawl(args.site, args.workdir, args.max_pages)
    whole = args.workdir / "whole-row-group"
    unpaged_copy(paged, whole)
    caught = captures(paged)
    if captures(whole) != caught:
        raise SystemExit("the two stores hold different captures")
    stores = {"whole row group": whole, "paged": paged}
    seen: dict[str, dict[str, list[str]]] = {}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s: {w: [] for w in WORKLOADS} for s in stores}
    for _ in range(args.rounds):
        for name, store in stores.items():
            proc, base = serve(store)
            try:
                seen.setdefault(name, answers(base, caught))
                for workload in WORKLOADS:
                    runs[name][workload].append(
                        load(proc, base, caught, workload, args.connections, args.seconds)
                    )
            finally:
                stop([proc])
    differ = {w: sum(a != b for a, b in zip(*(seen[s][w] for s in stores), strict=True)) for w in WORKLOADS}
    bad = {w: sum(not a.startswith("200 ") for a in seen["paged"][w]) for w in WORKLOADS}
    best = {s: {w: max(runs[s][w], key=lambda r: r["req_per_s"]) for w in WORKLOADS} for s in stores}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    record = {
        "commit": commit, "version": __version__, "machine": platform.platform(), "site": str(args.site),
        "pages": len(caught), "connections": args.connections, "seconds": args.seconds, "rounds": args.rounds,
        "files": {s: files(p) for s, p in stores.items()}, "answers_differ": differ, "not_200": bad,
        "runs": runs, "best": best,
    }  # fmt: skip
    lines = [
        f"A real site, {len(caught)} pages of {args.site} crawled with `web-index crawl` and compacted, at "
        f"{commit}: each store served alone by `web-index serve` (one process), "
        f"{args.connections} keep-alive clients for {args.seconds:.0f} s, {args.rounds} alternated rounds "
        "(the best shown). Answers "
        f"differing between the stores: {differ}; not 200: {bad}.",
        "",
        "| store | get files (paged) | bytes | workload | req/s | p50 ms | p99 ms | server CPU ms/req |",
        "|---|---:|---:|---|---:|---:|---:|---:|",
    ]
    for s in stores:
        f = record["files"][s]
        for w in WORKLOADS:
            r = best[s][w]
            lines.append(
                f"| {s} | {f['get_files']} ({f['paged_files']}) | {f['get_bytes']:,} | {w} "
                f"| {r['req_per_s']:,} | {r['p50_ms']} | {r['p99_ms']} | {r['server_cpu_ms_per_req']} |"
            )
    lines.append("")
    for w in WORKLOADS:
        ratio = best["paged"][w]["req_per_s"] / best["whole row group"][w]["req_per_s"]
        lines.append(f"- {w}: paged ÷ whole row group, req/s: {ratio:.2f}x")
    print("\n".join(lines))
    save(args.out, record, lines)


if __name__ == "__main__":
    main()
