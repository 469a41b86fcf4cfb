"""A small local web site: the demo's target and the tests' and benchmark's server.

:class:`LocalServer` serves a table of routes from a thread on 127.0.0.1
(optionally over TLS); :func:`sample_routes` is the bundled site, with pages
that exercise each path through the fetchers: static pages, a redirect, a
JavaScript-only page, a bot-protection challenge, a slow page, a page
robots.txt forbids, and a missing page.

Run ``python -m web_index.cli._sample_site`` to serve it in the foreground.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

__all__ = [
    "Handler",
    "LocalServer",
    "bench_page",
    "crawl_site_routes",
    "reply",
    "reset_connection",
    "sample_routes",
    "sample_urls",
]

Handler = Callable[[BaseHTTPRequestHandler], None]


def reply(
    request: BaseHTTPRequestHandler,
    status: int = 200,
    body: bytes | str = b"",
    headers: Mapping[str, str] | Iterable[tuple[str, str]] = (),
    *,
    content_type: str | None = "text/html; charset=utf-8",
) -> None:
    """Send a complete response (no body on HEAD) with a Content-Length."""
    data = body.encode() if isinstance(body, str) else body
    request.send_response(status)
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    names = {name.lower() for name, _ in pairs}
    if content_type is not None and "content-type" not in names:
        request.send_header("Content-Type", content_type)
    for name, value in pairs:
        request.send_header(name, value)
    if "content-length" not in names:
        request.send_header("Content-Length", str(len(data)))
    request.end_headers()
    if request.command != "HEAD":
        request.wfile.write(data)


def reset_connection(request: BaseHTTPRequestHandler) -> None:
    """Drop the connection with a TCP reset (SO_LINGER 0), mid-request."""
    sock: socket.socket = request.connection
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    request.close_connection = True
    sock.close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "web-index-sample/1"
    routes: ClassVar[dict[str, Handler]] = {}  # replaced per server by a subclass

    def log_message(self, format: str, *args: Any) -> None:
        return  # tests and demo want quiet output

    def handle(self) -> None:
        # Routes that reset or time out leave a dead socket behind: not an error here.
        with contextlib.suppress(OSError, ValueError):
            super().handle()

    def _route(self) -> None:
        path = self.path.split("?", 1)[0]
        handler = self.routes.get(path)
        if handler is None:
            prefixes = [p for p in self.routes if p.endswith("*") and path.startswith(p[:-1])]
            if prefixes:
                handler = self.routes[max(prefixes, key=len)]
        if handler is None:
            reply(self, 404, _page("Not found", f"<p>Nothing lives at {html.escape(path)}.</p>"))
            return
        handler(self)

    do_GET = _route  # noqa: N815 - the name http.server dispatches to
    do_HEAD = _route  # noqa: N815


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[_Handler], tls: ssl.SSLContext | None):
        self._tls = tls
        super().__init__(address, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        # Headers and body go out in two writes: without NODELAY, Nagle and
        # delayed ACKs add 40 ms to every response.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            # Handshake in the handler thread, so a client that never finishes it
            # cannot stall the accept loop.
            sock = self._tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, addr

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            try:
                request.do_handshake()
            except (OSError, ssl.SSLError):
                return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        return


class LocalServer:
    """Serve ``routes`` on ``host`` from a background thread.

    ``routes`` maps a path to a handler; a key ending in ``*`` matches every
    path with that prefix. Use as a context manager, or ``start``/``stop``.
    """

    def __init__(
        self,
        routes: Mapping[str, Handler],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        handler = type("RoutedHandler", (_Handler,), {"routes": dict(routes)})
        self._server = _Server((host, port), handler, tls)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self.host = host
        self.port = int(self._server.server_address[1])
        self.scheme = "https" if tls is not None else "http"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"

    def url(self, path: str = "/") -> str:
        return self.base_url + path

    def start(self) -> LocalServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LocalServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _page(title: str, body: str) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{html.escape(title)}</title></head><body><h1>{html.escape(title)}</h1>"
        f"{body}</body></html>"
    )


_LOREM = (
    "The web index keeps every page a crawler fetches, successful or not, together with "
    "the whole chain of responses that led to it, so that later questions about the web "
    "can be answered from the store instead of from the network. "
)


def bench_page(n: int, size: int = 10_000) -> bytes:
    """A deterministic HTML page of about ``size`` bytes."""
    paragraphs: list[str] = []
    while sum(len(p) for p in paragraphs) < size:
        paragraphs.append(f"<p>Page {n}, paragraph {len(paragraphs)}. {_LOREM}</p>")
    return _page(f"Page {n}", "".join(paragraphs)).encode()


_JS_APP = """<!doctype html><html><head><meta charset=utf-8><title>App</title></head>
<body><div id="root"></div>
<noscript>You need to enable JavaScript to run this app.</noscript>
<script>
  const root = document.getElementById("root");
  const text = "This page exists only once JavaScript has run. ".repeat(12);
  root.innerHTML = "<h1>Rendered by JavaScript</h1><p>" + text + "</p>";
