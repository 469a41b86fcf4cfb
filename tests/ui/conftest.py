"""A store filled through the command line, the UI serving it, a live loopback
site that archived pages must never reach, and Debian's Chromium driven by
Playwright (a failure under ``CI=true`` when it is missing, else a skip)."""

from __future__ import annotations

import base64
import json
import shutil
import struct
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from tests.server.serving import serving
from tests.servers import missing
from web_index import WebIndex
from web_index.cli import app
from web_index.cli._sample_site import LocalServer, reply

CHROMIUM = "/usr/bin/chromium"
SITE = "http://site.test"
HOSTILE_TEXT = '<script>alert(1)</script> "><img src=x onerror=alert(2)> {{7*7}}'
MANY = 250  # attempts at one URL: three pages of the attempts table
ESCALATED = "http://escalated.test/"
REFUSED = "http://refused.test/"
# Each failure's logs, as the fetchers write them: the verdict last.
WHY = {
    "timeout": "timeout: Page.goto: Timeout 1500ms exceeded.",
    "blocked": f"403 {SITE}/\n1 response(s); bot protection (cf-mitigated: challenge) {HOSTILE_TEXT}",
    "low-quality": "1 response(s); low quality: 2 words of text",
    "error": "not fetched: address policy refuses 127.0.0.1 (loopback)",
}
TRACEBACK = 'Traceback (most recent call last):\n  File "fetch.py", line 1\nRuntimeError: challenged'
GARDEN_CSS = "body { background-color: rgb(4, 5, 6); color: rgb(240, 240, 240); }"


