"""What the save tests share: a loopback site never fetched before (a page with a
stylesheet and an image, a slow page, a page robots.txt forbids), the server
over a fresh writable store with a write token, and the save form's fields as a
page gives them."""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.server.serving import serving
from tests.ui.conftest import png
from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, reply
from web_index.fetch import AddressPolicy, EscalationPolicy, FetchConfig, FetchLimits
from web_index.models import Calibre

TOKEN = "a-write-token-Ø-9f2c"  # not ASCII: compared as bytes
STYLE = "body { background-color: rgb(4, 5, 6); color: rgb(240, 240, 240); }"
WORDS = "Sweet peas climb the fence by the shed and flower all through June. " * 4
SLOW_SECONDS = 1.0  # an attempt's time limit here; the slow page takes longer


def page_html(title: str) -> str:
    return (
        f'<html><head><title>{title}</title><link rel="stylesheet" href="/style.css"></head>'
        f'<body><h1 id="h">{title}</h1><img id="pic" src="/pic.png" alt="a picture">'
        f"<p>{WORDS}</p></body></html>"
    )


@dataclass
class Site:
    """The live site, and every path it was asked for."""

    server: LocalServer
    hits: list[str] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return self.server.url(path)

    def fetched(self) -> list[str]:
        """The paths asked for, robots.txt aside."""
        return [p for p in self.hits if p != "/robots.txt"]


@contextmanager
def live_site() -> Iterator[Site]:
    hits: list[str] = []
    release = threading.Event()
    lock = threading.Lock()

    def noted(handler: Any) -> Any:
        def serve(r: Any) -> None:
            with lock:
                hits.append(r.path)
            handler(r)

        return serve

    def slow(r: Any) -> None:
        release.wait(SLOW_SECONDS * 4)
        reply(r, 200, page_html("Slow"))

    def evil(r: Any) -> None:
        # Another site's page with a form that posts a save to the server named in ?to=.
        target = html.escape(parse_qs(urlsplit(r.path).query)["to"][0])
        garden = html.escape(f"http://{r.headers['Host']}/garden")
        form = f'<form method="post" action="{target}"><input type="hidden" name="url" value="{garden}">'
        reply(r, 200, f"<html><body>{form}<button>Win a prize</button></form></body></html>")

    routes = {
        "/robots.txt": lambda r: reply(
            r, 200, "User-agent: *\nDisallow: /private\n", content_type="text/plain"
        ),
        "/garden": lambda r: reply(r, 200, page_html("Garden")),
        "/style.css": lambda r: reply(r, 200, STYLE, content_type="text/css"),
        "/pic.png": lambda r: reply(r, 200, png(), content_type="image/png"),
        "/slow": slow,
        "/private": lambda r: reply(r, 200, page_html("Private")),
        "/evil*": evil,
    }
    with LocalServer({path: noted(handler) for path, handler in routes.items()}) as server:
        try:
            yield Site(server, hits, release)
        finally:
            release.set()


def fetch_config(*, browser: bool = False, loopback: bool = True) -> FetchConfig:
    """Fetching as a server with ``--allow-loopback`` would, with short attempts, no retries."""
    return FetchConfig(
        address_policy=AddressPolicy(allow_loopback=loopback),
        policy=EscalationPolicy(
            max_retries=0, max_calibre=int(Calibre.BROWSER if browser else Calibre.HTTP), backoff_base=0.1
        ),
        limits=FetchLimits(timeout=SLOW_SECONDS, connect_timeout=SLOW_SECONDS, read_timeout=SLOW_SECONDS),
        chromium="/usr/bin/chromium",
    )


@contextmanager
def saving_server(
    store: Path, *, token: str | None = TOKEN, **options: Any
) -> Iterator[tuple[WebIndex, httpx.Client]]:
    """The server with the web pages over a new store at ``store``, saving with ``token``."""
    options.setdefault("fetch", fetch_config())
    with WebIndex(store) as index, serving(index, ui=True, write_token=token, **options) as http:
        yield index, http


def form_fields(html: str) -> dict[str, str]:
    """The hidden fields of the page's save form (its CSRF token, a fixed URL)."""
    form = re.search(r'<form class="save".*?</form>', html, re.S)
    assert form is not None, "no save form"
    return dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', form.group(0)))


def attempts(index: WebIndex) -> list[Any]:
    return list(index.scan("get-metadata"))
