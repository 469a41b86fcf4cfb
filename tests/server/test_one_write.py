"""A response in one write (``server/_writes.py``): over a real loopback connection, the
peer receives exactly what was written, in order, whatever the writes and the steps of
the event loop between them; and under uvicorn each answer's head and body leave in one
hand-on, saying what the app says without the server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import T0, attempt
from tests.server.serving import serving
from web_index import WebIndex
from web_index.server import create_app
from web_index.server._writes import GatheredWrites

URL = "https://example.com/page"

# A step: bytes written, several written at once, or the event loop let run once.
_STEPS = st.lists(
    st.one_of(
        st.binary(min_size=0, max_size=300).map(lambda b: ("write", [b])),
        st.lists(st.binary(min_size=1, max_size=50), max_size=4).map(lambda bs: ("writelines", bs)),
        st.just(("yield", [])),
    ),
    max_size=25,
)


class _Peer(asyncio.Protocol):
    def __init__(self) -> None:
        self.received = bytearray()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.received += data

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


class _Spy:
    """The real transport, its ``writelines`` calls noted (how many pieces each)."""

    def __init__(self, transport: asyncio.BaseTransport) -> None:
        self.transport, self.handed = transport, []

    def writelines(self, data: Any) -> None:
        data = list(data)
        self.handed.append(len(data))
        self.transport.writelines(data)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


async def _exchange(
    steps: list[tuple[str, list[bytes]]], end: str, limit: int
) -> tuple[bytes, bytes, list[int]]:
    """The steps written through GatheredWrites on one end of a connected pair of
    sockets, ended by ``end``; what the other end received, what was written, and
    the sizes of the hand-ons the real transport got."""
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    peer = _Peer()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
    await loop.connect_accepted_socket(lambda: peer, theirs)
    spy = _Spy(transport)
    gathered = GatheredWrites(spy, loop, limit=limit)  # type: ignore[arg-type]
    written = bytearray()
    for kind, data in steps:
        if kind == "write":
            gathered.write(data[0])
            written += data[0]
        elif kind == "writelines":
            gathered.writelines(data)
            written += b"".join(data)
        else:
            await asyncio.sleep(0)
    if end == "close":
        gathered.close()
    else:
        gathered.write_eof()
        await asyncio.sleep(0)
        transport.close()
    await asyncio.wait_for(peer.done, 10)
    return bytes(peer.received), bytes(written), spy.handed


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
@settings(max_examples=60, deadline=None)
@given(steps=_STEPS, end=st.sampled_from(["close", "write_eof"]), limit=st.integers(1, 2_000))
def test_the_peer_receives_what_was_written_in_order(
    loop: str, steps: list[tuple[str, list[bytes]]], end: str, limit: int
) -> None:
    run = uvloop.run if loop == "uvloop" else asyncio.run
    received, written, handed = run(_exchange(steps, end, limit))
    assert received == written
    # Handed on at each step's end, and at once when ``limit`` bytes are held: never a write each.
    expected, held = 0, 0
    for kind, data in [*steps, ("yield", [])]:
        for piece in data:
            held += len(piece)
            if held >= limit:
                expected, held = expected + 1, 0
        if kind == "yield" and held:
            expected, held = expected + 1, 0
    assert len(handed) == expected


def test_abort_drops_what_is_held() -> None:
    async def run() -> bytes:
        loop = asyncio.get_running_loop()
        ours, theirs = socket.socketpair()
        peer = _Peer()
        transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, ours)
        await loop.connect_accepted_socket(lambda: peer, theirs)
        gathered = GatheredWrites(transport, loop)  # type: ignore[arg-type]
        gathered.write(b"never sent")
        assert gathered.get_write_buffer_size() == len(b"never sent")
        gathered.abort()
        await asyncio.wait_for(peer.done, 10)
        return bytes(peer.received)

    assert uvloop.run(run()) == b""


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebIndex]:
    folder: Path = tmp_path_factory.mktemp("store")
    with WebIndex(folder) as index:
        index.insert_many(
            [attempt(URL, T0 + timedelta(days=d), body=b"x" * (d * 5_000)) for d in range(0, 30, 3)]
        )
        index.flush()
        index.compact()
        yield index


REQUESTS = [
    ("GET", "/store/cdx?url=example.com/page", {}),
    ("GET", "/store/cdx?url=example.com/page&closest=20240110&limit=1", {"connection": "close"}),
    ("GET", "/store/resource?url=example.com/page&closest=20240120", {}),
    ("HEAD", "/store/cdx?url=example.com/page", {}),
    ("GET", "/store/cdx?url=example.com/never", {}),  # 404
    ("GET", "/store/cdx?url=example.com/page&closest=2024x", {}),  # 400
    ("GET", "/store/20240105id_/https://example.com/page", {}),
    ("GET", "/store/wacz?url=example.com/page", {}),  # streamed
]


_SERVERS_OWN = ("date", "server", "connection", "transfer-encoding")


def _without_server_fields(headers: httpx.Headers) -> list[tuple[str, str]]:
    return sorted((k, v) for k, v in headers.items() if k not in _SERVERS_OWN)


def test_uvicorn_with_one_write_answers_as_the_app_does(
    index: WebIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    hand_ons: list[int] = []
    original = GatheredWrites._hand_on

    def noted(self: GatheredWrites) -> None:
        hand_ons.append(len(self._held))
        original(self)

    monkeypatch.setattr(GatheredWrites, "_hand_on", noted)
    served = []
    with serving(index) as client:
        for method, path, headers in REQUESTS:
            before = len(hand_ons)
            r = client.request(method, path, headers=headers)
            served.append((r.status_code, _without_server_fields(r.headers), r.content))
            if path.startswith("/store/cdx?") and method == "GET" and r.status_code == 200:
                # The head and the body, handed on together.
                assert [n for n in hand_ons[before:] if n] == [2], path
        base = str(client.base_url)

    async def in_process() -> list[tuple[int, list[tuple[str, str]], bytes]]:
        transport = httpx.ASGITransport(app=create_app(index))
        async with httpx.AsyncClient(transport=transport, base_url=base) as client:
            out = []
            for method, path, headers in REQUESTS:
                r = await client.request(method, path, headers=headers)
                out.append((r.status_code, _without_server_fields(r.headers), r.content))
            return out

    expected = asyncio.run(in_process())
    assert {status for status, _, _ in expected} >= {200, 400, 404}
    for (method, path, _), got, want in zip(REQUESTS, served, expected, strict=True):
        if path.startswith("/store/wacz"):  # a new package each time: its size and kind
            assert got[0] == want[0] == 200 and got[2][:2] == want[2][:2] == b"PK"
            continue
        assert got == want, (method, path)
