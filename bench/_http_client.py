"""The HTTP client of server_bench.py, run as a process of its own so that it does not share the
servers' interpreter (on 2 cores, its CPU shows in the bench's ``client_cpu_s``).

    python bench/_http_client.py < job.json > result.json

A job is JSON:

- ``{"mode": "sequential", "requests": [[side, url, kind], ...], "timeout": s}``: one keep-alive
  ``httpx.Client`` per side, the requests one at a time in the given order (server_bench
  alternates the sides query by query); each timed from the call to the last byte of its body,
  then summed up (after the clock) by ``kind``: ``cdx`` (the lines of a CDXJ answer), ``record``
  (a WARC record: the Resource API's answer) or ``replay`` (an archived response, pywb's ``id_``).
- ``{"mode": "concurrent", "urls": [...], "connections": n, "seconds": s, "timeout": s}``: ``n``
  threads, each with its own keep-alive client, going round the URLs (thread i from the i-th) for
  ``s`` seconds; a request started before the end counts when it ends.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import time
import zlib
from typing import Any
from urllib.parse import urlsplit

import httpx
import uvloop

HEADERS = {"Accept-Encoding": "identity"}  # pywb then sends a stored body as it was stored


def summary(kind: str, r: httpx.Response) -> dict[str, Any]:
    """What the sides' answers are compared on."""
    out: dict[str, Any] = {"status": r.status_code}
    if kind == "replay":  # the archived response (a 301 too), with pywb's Memento-Datetime
        out["status"] = 200 if r.headers.get("memento-datetime") else r.status_code
        out |= {"memento": r.headers.get("memento-datetime"), "http_status": r.status_code}
        out |= {"payload_crc": zlib.crc32(r.content), "bytes": len(r.content)}
        return out
    if r.status_code != 200:
        out["text"] = r.text[:200]
        return out
    if kind == "cdx":
        keys, first = [], None
        for line in r.text.splitlines():
            if not line.strip():
                continue
            urlkey, ts, rest = line.split(" ", 2)
            keys.append(f"{urlkey} {ts}")
            if first is None:
                first = [ts, json.loads(rest).get("url")]
        out |= {"lines": len(keys), "first": first, "keys_crc": zlib.crc32("\n".join(keys).encode())}
        return out
    out["memento"] = r.headers.get("memento-datetime")
    raw = r.content  # a WARC record: headers, blank line, Content-Length bytes of HTTP response
    head, _, rest = raw.partition(b"\r\n\r\n")
    fields = dict(
        line.split(": ", 1) for line in head.decode("utf-8", "replace").split("\r\n")[1:] if ": " in line
    )
    block = rest[: int(fields.get("Content-Length", len(rest)))]
    http_head, _, payload = block.partition(b"\r\n\r\n")
    status_line = http_head.split(b"\r\n", 1)[0].split(b" ")
    out |= {
        "http_status": int(status_line[1]) if len(status_line) > 1 else None,
        "target": fields.get("WARC-Target-URI"),
        "payload_crc": zlib.crc32(payload),
        "bytes": len(payload),
    }
    return out


def sequential(job: dict[str, Any]) -> dict[str, Any]:
    clients: dict[str, httpx.Client] = {}
    seconds, answers = [], []
    cpu0 = time.process_time()
    try:
        for side, url, _kind in job["requests"]:
            client = clients.get(side)
            if client is None:
                client = clients[side] = httpx.Client(timeout=job["timeout"], trust_env=False)
            t = time.perf_counter()
            r = client.get(url, headers=HEADERS)
            seconds.append(time.perf_counter() - t)
            answers.append(r)
    finally:
        for client in clients.values():
            client.close()
    cpu = time.process_time() - cpu0
    sums = [summary(kind, r) for (_, _, kind), r in zip(job["requests"], answers, strict=True)]
    return {"seconds": seconds, "answers": sums, "client_cpu_s": round(cpu, 2)}


def concurrent(job: dict[str, Any]) -> dict[str, Any]:
    """``n`` keep-alive connections on one event loop, each sending its next request as soon as
    the last answer's body is in. Raw HTTP/1.1, not httpx: a thread of httpx costs ~0.7 ms of CPU
    a request, so 8 of them capped both sides near 1,200 req/s on 2 cores (the client's limit,
    not the servers'); this costs a fraction of that, so the servers' own limits show."""
    return uvloop.run(_concurrent(job))


async def _concurrent(job: dict[str, Any]) -> dict[str, Any]:
    urls: list[str] = job["urls"]
    n: int = job["connections"]
    seconds: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    target = urlsplit(urls[0])
    host, port = target.hostname or "127.0.0.1", target.port or 80
    requests = [_request(url) for url in urls]
    ready = asyncio.Event()
    end = [0.0]

    warm: list[int] = []

    async def worker(i: int) -> None:
        conn = await _Connection.open(host, port)
        await conn.get(requests[i % len(requests)])  # connected and warm before the clock starts
        warm.append(i)
        await ready.wait()
        k = i
        while time.perf_counter() < end[0]:
            t = time.perf_counter()
            try:
                code = await asyncio.wait_for(conn.get(requests[k % len(requests)]), job["timeout"])
            except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                errors.append(repr(exc))
                conn.close()
                conn = await _Connection.open(host, port)
                continue
            seconds.append(time.perf_counter() - t)
            statuses[code] = statuses.get(code, 0) + 1
            k += n
        conn.close()

    tasks = [asyncio.create_task(worker(i)) for i in range(n)]
    while len(warm) < n and not any(t.done() for t in tasks):
        await asyncio.sleep(0.01)
    cpu0 = time.process_time()
    start = time.perf_counter()
    end[0] = start + job["seconds"]
    ready.set()
    await asyncio.gather(*tasks)
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    return {
        "seconds": seconds,
        "elapsed_s": round(elapsed, 3),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "errors": len(errors),
        "first_errors": errors[:3],
        "client_cpu_s": round(cpu, 2),
    }


def _request(url: str) -> bytes:
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    host = parts.netloc
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept-Encoding: identity\r\n\r\n".encode()


class _Connection:
    """One keep-alive HTTP/1.1 connection: a request out, its status, its body read and dropped
    (``Content-Length``, chunked, or up to the close)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> _Connection:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def get(self, request: bytes) -> int:
        self.writer.write(request)
        head = await self.reader.readuntil(b"\r\n\r\n")
        code = int(head[9:12])
        fields = {}
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip().lower()
        if b"content-length" in fields:
            await self.reader.readexactly(int(fields[b"content-length"]))
        elif fields.get(b"transfer-encoding") == b"chunked":
            while True:
                size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
                await self.reader.readexactly(size + 2)
                if size == 0:
                    break
        else:
            await self.reader.read()  # to the close
            raise ValueError("the server closed the connection after its answer")
        if fields.get(b"connection") == b"close":
            raise ValueError("the server closed the connection after its answer")
        return code

    def close(self) -> None:
        self.writer.close()


def main() -> None:
    job = json.load(sys.stdin)
    result = sequential(job) if job["mode"] == "sequential" else concurrent(job)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
