"""site_bench.py's helpers: the crawl (cached), the stores' copies and sizes, a ``web-index serve``
of one side, the answers compared between sides, and one timed run of keep-alive clients.

Nothing here imports ``web_index``: the bench drives the CLI and the HTTP API only, so that it runs
the same against any checkout of the code (``--against``) and while modules move.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from _procs import CLI, busy, cpu_seconds, free_port, stop

HERE = Path(__file__).resolve().parent
COLL = "store"  # the collection of `web-index serve --store` (docs/server.md)
WORKLOADS = ("resource", "id_", "cdx")
# Runs the console script in the interpreter that serves, after saying which web_index it imported.
LAUNCH = (
    "import runpy, sys, web_index; print('web_index', web_index.__file__, flush=True); "
    "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
)


def cli(*args: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([CLI, *args], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"web-index {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def stats(store: Path) -> dict[str, Any]:
    """``web-index stats --json`` without the partitions: records, files, buffered attempts and bytes."""
    got = json.loads(cli("stats", "--store", str(store), "--json"))
    return {k: v for k, v in got.items() if k != "partitions"}


def crawl(
    site: Path, store: Path, env: dict[str, str] | None = None, port: int | None = None
) -> dict[str, Any]:
    """``site`` served by ``python -m http.server`` and crawled twice into ``store`` as issue 46 did:
    at the default depth, then with ``--max-depth 500``; each crawl's ``--json`` result. ``env``: the
    crawls' environment (``PYTHONPATH``: the code); ``port``: the site's (the same URLs again)."""
    port = port or free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(site)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    seed = f"http://127.0.0.1:{port}/index.html"
    runs = []
    try:
        wait(f"http://127.0.0.1:{port}/", server)
        for depth in ([], ["--max-depth", "500"]):
            began = time.monotonic()
            out = cli(
                "crawl", seed, "--store", str(store), "--scope", "prefix", "--page-requisites",
                "--allow-loopback", "--settle", "0.5", "--json", *depth, env=env,
            )  # fmt: skip
            result = json.loads(out.strip().splitlines()[-1])
            keep = ("pages", "requisites", "fetched", "errors", "requisite_errors", "out_of_scope")
            runs.append({"args": depth, "wall_s": round(time.monotonic() - began, 1)} | {
                k: result.get(k) for k in keep
            })  # fmt: skip
    finally:
        stop([server])
    return {"site": str(site), "seed": seed, "prefix": f"http://127.0.0.1:{port}/", "crawls": runs}


def compacted_copy(source: Path, dest: Path, env: dict[str, str] | None = None) -> float:
    """A fresh copy of the ``source`` folder, then ``web-index compact`` on it by the code ``env``
    names (made again every run: the code being measured compacts it); the seconds compact took."""
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(source, dest)
    began = time.monotonic()
    cli("compact", "--store", str(dest), env=env)
    return round(time.monotonic() - began, 2)


def sizes(store: Path) -> dict[str, int]:
    """Bytes of the store's parts: get and get-metadata files, capture indexes, month indexes, buffer."""

    def du(rel: str) -> int:
        return sum(p.stat().st_size for p in (store / rel).rglob("*") if p.is_file())

    out = {d: du(d) for d in ("get", "get-metadata", "_captures", "_index", "_buffer")}
    return out | {"get_files": sum(1 for _ in (store / "get").rglob("*.parquet"))}


def warm(store: Path) -> None:
    """Every file of the store read once, so that the server finds them in the page cache."""
    for p in sorted(q for q in store.rglob("*") if q.is_file()):
        with p.open("rb") as fh:
            while fh.read(1 << 22):
                pass


def wait(url: str, proc: subprocess.Popen[Any]) -> None:
    for _ in range(600):
        try:
            httpx.get(url, timeout=1, trust_env=False)
            return
        except httpx.HTTPError:
            if proc.poll() is not None:
                raise SystemExit(f"the process serving {url} exited ({proc.returncode})") from None
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer")


def serve(store: Path, log: Path, pythonpath: str | None) -> tuple[subprocess.Popen[bytes], str, str]:
    """``web-index serve`` of ``store``, one worker, in a process of its own (``PYTHONPATH`` first
    on its path when given); the process, its base URL and the ``web_index`` it imported."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", LAUNCH, CLI, "serve", "--store", str(store), "--port", str(port),
             "--workers", "1", "--no-ui"],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    wait(f"{base}/{COLL}/cdx?url=x", proc)
    first = log.read_text().split("\n", 1)[0].split(" ", 1)
    if first[0] != "web_index":
        stop([proc])
        raise SystemExit(f"the server did not say which web_index it runs: {log}")
    return proc, base, first[1]


def family_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its children (none with one worker; counted should there be)."""
    total = cpu_seconds(pid)
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if f"\nPPid:\t{pid}\n" in status.read_text():
                total += cpu_seconds(int(status.parent.name))
        except OSError:
            continue
    return total