</script></body></html>"""

_CHALLENGE = """<!doctype html><html><head><title>Just a moment...</title></head>
<body><div id="cf-wrapper"><h1>Checking your browser before accessing the site.</h1>
<script src="/cdn-cgi/challenge-platform/h/b/orchestrate/chl_page/v1"></script>
</div></body></html>"""


def sample_routes(*, slow_seconds: float = 3.0) -> dict[str, Handler]:
    """The bundled sample site's routes."""

    def index(r: BaseHTTPRequestHandler) -> None:
        links = "".join(
            f'<li><a href="{p}">{p}</a></li>'
            for p in ("/about", "/old-about", "/app", "/protected", "/slow", "/private")
        )
        reply(r, 200, _page("Sample site", f"<p>{_LOREM * 2}</p><ul>{links}</ul>"))

    def about(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, _page("About", f"<p>{_LOREM * 3}</p>"))

    def old_about(r: BaseHTTPRequestHandler) -> None:
        reply(r, 301, _page("Moved", '<a href="/about">here</a>'), {"Location": "/about"})

    def app(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, _JS_APP)

    def protected(r: BaseHTTPRequestHandler) -> None:
        reply(r, 403, _CHALLENGE, {"cf-mitigated": "challenge", "Server": "cloudflare"})

    def slow(r: BaseHTTPRequestHandler) -> None:
        time.sleep(slow_seconds)
        reply(r, 200, _page("Slow", f"<p>{_LOREM}</p>"))

    def private(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, _page("Private", "<p>robots.txt asks crawlers to stay out.</p>"))

    def robots(r: BaseHTTPRequestHandler) -> None:
        body = "User-agent: *\nDisallow: /private\n"
        reply(r, 200, body, content_type="text/plain; charset=utf-8")

    def bench(r: BaseHTTPRequestHandler) -> None:
        tail = r.path.rsplit("/", 1)[-1]
        reply(r, 200, bench_page(int(tail) if tail.isascii() and tail.isdigit() else 0))

    return {
        "/": index,
        "/about": about,
        "/old-about": old_about,
        "/app": app,
        "/protected": protected,
        "/slow": slow,
        "/private": private,
        "/robots.txt": robots,
        "/page/*": bench,
    }


def crawl_site_routes(
    pages: int, *, links: int = 5, seed: int = 0, hits: dict[str, int] | None = None
) -> dict[str, Handler]:
    """A generated site of ``pages`` pages for crawl tests and benchmarks.

    Page ``/p/<i>`` links to ``links`` others (page ``i + 1`` among them, so every
    page is reachable from ``/p/0``), to ``/private/<i>`` (which robots.txt
    disallows) and to another host; its body holds the word ``token<i>x``, in
    no other page. ``hits`` counts the requests each path received.
    """
    import random

    lock = threading.Lock()

    def count(r: BaseHTTPRequestHandler) -> None:
        if hits is not None:
            with lock:
                path = r.path.split("?", 1)[0]
                hits[path] = hits.get(path, 0) + 1

    def page(r: BaseHTTPRequestHandler) -> None:
        count(r)
        tail = r.path.split("?", 1)[0].rsplit("/", 1)[-1]
        if not (tail.isascii() and tail.isdigit()) or int(tail) >= pages:
            reply(r, 404, _page("Not found", "<p>No such page.</p>"))
            return
        i = int(tail)
        rng = random.Random(seed * 1_000_003 + i)
        targets = {(i + 1) % pages, *(rng.randrange(pages) for _ in range(links - 1))}
        anchors = "".join(f'<a href="/p/{t}">page {t}</a> ' for t in sorted(targets))
        words = " ".join(rng.choice(_WORDS) for _ in range(60))
        body = (
            f"<main><p>token{i}x {words}</p><p>{anchors}</p>"
            f'<p><a href="/private/{i}">private</a> <a href="http://elsewhere.invalid/{i}">away</a></p></main>'
        )
        reply(r, 200, _page(f"Page {i} {rng.choice(_WORDS)}", body))

    def private(r: BaseHTTPRequestHandler) -> None:
        count(r)
        reply(r, 200, _page("Private", "<p>robots.txt asks crawlers to stay out.</p>"))

    def robots(r: BaseHTTPRequestHandler) -> None:
        count(r)
        reply(r, 200, "User-agent: *\nDisallow: /private/\n", content_type="text/plain; charset=utf-8")

    return {"/p/*": page, "/private/*": private, "/robots.txt": robots}


_WORDS = [
    "archive",
    "crawler",
    "index",
    "parquet",
    "query",
    "latest",
    "nearest",
    "window",
    "calibre",
    "fetcher",
    "browser",
    "redirect",
    "status",
    "header",
    "body",
    "digest",
    "record",
    "capture",
    "replay",
    "memento",
    "timestamp",
    "domain",
    "partition",
    "month",
    "buffer",
    "flush",
    "compact",
    "search",
    "packer",
    "timer",
    "orchestrator",
    "searcher",
    "queue",
    "lease",
]


def sample_urls(base_url: str) -> list[str]:
    """The URLs the demo fetches (``/missing`` is a 404: a successful fetch)."""
    paths = ("/", "/about", "/old-about", "/app", "/protected", "/slow", "/private", "/missing")
    return [base_url + p for p in paths]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the web-index sample site.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--slow-seconds", type=float, default=3.0)
    args = parser.parse_args(argv)
    server = LocalServer(sample_routes(slow_seconds=args.slow_seconds), port=args.port)
    print(f"serving {server.base_url}/", flush=True)
    server.start()
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)
    server.stop()


if __name__ == "__main__":
    main()
