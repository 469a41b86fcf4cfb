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

import json
import sys
import threading
import time
import zlib
from typing import Any

import httpx

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
    urls: list[str] = job["urls"]
    n: int = job["connections"]
    lock = threading.Lock()
    seconds: list[float] = []
    statuses: dict[int, int] = {}
    errors: list[str] = []
    ready, go = threading.Barrier(n + 1), threading.Barrier(n + 1)
    end = [0.0]

    def worker(i: int) -> None:
        mine: list[float] = []
        codes: dict[int, int] = {}
        with httpx.Client(timeout=job["timeout"], trust_env=False) as client:
            client.get(urls[i % len(urls)], headers=HEADERS)  # connected before the clock starts
            ready.wait()
            go.wait()  # end[0] is set
            k = i
            while time.perf_counter() < end[0]:
                t = time.perf_counter()
                try:
                    code = client.get(urls[k % len(urls)], headers=HEADERS).status_code
                except httpx.HTTPError as exc:
                    with lock:
                        errors.append(repr(exc))
                    continue
                mine.append(time.perf_counter() - t)
                codes[code] = codes.get(code, 0) + 1
                k += n
        with lock:
            seconds.extend(mine)
            for code, count in codes.items():
                statuses[code] = statuses.get(code, 0) + count

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    ready.wait()
    cpu0 = time.process_time()
    start = time.perf_counter()
    end[0] = start + job["seconds"]
    go.wait()
    for t in threads:
        t.join()
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


def main() -> None:
    job = json.load(sys.stdin)
    result = sequential(job) if job["mode"] == "sequential" else concurrent(job)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
