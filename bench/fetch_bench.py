"""HTTP fetch throughput into the store, next to plain httpx.

One process fetches N pages (about 10 KB of HTML each, the sample site's
``/page/N``) from a local server three ways. The server is a minimal asyncio
HTTP/1.1 server with keep-alive in a separate process, fast enough that the
client side is what is measured:

- ``httpx``: a plain ``httpx.AsyncClient``, bodies read and dropped;
- ``fetcher``: web-index's HTTP fetcher through the runner, nothing stored
  (address policy, hop recording, bounded decoding, classification);
- ``fetch+store``: the same, with every attempt recorded into a fresh store.

The ratios show what the fetcher and the recording cost. Results go to
stdout and ``bench/results/fetch.json``.

    .venv/bin/python bench/fetch_bench.py [--pages 2000] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from web_index import WebIndex, __version__
from web_index.cli._sample_site import bench_page
from web_index.fetch import AddressPolicy, EscalationPolicy, FetchRunner, HttpFetcher
from web_index.models import Calibre

RESULTS = Path(__file__).parent / "results" / "fetch.json"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def serve(port: int) -> None:
    """Answer ``GET /page/N`` with the sample site's bench page, kept alive."""
    cache: dict[bytes, bytes] = {}

    def response(path: bytes) -> bytes:
        if path not in cache:
            tail = path.rsplit(b"/", 1)[-1]
            body = bench_page(int(tail) if tail.isdigit() else 0)
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            )
            cache[path] = head.encode() + body
        return cache[path]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                writer.write(response(request.split(b" ", 2)[1]))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=512)
    async with server:
        await server.serve_forever()


def start_server(port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/page/0", timeout=1).raise_for_status()
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the bench server did not start")


async def plain_httpx(urls: list[str], concurrency: int) -> int:
    limit = asyncio.Semaphore(concurrency)
    total = 0
    async with httpx.AsyncClient(limits=httpx.Limits(max_connections=concurrency)) as client:

        async def one(url: str) -> None:
            nonlocal total
            async with limit:
                response = await client.get(url)
                total += len(response.content)

        await asyncio.gather(*(one(u) for u in urls))
    return total


async def through_runner(urls: list[str], concurrency: int, index: WebIndex | None) -> int:
    fetcher = HttpFetcher(address_policy=AddressPolicy(allow_loopback=True), max_connections=concurrency)
    runner = FetchRunner(
        [fetcher],
        index,
        policy=EscalationPolicy(max_calibre=Calibre.HTTP),
        concurrency=concurrency,
        per_domain=concurrency,
    )
    async with runner:
        outcomes = await runner.run(urls)
    bad = [o for o in outcomes if not o.state.is_success]
    if bad:
        raise RuntimeError(f"{len(bad)} fetches failed, e.g. {bad[0].final.logs}")
    return sum(len(o.final.responses[-1].data or b"") for o in outcomes)


def timed(label: str, fn: object, pages: int) -> dict[str, float]:
    started, cpu = time.perf_counter(), time.process_time()
    size = asyncio.run(fn())  # type: ignore[operator]
    seconds = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu
    rate = pages / seconds
    print(
        f"{label:>12}: {pages} pages in {seconds:6.2f}s = {rate:8.1f} pages/s "
        f"({pages / cpu_seconds:8.1f} pages per CPU-second, {size / 2**20:.1f} MiB)"
    )
    return {
        "seconds": round(seconds, 3),
        "pages_per_s": round(rate, 1),
        "cpu_seconds": round(cpu_seconds, 3),
        "pages_per_cpu_s": round(pages / cpu_seconds, 1),
        "bytes": size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        return
    port = free_port()
    server = start_server(port)
    try:
        base = f"http://127.0.0.1:{port}/page/"
        warm = [f"{base}{n}" for n in range(50)]
        asyncio.run(plain_httpx(warm, args.concurrency))
        results: dict[str, dict[str, float]] = {}
        urls = [f"{base}{n}" for n in range(args.pages)]
        results["httpx"] = timed("httpx", lambda: plain_httpx(urls, args.concurrency), args.pages)
        results["fetcher"] = timed(
            "fetcher", lambda: through_runner(urls, args.concurrency, None), args.pages
        )
        with (
            tempfile.TemporaryDirectory(prefix="web-index-fetch-bench-") as tmp,
            WebIndex(Path(tmp) / "store") as index,
        ):
            results["fetch+store"] = timed(
                "fetch+store", lambda: through_runner(urls, args.concurrency, index), args.pages
            )
    finally:
        server.terminate()
        server.wait(10)
    base_rate = results["httpx"]["pages_per_s"]
    base_cpu = results["httpx"]["pages_per_cpu_s"]
    ratios = {
        "fetcher_vs_httpx": round(results["fetcher"]["pages_per_s"] / base_rate, 3),
        "store_vs_httpx": round(results["fetch+store"]["pages_per_s"] / base_rate, 3),
        "store_vs_fetcher": round(
            results["fetch+store"]["pages_per_s"] / results["fetcher"]["pages_per_s"], 3
        ),
        "cpu_fetcher_vs_httpx": round(results["fetcher"]["pages_per_cpu_s"] / base_cpu, 3),
        "cpu_store_vs_httpx": round(results["fetch+store"]["pages_per_cpu_s"] / base_cpu, 3),
    }
    print(f"ratios: {ratios}")
    report = {
        "benchmark": "fetch",
        "web_index": __version__,
        "httpx": httpx.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "pages": args.pages,
        "concurrency": args.concurrency,
        "page_bytes": results["httpx"]["bytes"] // args.pages,
        "results": results,
        "ratios": ratios,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
