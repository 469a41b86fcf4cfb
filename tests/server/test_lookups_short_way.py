"""The lookups' short way (``server/_lookups.py``): ``GET /{coll}/cdx``, ``/index`` and
``/resource`` answered past the router say exactly what the whole stack says, status,
header fields and body, for answers and errors alike; and only those take it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.server import create_app

URL = "https://example.com/page"

REQUESTS = [
    ("GET", "/store/cdx?url=example.com/page"),
    ("GET", "/store/cdx?url=example.com/page&closest=20240105&limit=1&output=json"),
    ("GET", "/store/index?url=example.com/*&fl=url,status"),
    ("GET", "/store/cdx?url=example.com/page&showNumPages=true"),
    ("GET", "/store/cdx?url=example.com/never"),  # 404
    ("GET", "/store/cdx?url=example.com/page&closest=2024x"),  # 400
    ("GET", "/store/cdx?url=example.com/page&sort=sideways"),  # 400
    ("GET", "/store/cdx"),  # 400: no url
    ("GET", "/store/resource?url=example.com/page&closest=20240110"),
    ("GET", "/store/resource?url=example.com/page&type=head"),
    ("GET", "/store/resource?url=example.com/never"),  # 404
    ("GET", "/store/resource?url=example.com/page&output=nonsense"),
    ("GET", "/nowhere/cdx?url=example.com/page"),  # no such collection
    ("GET", "/store/cdx/more?url=example.com/page"),
    ("HEAD", "/store/cdx?url=example.com/page"),
    ("POST", "/store/resource?url=example.com/page"),
    ("GET", "/store/20240105id_/https://example.com/page"),  # a memento: the router's
]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebIndex]:
    folder: Path = tmp_path_factory.mktemp("store")
    with WebIndex(folder) as index:
        index.insert_many(
            [attempt(URL, T0 + timedelta(days=d), body=f"day {d}".encode()) for d in range(0, 30, 3)]
            + [attempt(URL, T0 + timedelta(days=1), method="head")]
            + [attempt("https://example.com/other", T0, body=b"other")]
        )
        index.flush()
        index.compact()
        index.insert_many([attempt(URL, T0 + timedelta(days=40), body=b"buffered")])  # and one buffered
        yield index


class _Router:
    """The app's router, noting the paths it was asked for."""

    def __init__(self, router: Any) -> None:
        self.router, self.paths = router, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.router, name)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.router(scope, receive, send)


def _answers(
    app: Any, root_path: str = "", prefix: str = ""
) -> list[tuple[int, list[tuple[str, str]], bytes]]:
    async def ask() -> list[tuple[int, list[tuple[str, str]], bytes]]:
        transport = httpx.ASGITransport(app=app, root_path=root_path)
        async with httpx.AsyncClient(transport=transport, base_url="http://archive.test") as client:
            out = []
            for method, path in REQUESTS:
                r = await client.request(method, prefix + path)
                out.append((r.status_code, sorted(r.headers.items()), r.content))
            return out

    return asyncio.run(ask())


def test_the_short_way_answers_as_the_whole_stack(index: WebIndex) -> None:
    short, whole = create_app(index), create_app(index)
    whole.user_middleware = []  # before its first request: the stack is built then
    router = short.router = _Router(short.router)  # type: ignore[assignment]
    got, expected = _answers(short), _answers(whole)
    assert [status for status, _, _ in expected].count(200) >= 6
    assert {status for status, _, _ in expected} >= {200, 400, 404, 405}
    for (method, path), one, other in zip(REQUESTS, got, expected, strict=True):
        assert one == other, (method, path)
    # The lookups that were answered never reached the router; every other request did.
    answered = {
        p.split("?")[0] for (m, p), (s, _, _) in zip(REQUESTS, got, strict=True) if s < 400 and m == "GET"
    }
    assert {"/store/cdx", "/store/index", "/store/resource"} <= answered
    reached = set(router.paths)
    assert not {"/store/cdx", "/store/index", "/store/resource"} - answered
    assert {"/nowhere/cdx", "/store/cdx/more", "/store/20240105id_/https://example.com/page"} <= reached
    errors = [
        p.split("?")[0] for (m, p), (s, _, _) in zip(REQUESTS, got, strict=True) if s >= 400 and m == "GET"
    ]
    assert set(errors) <= reached  # an error is said by the whole stack
    assert router.paths.count("/store/cdx") == sum(
        1
        for (m, p), (s, _, _) in zip(REQUESTS, got, strict=True)
        if p.startswith("/store/cdx?") and (s >= 400 or m != "GET")
    )


@pytest.mark.parametrize(("root_path", "prefix"), [("/archive", "/archive"), ("/store", "")])
def test_an_app_mounted_under_a_prefix_answers_the_same(index: WebIndex, root_path: str, prefix: str) -> None:
    # Mounted at /store, "/store/cdx" is the app's "/cdx": no lookup of the collection "store".
    short, whole = create_app(index), create_app(index)
    whole.user_middleware = []
    router = short.router = _Router(short.router)  # type: ignore[assignment]
    got, expected = _answers(short, root_path, prefix), _answers(whole, root_path, prefix)
    assert got == expected
    assert len(router.paths) == len(REQUESTS)  # the router took the prefix off
    assert {status for status, _, _ in got} >= ({200} if prefix else {404})
