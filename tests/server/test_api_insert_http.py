"""``POST /api/insert`` over real HTTP: there only with a write token, which it
checks; a batch stored all or none; and ``web-index serve``'s token options."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.factories import T0, attempt, insertion_request
from tests.server.serving import serving
from tests.servers import free_port, wait_port
from web_index import WebIndex
from web_index.cli import app
from web_index.models import query_from_dict, result_json
from web_index.server import create_app

TOKEN = "s3cret-Tøken"  # not ASCII: compared as the bytes sent
CLI = str(Path(sys.executable).parent / "web-index")


def request(url: str, minutes: int = 0, state: str = "success") -> dict[str, Any]:
    """An insertion request, as ``web-index insert`` reads them (bodies in base64)."""
    return insertion_request(*attempt(url, T0 + timedelta(minutes=minutes), state=state))


def _count(index: WebIndex) -> int:
    return sum(1 for _ in index.scan("get-metadata"))


def _auth(token: str = TOKEN) -> dict[str, Any]:
    return {"authorization": f"Bearer {token}".encode()}  # UTF-8: what curl sends of a token file


@pytest.fixture
def writable(tmp_path: Path) -> Iterator[tuple[WebIndex, httpx.Client]]:
    with WebIndex(tmp_path / "store") as index, serving(index, write_token=f"  {TOKEN}\n") as http:
        yield index, http


def test_insert_then_query_finds_them(writable: tuple[WebIndex, httpx.Client]) -> None:
    index, http = writable
    batch = [request("https://a.example/", 0), request("https://b.example/", 1, "timeout")]
    stored = http.post("/api/insert", json=batch, headers=_auth())
    assert stored.status_code == 200, stored.text
    keys = stored.json()["keys"]
    assert [(k["url"], k["type"]) for k in keys] == [
        ("https://a.example/", "get"),
        ("https://b.example/", "get-metadata"),
    ]
    ndjson = "".join(json.dumps(r) + "\n" for r in [request("https://c.example/", 2)])
    more = http.post(
        "/api/insert", content=ndjson, headers={**_auth(), "content-type": "application/x-ndjson"}
    )
    keys += more.json()["keys"]
    answered = [json.loads(line) for line in http.post("/api/query", json=keys).text.splitlines()]
    queries = [query_from_dict(k) for k in keys]
    assert answered == [
        {"query": q.to_dict(), "result": result_json(r, bodies=False)}
        for q, r in zip(queries, index.query(queries), strict=True)
    ]
    assert all(line["result"] is not None for line in answered)
    assert answered[1]["result"]["state"] == "timeout"
    assert http.post("/api/insert", json=[], headers=_auth()).json() == {"keys": []}


@pytest.mark.parametrize(
    ("headers", "challenge"),
    [
        ({}, 'Bearer realm="web-index"'),
        (_auth("wrong"), 'Bearer realm="web-index", error="invalid_token"'),
        (_auth(TOKEN + "x"), 'Bearer realm="web-index", error="invalid_token"'),
        ({"authorization": f"Basic {TOKEN}".encode()}, 'Bearer realm="web-index", error="invalid_token"'),
        ({"authorization": "Bearer"}, 'Bearer realm="web-index", error="invalid_token"'),
    ],
)
def test_a_missing_or_wrong_token_is_a_401(
    writable: tuple[WebIndex, httpx.Client], headers: dict[str, Any], challenge: str
) -> None:
    index, http = writable
    refused = http.post("/api/insert", json=[request("https://a.example/")], headers=headers)
    assert refused.status_code == 401 and refused.headers["www-authenticate"] == challenge
    assert refused.json()["parameter"] == "Authorization"
    assert _count(index) == 0


@pytest.mark.parametrize(
    ("position", "spoil", "parameter"),
    [
        (0, lambda r: r["metadata"].update(url="https://else.example/"), "attempts[0].metadata.url"),
        (2, lambda r: r["data"][0].update(status_code=1000), "attempts[2].data[0].status_code"),
        (1, lambda r: r.pop("timestamp"), "attempts[1].timestamp"),
        (2, lambda r: r.update(type="get-metadata"), "attempts[2].type"),
        (1, lambda r: r["data"][0].update(data="not base64!"), "attempts[1].data[0].data"),
    ],
)
def test_a_bad_item_stores_nothing_and_is_named(
    writable: tuple[WebIndex, httpx.Client], position: int, spoil: Any, parameter: str
) -> None:
    index, http = writable
    http.post("/api/insert", json=[request("https://before.example/")], headers=_auth()).raise_for_status()
    before = _count(index)
    batch = [request(f"https://{n}.example/", n) for n in range(3)]
    spoil(batch[position])
    refused = http.post("/api/insert", json=batch, headers=_auth())
    assert refused.status_code == 400 and refused.json()["parameter"] == parameter
    assert refused.json()["error"].startswith(f"{parameter}: ")
    assert _count(index) == before == 1


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_PATHS = [
    *[(name,) for name in ("type", "url", "timestamp", "metadata", "data")],
    *[("metadata", name) for name in ("state", "url", "fetcher_calibre", "run_time", "timestamp", "logs")],
    *[("data", 0, name) for name in ("headers", "timestamp", "data", "status_code", "is_final", "url", "x")],
]


@settings(max_examples=100)
@given(path=st.sampled_from(_PATHS), value=_json)
def test_any_json_in_a_field_is_stored_or_refused_naming_it(
    writable: tuple[WebIndex, httpx.Client], path: tuple[Any, ...], value: Any
) -> None:
    _, http = writable
    item = request("https://a.example/")
    target: Any = item
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    got = http.post("/api/insert", json=[request("https://b.example/"), item], headers=_auth())
    assert got.status_code in (200, 400), got.text
    if got.status_code == 400:
        assert got.json()["parameter"].startswith("attempts[1].")
        assert got.json()["error"].startswith(got.json()["parameter"] + ": ")


def test_the_insert_caps(tmp_path: Path) -> None:
    with (
        WebIndex(tmp_path / "store") as index,
        serving(index, write_token=TOKEN, max_batch=2, max_body=4096) as http,
    ):
        three = [request(f"https://{n}.example/") for n in range(3)]
        over = http.post("/api/insert", json=three, headers=_auth())
        assert over.status_code == 413 and over.json()["parameter"] == "attempts"
        big = http.post("/api/insert", json=[{**three[0], "pad": "x" * 5000}], headers=_auth())
        assert big.status_code == 413 and big.json()["parameter"] == "body"
        # Unauthenticated, the body is not read at all: the same 401.
        assert http.post("/api/insert", content=b"x" * 10_000).status_code == 401
        assert _count(index) == 0


def test_a_write_token_needs_a_writable_index(tmp_path: Path) -> None:
    WebIndex(tmp_path / "store").close()
    with WebIndex(tmp_path / "store", read_only=True) as index, pytest.raises(ValueError, match="read_only"):
        create_app(index, write_token=TOKEN)
    with WebIndex(tmp_path / "store") as index, pytest.raises(ValueError, match="empty"):
        create_app(index, write_token=" \n")


runner = CliRunner()


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("content", [None, "", " \n\t", b"\xff\xfe"])
def test_serve_refuses_a_missing_or_empty_token_file_in_one_line(
    tmp_path: Path, content: str | bytes | None
) -> None:
    WebIndex(tmp_path / "store").close()
    path = tmp_path / "token"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = runner.invoke(
        app, ["serve", "--store", str(tmp_path / "store"), "--write-token-file", str(path)]
    )
    assert result.exit_code == 2, result.exc_info
    line = _one_line(result.stderr)
    assert line.startswith("error: --write-token-file") and "Traceback" not in result.stderr


def test_serve_with_a_token_file_or_variable_opens_the_write_endpoint(tmp_path: Path) -> None:
    store = tmp_path / "store"
    WebIndex(store).close()
    (tmp_path / "token").write_text(TOKEN + "\n")
    env = {"PATH": str(Path(sys.executable).parent)}
    limits = ["--max-batch", "1", "--max-body", "100000"]
    for args, extra in (
        (["--write-token-file", str(tmp_path / "token"), *limits], {}),
        ([], {"WEB_INDEX_WRITE_TOKEN": TOKEN}),
        ([], {}),
    ):
        port = free_port()
        proc = subprocess.Popen(
            [CLI, "serve", "--store", str(store), "--port", str(port), *args],
            stderr=subprocess.PIPE,
            env={**env, **extra},
        )
        try:
            wait_port(port)
            got = httpx.post(
                f"http://127.0.0.1:{port}/api/insert", json=[request("https://a.example/")], headers=_auth()
            )
            assert got.status_code == (200 if args or extra else 404)
            two = httpx.post(f"http://127.0.0.1:{port}/api/query", json=[{"url": "https://a.example/"}] * 2)
            big = httpx.post(f"http://127.0.0.1:{port}/api/query", content=b" " * 100_001)
            assert (two.status_code, big.status_code) == ((413, 413) if args else (200, 200))
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
        assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]
    with WebIndex(store, read_only=True) as index:
        assert _count(index) == 2


def _workers(pid: int) -> set[int]:
    """The server processes ``pid`` started (not multiprocessing's resource tracker)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            command = (status.parent / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if fields.get("PPid", "").strip() == str(pid) and b"spawn_main" in command:
            found.add(int(status.parent.name))
    return found


def _two_workers(store: Path) -> tuple[int, subprocess.Popen[bytes]]:
    """``web-index serve --workers 2`` over a new store (writes open to ``TOKEN``): its port and process."""
    WebIndex(store).close()
    port = free_port()
    proc = subprocess.Popen(
        [CLI, "serve", "--store", str(store), "--port", str(port), "--workers", "2"],
        stderr=subprocess.PIPE,
        env={"PATH": str(Path(sys.executable).parent), "WEB_INDEX_WRITE_TOKEN": TOKEN},
    )
    return port, proc


def test_serve_with_workers_shares_one_store(tmp_path: Path) -> None:
    """Two worker processes on one port: what one stores, any answers; one killed is started
    again; a stop stops them all, a success."""
    port, proc = _two_workers(tmp_path / "store")
    try:
        wait_port(port)
        base = f"http://127.0.0.1:{port}"
        workers = _workers(proc.pid)
        assert len(workers) == 2, workers
        for n in range(6):  # new connections: the kernel spreads them over the workers
            url = f"https://a.example/{n}"
            assert httpx.post(f"{base}/api/insert", json=[request(url)], headers=_auth()).status_code == 200
            for _ in range(4):
                assert httpx.get(f"{base}/store/cdx", params={"url": url}).text.count("\n") == 1
        os.kill(min(workers), signal.SIGKILL)
        deadline = time.monotonic() + 30
        while len(_workers(proc.pid) - {min(workers)}) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(_workers(proc.pid) - {min(workers)}) == 2  # a new one in its place
        lines = httpx.get(f"{base}/store/cdx", params={"url": "a.example/", "matchType": "prefix"}).text
        assert lines.count("\n") == 6
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert not _workers(proc.pid)
    assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


def _sockets_on(worker: int, port: int, state: str = "01") -> int:
    """How many connections to ``port`` the process ``worker`` holds, accepted
    (or, with ``state="0A"``, how many sockets listening on it)."""
    inodes = set()
    for fd in Path(f"/proc/{worker}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    held = 0
    for line in Path(f"/proc/{worker}/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local_port, inode = int(fields[1].split(":")[1], 16), fields[9]
        held += local_port == port and fields[3] == state and inode in inodes
    return held


def _listening(supervisor: int, port: int, replacing: frozenset[int] = frozenset(), n: int = 2) -> set[int]:
    """The ``n`` workers of ``supervisor`` (none of ``replacing``), once each listens on a
    socket of its own."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        workers = _workers(supervisor)
        with contextlib.suppress(OSError):  # one gone meanwhile
            new = len(workers) == n and not workers & replacing
            if new and all(_sockets_on(w, port, "0A") == 1 for w in workers):
                return workers
        time.sleep(0.1)
    raise AssertionError(f"not {n} workers each listening on its socket: {_workers(supervisor)}")


@pytest.mark.skipif(sys.platform != "linux", reason="SO_REUSEPORT spreads connections on Linux only")
def test_connections_opened_together_are_spread_over_the_workers(tmp_path: Path) -> None:
    """Keep-alive connections opened in one burst (a proxy filling its pool) land on
    every worker: not all on the one that was free when they came, for good."""
    port, proc = _two_workers(tmp_path / "store")
    clients: list[socket.socket] = []
    try:
        wait_port(port)
        first = _listening(proc.pid, port)
        # The burst comes while one worker is busy (here: stopped) and the other free.
        busy = min(first)
        os.kill(busy, signal.SIGSTOP)
        try:
            for _ in range(16):
                client = socket.socket()
                client.setblocking(False)
                with contextlib.suppress(BlockingIOError):
                    client.connect(("127.0.0.1", port))
                clients.append(client)
            time.sleep(0.3)
        finally:
            os.kill(busy, signal.SIGCONT)
        for client in clients:
            client.setblocking(True)
            client.settimeout(10)
            client.sendall(b"GET /store/cdx?url=a.example/ HTTP/1.1\r\nHost: x\r\n\r\n")
        for client in clients:
            assert client.recv(9) == b"HTTP/1.1 "  # answered: accepted by a worker
        held = {worker: _sockets_on(worker, port) for worker in _workers(proc.pid)}
        assert sum(held.values()) == 16 and all(held.values()), held
        # The supervisor keeps no socket (it would take a share of new connections
        # that nobody accepts), also once HUP has replaced every worker.
        assert _sockets_on(proc.pid, port, "0A") == 0
        # The same whichever way uvicorn's supervisor starts or stops workers.
        os.kill(proc.pid, signal.SIGHUP)  # each replaced by a new one
        second = _listening(proc.pid, port, replacing=frozenset(first))
        assert _sockets_on(proc.pid, port, "0A") == 0
        os.kill(proc.pid, signal.SIGTTIN)  # one more
        third = _listening(proc.pid, port, n=3)
        assert third > second and _sockets_on(proc.pid, port, "0A") == 0
        os.kill(proc.pid, signal.SIGTTOU)  # one fewer: its socket goes with it
        assert _listening(proc.pid, port, n=2) < third
        assert _sockets_on(proc.pid, port, "0A") == 0
    finally:
        for client in clients:
            client.close()
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


def test_serve_workers_must_be_one_or_more(tmp_path: Path) -> None:
    bad = subprocess.run([CLI, "serve", "--store", str(tmp_path), "--workers", "0"], capture_output=True)
    assert bad.returncode == 2 and b"--workers" in bad.stderr and b"Traceback" not in bad.stderr
