"""ReplayWeb.page replays an exported WACZ, offline, in Debian's Chromium.

ReplayWeb.page (AGPL, not part of web-index) is the tarball the npm registry serves
for ``replaywebpage`` 2.4.6, fetched once into a cache outside the repository and
checked against its published SHA-512; only its prebuilt ``ui.js`` and ``sw.js``
are served, from 127.0.0.1, with the package, by Starlette (which answers the
range requests a WACZ is read by). Every request the browser makes that does not
go to that server is refused and counted: none may be made.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import shutil
import tarfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import FileResponse, HTMLResponse
from starlette.routing import Route

from tests.factories import T0, metadata
from tests.servers import free_port, missing, wait_port
from web_index import WebIndex
from web_index.archive import export_wacz
from web_index.models import Response

CHROMIUM = "/usr/bin/chromium"
VERSION = "2.4.6"
TARBALL = f"https://registry.npmjs.org/replaywebpage/-/replaywebpage-{VERSION}.tgz"
# dist.integrity of replaywebpage@2.4.6 on registry.npmjs.org
INTEGRITY = "sha512-uG50jESRld0p+fY7+nUxIWl7hvfimreNjSmaNkc/a9a8gBdmb7PH4J42Iib+vgk9KrHd0HLScVT++LgqV5fwpQ=="
SITE = "https://garden.example/"
TITLE = "The Night Garden"
WORD = "moonflowers"
CSS = "h1 { color: rgb(12, 34, 56); }"
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "ui"


def _replaywebpage(cache: Path) -> bytes:
    """The tarball, from the cache or the registry, checked against its integrity."""
    kept = cache / f"replaywebpage-{VERSION}.tgz"
    data = kept.read_bytes() if kept.exists() else b""
    want = base64.b64decode(INTEGRITY.removeprefix("sha512-"))
    if hashlib.sha512(data).digest() != want:
        try:
            data = httpx.get(TARBALL, timeout=60, follow_redirects=True).raise_for_status().content
        except httpx.HTTPError as exc:
            missing(f"replaywebpage {VERSION} from registry.npmjs.org ({exc})")
        if hashlib.sha512(data).digest() != want:
            pytest.fail(f"{TARBALL}: its SHA-512 is not the registry's published integrity")
        cache.mkdir(parents=True, exist_ok=True)
        partial = kept.with_suffix(f".{os.getpid()}.partial")
        partial.write_bytes(data)
        partial.replace(kept)
    return data


@pytest.fixture(scope="module")
def player(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with ReplayWeb.page's ``ui.js`` and ``sw.js``."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "web-index-tests"
    data = _replaywebpage(cache)
    folder = tmp_path_factory.mktemp("replay")
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for name in ("ui.js", "sw.js"):
            member = tar.extractfile(f"package/{name}")
            assert member is not None, name
            (folder / name).write_bytes(member.read())
    return folder


def _page(url: str, when: Any, body: bytes, mime: str) -> tuple[str, str, Any, Any, list[Response]]:
    response = Response(
        url=url,
        request_url=url,
        status_code=200,
        headers={"content-type": mime},
        timestamp=when,
        data=body,
        is_final=True,
        fetcher_name="test",
        fetcher_version="1.0",
        fetcher_calibre=10,
    )
    return ("get", url, when, metadata(url), [response])


@dataclass
class Served:
    base: str
    kind: str
    refused: list[str]


@pytest.fixture(scope="module", params=["plain index", "ZipNum index"])
def served(
    request: pytest.FixtureRequest, player: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    """The package of a page and its stylesheet; with a ZipNum index, 1,100 more captures
    beside them (past the plain index's 1,024 lines), so that its blocks are what is read."""
    zipnum = request.param == "ZipNum index"
    folder = tmp_path_factory.mktemp("wacz")
    html = (
        f"<html><head><title>{TITLE}</title><link rel='stylesheet' href='/style.css'></head>"
        f"<body><h1>{TITLE}</h1><p>Night-scented {WORD} open at dusk.</p></body></html>"
    ).encode()
    with WebIndex(folder / "store") as index:
        index.insert(*_page(SITE, T0, html, "text/html; charset=utf-8"))
        index.insert(*_page(f"{SITE}style.css", T0 + timedelta(seconds=1), CSS.encode(), "text/css"))
        if zipnum:
            beds = [f"{SITE}bed/{n}" for n in range(1_100)]
            index.insert_many(
                [
                    _page(u, T0 + timedelta(seconds=2 + n), u.encode(), "text/plain")
                    for n, u in enumerate(beds)
                ]
            )
        index.flush()
        package = folder / "garden.wacz"
        report = export_wacz(index, package, title="A garden")
        assert report.zipnum == zipnum

    async def test_page(request: Any) -> HTMLResponse:
        ts = T0.strftime("%Y%m%d%H%M%S")
        return HTMLResponse(
            "<!doctype html><html lang='en'><head><title>replay</title>"
            "<script src='/replay/ui.js'></script></head><body style='margin:0;height:100vh'>"
            f"<replay-web-page source='/garden.wacz' url='{SITE}' ts='{ts}' replayBase='/replay/'"
            " embed='replayonly'></replay-web-page></body></html>"
        )

    def script(name: str) -> Any:
        async def endpoint(request: Any) -> FileResponse:
            return FileResponse(player / name, media_type="application/javascript")

        return endpoint

    async def wacz(request: Any) -> FileResponse:
        return FileResponse(package, media_type="application/wacz")

    app = Starlette(
        routes=[
            Route("/index.html", test_page),
            Route("/replay/ui.js", script("ui.js")),
            Route("/replay/sw.js", script("sw.js")),
            Route("/garden.wacz", wacz, methods=["GET", "HEAD"]),
        ]
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_port(port)
        yield Served(f"http://127.0.0.1:{port}", request.param, [])
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_replaywebpage_replays_an_exported_page_with_its_stylesheet(served: Served) -> None:
    if shutil.which(CHROMIUM) is None:
        missing("chromium (Debian package chromium)")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
        )
        try:
            context = browser.new_context(viewport={"width": 1000, "height": 700})

            def only_here(route: Any) -> None:
                if route.request.url.startswith(served.base + "/"):
                    route.continue_()
                else:
                    served.refused.append(route.request.url)
                    route.abort()

            context.route("**/*", only_here)
            page = context.new_page()
            page.goto(served.base + "/index.html")
            replayed = page.frame_locator("replay-web-page iframe").frame_locator("iframe")
            heading = replayed.locator("h1")
            try:
                heading.wait_for(timeout=45_000)
            except PlaywrightTimeout:
                # The first load in a fresh browser sometimes never renders (its service
                # worker takes the page over midway): ReplayWeb.page's own advice is a reload.
                page.reload()
                heading.wait_for(timeout=45_000)
            assert heading.inner_text() == TITLE
            assert WORD in replayed.locator("body").inner_text()
            # The stylesheet came from the package: the heading has its colour.
            color = heading.evaluate("e => getComputedStyle(e).color")
            assert color == "rgb(12, 34, 56)"
            if "ZipNum" not in served.kind:
                page.screenshot(path=str(SHOTS / "wacz-replay.png"))
        finally:
            browser.close()
    assert served.refused == []