def png(width: int = 4, height: int = 3) -> bytes:
    """A small valid PNG, made here (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xcc\x22\x22" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


def hop(
    url: str, ts: datetime, status: int, headers: dict[str, str], body: bytes, final: bool, fetched: str = ""
) -> dict[str, Any]:
    """One response of an attempt at ``url``, fetched from ``fetched`` (a redirect's target) or ``url``."""
    return {
        "url": url,
        "request_url": fetched or url,
        "status_code": status,
        "headers": json.dumps(headers),
        "timestamp": ts.isoformat(),
        "data": base64.b64encode(body).decode(),
        "is_final": final,
        "fetcher_name": "test-fetcher",
        "fetcher_version": "1.0",
        "fetcher_calibre": 10,
    }


def request(
    url: str, ts: datetime, state: str, hops: list[dict[str, Any]], calibre: int = 10, **more: Any
) -> dict[str, Any]:
    return {
        "type": "get",
        "url": url,
        "timestamp": ts.isoformat(),
        "metadata": {
            "state": state,
            "url": url,
            "fetcher_name": "test-fetcher" if calibre == 10 else "test-browser",
            "fetcher_version": "1.0",
            "fetcher_calibre": calibre,
            **more,
        },
        "data": hops,
    }


def page(url: str, ts: datetime, body: str, *, content_type: str = "text/html; charset=utf-8",
         headers: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    fields = {"content-type": content_type, **(headers or {})}
    return request(url, ts, "success", [hop(url, ts, 200, fields, body.encode(), True)])


@dataclass
class Archive:
    """What the store holds, and the live site nothing may reach."""

    store: Path
    live: LocalServer
    live_hits: list[str] = field(default_factory=list)
    home_captures: list[datetime] = field(default_factory=list)
    failures: list[tuple[datetime, str]] = field(default_factory=list)
    crawled: str = ""  # the site crawled into the store, with a search database


def _crawl_routes() -> dict[str, Any]:
    """A small site to crawl: pages about gardens, one whose text is hostile."""

    def page_of(title: str, text: str, *links: str) -> Any:
        anchors = "".join(f'<a href="{link}">{link}</a> ' for link in links)
        head = f"<html><head><title>{title}</title></head>"
        body = f"{head}<body><main><p>{text}</p>{anchors}</main></body></html>"
        return lambda r: reply(r, 200, body)

    words = "Tomatoes and beans grow in the garden all summer long, watered every evening. " * 3
    styled = (
        '<html><head><title>Garden home</title><link rel="stylesheet" href="/garden.css"></head>'
        f'<body><main><h1>Garden home</h1><img id="pic" src="/pic.png" alt="a picture"><p>{words}</p>'
        '<a href="/a">/a</a> <a href="/b">/b</a></main></body></html>'
    )
    return {
        "/robots.txt": lambda r: reply(r, 200, "User-agent: *\nDisallow:\n", content_type="text/plain"),
        "/": lambda r: reply(r, 200, styled),
        "/garden.css": lambda r: reply(r, 200, GARDEN_CSS, content_type="text/css"),
        "/pic.png": lambda r: reply(r, 200, png(), content_type="image/png"),
        "/a": page_of("Garden tools", "A spade and a rake for the garden. " + words),
        "/b": page_of("Hostile", f"The garden of {HOSTILE_TEXT.replace('<', '&lt;')} " + words),
    }


def _requests(live: str) -> tuple[list[dict[str, Any]], list[datetime], list[tuple[datetime, str]]]:
    t0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    home_html = (
        '<html><head><title>Home of the site</title><link rel="stylesheet" href="/style.css"></head>'
        '<body><h1 id="h">Hello from the archive</h1><img id="logo" src="img.png" alt="logo">'
        '<p>Words about gardens and <a href="/about">about us</a>.</p></body></html>'
    )
    captures = [t0, t0 + timedelta(days=4), t0 + timedelta(days=315)]
    failures = [(t0 + timedelta(days=1), "timeout"), (t0 + timedelta(days=92), "blocked")]
    out = [page(f"{SITE}/", ts, home_html.replace("Hello", f"Hello {i}")) for i, ts in enumerate(captures)]
    out += [
        request(f"{SITE}/", ts, state, [], calibre=20, logs=WHY[state], traceback=TRACEBACK if i else None)
        for i, (ts, state) in enumerate(failures)
    ]
    # One fetch escalated: the HTTP fetcher's page had too little text, the browser's did not.
    out.append(request(ESCALATED, t0, "low-quality", [], logs=WHY["low-quality"], run_time=0.5))
    out.append(page(ESCALATED, t0 + timedelta(seconds=2), "<p>Rendered</p>"))
    for part in (out[-1]["metadata"], *out[-1]["data"]):
        part |= {"fetcher_name": "test-browser", "fetcher_calibre": 20}
    out.append(request(REFUSED, t0 + timedelta(days=3), "error", [], logs=WHY["error"]))  # never captured
    css = (
        "body { background-color: rgb(1, 2, 3); color: rgb(250, 250, 250); } h1 { background: url(img.png); }"
    )
    out.append(page(f"{SITE}/style.css", t0, css, content_type="text/css"))
    image = request(f"{SITE}/img.png", t0, "success", [])
    image["data"] = [hop(f"{SITE}/img.png", t0, 200, {"content-type": "image/png"}, png(), True)]
    out.append(image)
    about = "<html><head><title>About</title></head><body><p>About the garden site.</p></body></html>"
    moved = request(f"{SITE}/old", t0, "success", [
        hop(f"{SITE}/old", t0, 301, {"location": f"{SITE}/about"}, b"", False),
        hop(f"{SITE}/old", t0 + timedelta(seconds=1), 200, {"content-type": "text/html"},
            about.encode(), True, f"{SITE}/about"),
    ])  # fmt: skip
    out.append(moved)
    out.append(page(f"{SITE}/about", t0 + timedelta(days=2), about))
    for i in range(MANY):
        ts = t0 + timedelta(hours=i)
        if i % 5 == 0:
            out.append(request(f"{SITE}/many", ts, "error", [], logs=WHY["error"]))
        else:
            out.append(page(f"{SITE}/many", ts, f"<html><body><p>version {i}</p></body></html>"))
    hostile = (
        f"<html><head><title>{HOSTILE_TEXT}</title>"
        f'<link rel="stylesheet" href="{live}/style.css"><script src="{live}/script.js"></script>'
        f'<meta http-equiv="refresh" content="5; url={live}/refresh"></head><body>'
        f'<img src="{live}/image.png" alt="live"><iframe src="{live}/frame" title="f"></iframe>'
        f"<p>Hostile page.</p><script>"
        f"try {{ parent.document.body.innerHTML = 'pwned'; }} catch (e) {{}}"
        f"try {{ top.document.title = 'pwned'; }} catch (e) {{}}"
        f"try {{ document.cookie = 'stolen=1; path=/'; }} catch (e) {{}}"
        f"try {{ fetch('{live}/fetch'); }} catch (e) {{}}"
        f"try {{ top.location = '{live}/top'; }} catch (e) {{}}"
        f"</script></body></html>"
    )
    out.append(page(f"{SITE}/hostile", t0, hostile, headers={"x-note": HOSTILE_TEXT}))
    out += [page(f"{SITE}/blog/post-{i}", t0 + timedelta(days=i), f"<p>Post {i}</p>") for i in range(3)]
    out.append(page("http://other.site.test/", t0, "<p>Another host</p>"))
    return out, captures, failures


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    folder = tmp_path_factory.mktemp("ui")
    hits: list[str] = []
    lock = threading.Lock()

    def anything(r: Any) -> None:
        with lock:
            hits.append(r.path)
        reply(r, 200, "live", content_type="text/plain")

    with LocalServer({"/*": anything}) as live:
        requests, captures, failures = _requests(live.url("").rstrip("/"))
        lines = folder / "attempts.jsonl"
        lines.write_text("".join(json.dumps(r) + "\n" for r in requests))
        store = folder / "store"
        runner = CliRunner()
        with LocalServer(_crawl_routes()) as crawled:
            crawl = [
                "crawl",
                crawled.url("/"),
                "--allow-loopback",
                "--settle",
                "0.3",
                "--timeout",
                "60",
                "-p",
            ]
            for args in (["init"], ["insert", str(lines)], crawl, ["compact"]):
                done = runner.invoke(app, [*args, "--store", str(store)])
                assert done.exit_code == 0, done.output
        yield Archive(store, live, hits, captures, failures, f"127.0.0.1:{crawled.port}")


@pytest.fixture(scope="module")
def ui(archive: Archive) -> Iterator[httpx.Client]:
    with WebIndex(archive.store, read_only=True) as index, serving(index, ui=True) as client:
        yield client


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium, launched through Playwright (a skip, or in CI a failure, without it)."""
    if shutil.which(CHROMIUM) is None:
        missing("chromium (Debian package chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def browser(ui: httpx.Client) -> Iterator[Any]:
    # After the store is filled: Playwright's sync API runs an event loop in this
    # thread, and the CLI (a crawl) runs its own with asyncio.run.
    with chromium() as launched:
        yield launched


@pytest.fixture
def tab(browser: Any, ui: httpx.Client) -> Iterator[Any]:
    """A page at a desktop's width, its dialogs kept (none may open)."""
    context = browser.new_context(base_url=str(ui.base_url), viewport={"width": 1200, "height": 900})
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.dialogs = dialogs
    yield page
    context.close()


def accessible(page: Any) -> None:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    serious = [v for v in results.response["violations"] if v["impact"] in ("serious", "critical")]
    assert serious == [], [(v["id"], v["help"], [n["html"] for n in v["nodes"]][:3]) for v in serious]
