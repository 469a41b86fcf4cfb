# ruff: noqa: E501 - literal HTML of real challenge pages reads best unwrapped
"""Local servers, a shared browser and helpers for the fetch tests.

Every server listens on 127.0.0.1 and is started here; nothing reaches the
network. The fetchers are configured to allow loopback, as the address policy
requires for tests.
"""

from __future__ import annotations

import asyncio
import gzip
import os
import threading
import time
import zlib
from collections import Counter
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler
from typing import Any, TypeVar

import pytest
import trustme

from web_index.cli._sample_site import Handler, LocalServer, reply, reset_connection
from web_index.fetch import (
    AddressPolicy,
    BrowserFetcher,
    FetchLimits,
    HttpFetcher,
    chromium_available,
)

T = TypeVar("T")

LOCAL = AddressPolicy(allow_loopback=True)
# Short limits keep the time-out tests quick; the body limits are small so
# that "huge" and "bomb" stay cheap to serve.
LIMITS = FetchLimits(
    timeout=1.5,
    connect_timeout=1.0,
    read_timeout=1.0,
    max_body_bytes=1_000_000,
    max_decoded_bytes=2_000_000,
    max_redirects=5,
)
RICH_TEXT = "<p>" + "A healthy page with plenty of readable text for the classifier. " * 8 + "</p>"


def page(title: str, body: str = RICH_TEXT) -> str:
    return (
        f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>"
    )


JS_ONLY = """<!doctype html><html><head><title>app</title></head><body>
<div id="root"></div><noscript>Please enable JavaScript to continue.</noscript>
<script>document.getElementById("root").innerHTML =
  "<h1>Rendered</h1><p>" + "Content that only exists after scripts ran. ".repeat(10) + "</p>";</script>
</body></html>"""

CF_CHALLENGE = """<!doctype html><html><head><title>Just a moment...</title></head><body>
<div id="cf-wrapper"><noscript>Enable JavaScript and cookies to continue</noscript>
<script>window._cf_chl_opt={cvId: "3"};</script>
<script src="/cdn-cgi/challenge-platform/h/g/orchestrate/chl_page/v1"></script></div></body></html>"""

INCAPSULA = """<html><head><META NAME="robots" CONTENT="noindex,nofollow">
<script src="/_Incapsula_Resource?SWJIYLWA=5074a744e2e3d891814e9a2dace20bd4"></script></head>
<body><iframe src="/_Incapsula_Resource?CWUDNSAI=9">Request unsuccessful. Incapsula incident ID: 1</iframe></body></html>"""

CAPTCHA_WALL = """<html><head><title>example.com</title></head><body>
<p>Please enable JS and disable any ad blocker</p>
<script>var dd={'cid':'AHrlqAAAAAMA','hsh':'2211F522','t':'fe','host':'geo.captcha-delivery.com'}</script>
<script src="https://ct.captcha-delivery.com/c.js"></script></body></html>"""