def listing(base: str, prefix: str) -> list[tuple[str, ...]]:
    """Every capture under the site's prefix (CDX, ``matchType=prefix``): key, time, URL, mime,
    status, digest."""
    r = httpx.get(f"{base}/{COLL}/cdx", params={"url": prefix, "matchType": "prefix"}, timeout=120)
    r.raise_for_status()
    out = []
    for line in r.text.splitlines():
        if line.strip():
            key, ts, rest = line.split(" ", 2)
            f = json.loads(rest)
            out.append((key, ts, f["url"], f.get("mime", ""), f.get("status", ""), f.get("digest", "")))
    return out


def html_captures(lines: list[tuple[str, ...]]) -> list[tuple[str, str]]:
    """(14-digit time, URL) of each HTML URL answered 200, at its latest such capture."""
    latest: dict[str, str] = {}
    for _, ts, url, mime, status, _ in lines:
        if status == "200" and mime.split(";")[0].strip() == "text/html":
            latest[url] = max(ts, latest.get(url, ts))
    return sorted((ts, url) for url, ts in latest.items())


def request(base: str, workload: str, ts: str, url: str) -> str:
    if workload == "resource":
        return f"{base}/{COLL}/resource?{urlencode({'url': url, 'closest': ts})}"
    if workload == "id_":
        return f"{base}/{COLL}/{ts}id_/{quote(url, safe=':/?=&')}"
    return f"{base}/{COLL}/cdx?{urlencode({'url': url, 'closest': ts, 'limit': 1})}"


def summary(workload: str, r: httpx.Response) -> str:
    """What an answer is compared on: the status, then the memento's time and the SHA-1 of the
    archived body (``id_``); the WARC record's target, archived status and payload's SHA-1
    (``resource``); the first line's key, time, URL, mime, status and digest (``cdx``)."""
    if r.status_code != 200:
        return f"{r.status_code}"
    memento = r.headers.get("memento-datetime", "")
    if workload == "id_":
        return f"200 {memento} {hashlib.sha1(r.content).hexdigest()}"
    if workload == "cdx":
        key, ts, rest = (r.text.splitlines() or ["- - {}"])[0].split(" ", 2)
        f = json.loads(rest)
        return f"200 {key} {ts} " + " ".join(str(f.get(k)) for k in ("url", "mime", "status", "digest"))
    head, _, rest = r.content.partition(b"\r\n\r\n")
    fields = dict(x.split(": ", 1) for x in head.decode("utf-8", "replace").split("\r\n")[1:] if ": " in x)
    block = rest[: int(fields.get("Content-Length", len(rest)))]
    http_head, _, payload = block.partition(b"\r\n\r\n")
    status = http_head.split(b"\r\n", 1)[0].split(b" ")[1:2]
    sha1 = hashlib.sha1(payload).hexdigest()
    return f"200 {memento} {fields.get('WARC-Target-URI')} {b''.join(status).decode()} {sha1}"


def answers(base: str, caught: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Every URL asked once of each workload, one keep-alive connection: the answers' summaries."""
    out: dict[str, list[str]] = {}
    with httpx.Client(headers={"Accept-Encoding": "identity"}, timeout=120, trust_env=False) as client:
        for w in WORKLOADS:
            out[w] = [summary(w, client.get(request(base, w, ts, u))) for ts, u in caught]
    return out


def wait_quiet(pid: int, max_other: float, seconds: float = 2.0, patience: float = 300.0) -> bool:
    """Wait until the machine less process ``pid`` used at most ``max_other`` CPU s a second over
    ``seconds`` (at most ``patience`` s); whether it did."""
    deadline = time.monotonic() + patience
    while True:
        busy0, cpu0 = busy(), family_cpu(pid)
        time.sleep(seconds)
        if busy() - busy0 - (family_cpu(pid) - cpu0) <= max_other * seconds:
            return True
        if time.monotonic() > deadline:
            return False


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def timed_run(pid: int, urls: list[str], connections: int, seconds: float) -> dict[str, Any]:
    """``connections`` keep-alive clients (bench/_http_client.py, a process of its own) for
    ``seconds``: req/s, p50/p99, the server's CPU a request and what the rest of the machine used."""
    job = {"mode": "concurrent", "urls": urls, "connections": connections, "seconds": seconds, "timeout": 120}
    cpu0, busy0, wall0, kids0 = family_cpu(pid), busy(), time.monotonic(), _children_cpu()
    done = subprocess.run(
        [sys.executable, str(HERE / "_http_client.py")], input=json.dumps(job), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr[-2000:])
    cpu = family_cpu(pid) - cpu0
    machine, wall, client = busy() - busy0, time.monotonic() - wall0, _children_cpu() - kids0
    got = json.loads(done.stdout)
    lat = sorted(got["seconds"])
    n = len(lat)
    return {
        "requests": n,
        "req_per_s": round(n / got["elapsed_s"], 1),
        "p50_ms": round(1000 * statistics.median(lat), 2),
        "p99_ms": round(1000 * lat[int(0.99 * (n - 1))], 2),
        "server_cpu_ms_per_req": round(1000 * cpu / n, 3),
        "client_cpu_s": round(client, 2),  # the client process's, start-up included
        "other_cpu_s": round(machine - cpu - client, 1),  # the rest of the machine's, over wall_s
        "wall_s": round(wall, 1),
        "elapsed_s": got["elapsed_s"],
        "statuses": got["statuses"],
        "errors": got["errors"],
    }