def _bomb(megabytes: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b"\0" * 1_000_000
    return b"".join(packer.compress(chunk) for _ in range(megabytes)) + packer.flush()


class Site:
    """The test server's routes, with counters the tests can read."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        self.bomb = _bomb(40)

    def routes(self) -> dict[str, Handler]:
        def count(r: BaseHTTPRequestHandler) -> int:
            with self.lock:
                self.hits[r.path] += 1
                return self.hits[r.path]

        def ok(r: BaseHTTPRequestHandler) -> None:
            count(r)
            reply(r, 200, page("ok"), {"Set-Cookie": "a=1; Path=/", "X-Multi": "one"})

        def redirect(r: BaseHTTPRequestHandler) -> None:
            n = int(r.path.rsplit("/", 1)[-1])
            target = "/ok" if n <= 1 else f"/redirect/{n - 1}"
            reply(r, 302, "moving", {"Location": target}, content_type="text/plain")

        def loop(r: BaseHTTPRequestHandler) -> None:
            reply(r, 301, "", {"Location": "/loop"})

        def set_cookie(r: BaseHTTPRequestHandler) -> None:
            reply(r, 302, "", {"Location": "/echo-cookie", "Set-Cookie": "session=s3cr3t; Path=/"})

        def echo_cookie(r: BaseHTTPRequestHandler) -> None:
            reply(r, 200, page("cookie", f"<p>cookie={r.headers.get('Cookie')}</p>{RICH_TEXT}"))

        def slow(r: BaseHTTPRequestHandler) -> None:
            time.sleep(3)
            reply(r, 200, page("slow"))

        def drip(r: BaseHTTPRequestHandler) -> None:
            # Each byte arrives before the read timeout, the whole body never does
            # before the attempt's own limit.
            r.send_response(200)
            r.send_header("Content-Type", "text/plain")
            r.send_header("Content-Length", "100")
            r.end_headers()
            for _ in range(100):
                r.wfile.write(b"x")
                r.wfile.flush()
                time.sleep(0.1)

        def flaky(r: BaseHTTPRequestHandler) -> None:
            n = count(r)
            if n % 2 == 1:
                reply(r, 429, "slow down", {"Retry-After": "1"}, content_type="text/plain")
            else:
                reply(r, 200, page("flaky"))

        def always_429(r: BaseHTTPRequestHandler) -> None:
            count(r)
            reply(r, 429, "slow down", {"Retry-After": "1"}, content_type="text/plain")

        def status(code: int, body: str = "", headers: dict[str, str] | None = None) -> Handler:
            def handler(r: BaseHTTPRequestHandler) -> None:
                count(r)
                reply(r, code, body or page(str(code)), headers or {})

            return handler

        def huge(r: BaseHTTPRequestHandler) -> None:
            reply(r, 200, b"x" * 3_000_000, content_type="text/plain")

        def huge_undeclared(r: BaseHTTPRequestHandler) -> None:
            r.send_response(200)
            r.send_header("Content-Type", "text/plain")
            r.send_header("Connection", "close")
            r.end_headers()
            r.close_connection = True
            for _ in range(30):
                r.wfile.write(b"y" * 100_000)

        def bomb(r: BaseHTTPRequestHandler) -> None:
            reply(r, 200, self.bomb, {"Content-Encoding": "gzip"}, content_type="text/html")

        def gzipped(r: BaseHTTPRequestHandler) -> None:
            reply(r, 200, gzip.compress(page("gzipped").encode()), {"Content-Encoding": "gzip"})

        def charset(label: str | None, body: bytes) -> Handler:
            ctype = "text/html" if label is None else f"text/html; charset={label}"

            def handler(r: BaseHTTPRequestHandler) -> None:
                reply(r, 200, body, content_type=ctype)

            return handler

        def robots(r: BaseHTTPRequestHandler) -> None:
            reply(r, 200, "User-agent: *\nDisallow: /private/\n", content_type="text/plain")

        def to(location: str) -> Handler:
            def handler(r: BaseHTTPRequestHandler) -> None:
                reply(r, 302, "", {"Location": location})

            return handler

        def busy(r: BaseHTTPRequestHandler) -> None:
            with self.lock:
                self.in_flight += 1
                self.max_in_flight = max(self.max_in_flight, self.in_flight)
            time.sleep(0.15)
            with self.lock:
                self.in_flight -= 1
            reply(r, 200, page("busy"))

        latin1 = "<html><body><p>Café crème brûlée, " + "déjà vu " * 40 + "</p></body></html>"
        return {
            "/ok": ok,
            "/redirect/*": redirect,
            "/loop": loop,
            "/set-cookie": set_cookie,
            "/echo-cookie": echo_cookie,
            "/slow": slow,
            "/drip": drip,
            "/reset": reset_connection,
            "/flaky": flaky,
            "/always-429": always_429,
            "/js-only": status(200, JS_ONLY),
            "/challenge/cloudflare": status(
                403, CF_CHALLENGE, {"cf-mitigated": "challenge", "Server": "cloudflare"}
            ),
            "/challenge/cloudflare-503": status(503, CF_CHALLENGE, {"Server": "cloudflare"}),
            "/challenge/incapsula": status(403, INCAPSULA, {"X-CDN": "Incapsula"}),
            "/challenge/captcha-wall": status(200, CAPTCHA_WALL),
            "/forbidden": status(403, page("Forbidden")),
            "/auth": status(401, page("Log in"), {"WWW-Authenticate": 'Basic realm="x"'}),
            "/proxy-auth": status(407, page("Proxy")),
            "/server-error": status(500),
            "/unavailable": status(503),
            "/not-implemented": status(501),
            "/gone": status(410),
            "/huge": huge,
            "/huge-undeclared": huge_undeclared,
            "/bomb": bomb,
            "/gzipped": gzipped,
            "/charset/unknown-label": charset("x-no-such-charset", latin1.encode("latin-1")),
            "/charset/invalid-utf8": charset("utf-8", b"<p>\xff\xfe broken \xc3(</p>" + RICH_TEXT.encode()),
            "/charset/meta-latin1": charset(None, b'<meta charset="iso-8859-1">' + latin1.encode("latin-1")),
            "/robots.txt": robots,
            "/private/page": status(200),
            "/to-metadata": to("http://169.254.169.254/latest/meta-data/"),
            "/to-private": to("http://10.255.255.1/"),
            "/to-ftp": to("ftp://127.0.0.1/file"),
            "/busy/*": busy,
        }


@pytest.fixture(scope="session")
def site() -> Iterator[tuple[LocalServer, Site]]:
    state = Site()
    with LocalServer(state.routes()) as server:
        yield server, state


@pytest.fixture(scope="session")
def server(site: tuple[LocalServer, Site]) -> LocalServer:
    return site[0]


@pytest.fixture(scope="session")
def site_state(site: tuple[LocalServer, Site]) -> Site:
    return site[1]


@pytest.fixture(scope="session")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="session")
def tls_server(ca: trustme.CA) -> Iterator[LocalServer]:
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    routes: dict[str, Handler] = {"/": lambda r: reply(r, 200, page("tls"))}
    with LocalServer(routes, tls=context) as srv:
        yield srv


def http_fetcher(**kwargs: Any) -> HttpFetcher:
    kwargs.setdefault("address_policy", LOCAL)
    kwargs.setdefault("limits", LIMITS)
    return HttpFetcher(**kwargs)


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


class LoopThread:
    """An event loop in a thread, so that one browser can serve many tests."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 90) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = os.environ.get("WEB_INDEX_CHROMIUM", "/usr/bin/chromium")
    if not chromium_available(path):
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but no Chromium at {path}: .ci/run must install it")
        pytest.skip(f"no Chromium at {path}")
    return path


@pytest.fixture(scope="session")
def chromium_or_none() -> str | None:
    """Chromium's path if installed (required under CI=true), else None."""
    path = os.environ.get("WEB_INDEX_CHROMIUM", "/usr/bin/chromium")
    if chromium_available(path):
        return path
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but no Chromium at {path}: .ci/run must install it")
    return None


@pytest.fixture(scope="session")
def browser_loop() -> Iterator[LoopThread]:
    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture(scope="session")
def browser(chromium_path: str, browser_loop: LoopThread) -> Iterator[BrowserFetcher]:
    fetcher = BrowserFetcher(
        executable_path=chromium_path, address_policy=LOCAL, limits=LIMITS, settle_timeout=0.3
    )
    yield fetcher
    browser_loop.run(fetcher.aclose())


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
