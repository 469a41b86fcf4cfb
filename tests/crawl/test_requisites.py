"""``--page-requisites``: what each page needs to render is recorded, once per crawl,
from its host and others, under robots.txt and the address policy, apart from
``--max-pages`` with a limit of its own, and never packed as a page."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.crawl.test_pipeline import packed_urls
from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, reply
from web_index.crawl import crawl_site, css_requisites, requisites_of
from web_index.fetch import FetchConfig
from web_index.models import Page, SimplePageQuery


def counting(routes: dict[str, Any], hits: Counter[str]) -> dict[str, Any]:
    lock = threading.Lock()

    def wrap(handler: Any) -> Any:
        def run(r: BaseHTTPRequestHandler) -> None:
            with lock:
                hits[r.path] += 1
            handler(r)

        return run

    return {path: wrap(h) for path, h in routes.items()}


def site_routes(cdn: str) -> dict[str, Any]:
    page = (
        '<html><head><title>{t}</title><link rel="stylesheet" href="/s.css"><link rel="icon" href="/fav.ico">'
        '<script src="/j.js"></script></head><body style="background: url(/bg.png)">'
        '<img src="/a.png" srcset="/a2.png 2x, /a3.png 3x"><img src="/private.png">'
        '<iframe src="/frame.html"></iframe><p>Words of {t}.</p><a href="/page2">next</a></body></html>'
    )
    css = f'@import "/more.css"; body {{ font: url(font.woff); }} h1 {{ background: url({cdn}/cdn.png); }}'

    def text(body: str, kind: str) -> Any:
        return lambda r: reply(r, 200, body, content_type=kind)

    return {
        "/robots.txt": text("User-agent: *\nDisallow: /private.png\n", "text/plain"),
        "/": text(page.format(t="home"), "text/html"),
        "/page2": text(page.format(t="second"), "text/html"),
        "/s.css": text(css, "text/css"),
        "/more.css": text("p { color: red; }", "text/css"),
        **{p: text("x", "image/png") for p in ("/a.png", "/a2.png", "/a3.png", "/bg.png", "/fav.ico")},
        "/font.woff": text("font", "font/woff"),
        "/j.js": text("1;", "text/javascript"),
        "/frame.html": text("<html><body>framed</body></html>", "text/html"),
        "/private.png": text("secret", "image/png"),
    }


REQUISITES = [
    "/s.css", "/fav.ico", "/j.js", "/bg.png", "/a.png", "/a2.png", "/a3.png", "/frame.html",
    "/more.css", "/font.woff",
]  # fmt: skip


def test_requisites_are_recorded_once_from_any_host_and_never_packed(
    store: WebIndex, crawl_config: FetchConfig, tmp_path: Path
) -> None:
    hits: Counter[str] = Counter()
    cdn_hits: Counter[str] = Counter()
    with LocalServer(
        counting({"/*": lambda r: reply(r, 200, "x", content_type="image/png")}, cdn_hits)
    ) as cdn:
        cdn_root = f"http://localhost:{cdn.port}"
        with LocalServer(counting(site_routes(cdn_root), hits)) as site:
            result = asyncio.run(
                crawl_site(
                    store, site.url("/"), config=crawl_config, settle=0.5, timeout=120, requisites=True
                )
            )
    assert all(hits[p] == 1 for p in REQUISITES), hits  # each once, though both pages need them
    assert hits["/private.png"] == 0  # robots.txt
    assert cdn_hits["/cdn.png"] == 1  # another host, found in a stylesheet
    assert result.pages == 2 and result.requisites == len(REQUISITES) + 1 and result.requisite_errors == 0
    assert sorted(packed_urls(store, result.site, tmp_path)) == [site.url("/"), site.url("/page2")]
    stored = store.query([SimplePageQuery(url=site.url(p)) for p in REQUISITES])
    assert all(isinstance(p, Page) and p.status_code == 200 for p in stored)


def test_requisites_have_their_own_limit_and_are_off_by_default(
    store: WebIndex, crawl_config: FetchConfig
) -> None:
    hits: Counter[str] = Counter()
    with LocalServer(counting(site_routes("http://localhost:9"), hits)) as site:
        capped = asyncio.run(
            crawl_site(
                store, site.url("/"), config=crawl_config, settle=0.5, timeout=120,
                requisites=True, max_requisites=3, max_pages=1,
            )
        )  # fmt: skip
        assert capped.pages == 1 and capped.requisites == 3
        assert sum(hits[p] for p in REQUISITES) == 3
        hits.clear()
        plain = asyncio.run(crawl_site(store, site.url("/"), config=crawl_config, settle=0.5, timeout=120))
    assert plain.requisites == 0 and sum(hits[p] for p in REQUISITES) == 0 and hits["/page2"] == 1


def test_what_a_page_and_a_stylesheet_load() -> None:
    body = (
        b'<html><head><base href="http://h.test/sub/"><link rel="stylesheet" href="a.css">'
        b'<link rel="next" href="/p2"><style>@import url("b.css"); p { background: url(\'c.png\') }</style>'
        b'</head><body><img src="data:image/png;base64,AA" srcset="d.png 1x, /e.png 2x">'
        b'<video poster="f.jpg"><source src="g.mp4"></video><a href="/page">a link is no requisite</a>'
        b'<object data="h.svg"></object><div style="background-image: url(i.png)"></div></body></html>'
    )
    assert requisites_of(body, "text/html", "http://h.test/") == [
        "http://h.test/sub/a.css", "http://h.test/sub/h.svg", "http://h.test/sub/g.mp4",
        "http://h.test/sub/f.jpg", "http://h.test/sub/d.png", "http://h.test/e.png",
        "http://h.test/sub/b.css", "http://h.test/sub/c.png", "http://h.test/sub/i.png",
    ]  # fmt: skip
    css = '@import "x.css"; @font-face { src: url(/f.woff2) } a { background: url("http://o.test/y.png") }'
    assert css_requisites(css, "http://h.test/css/main.css") == [
        "http://h.test/css/x.css", "http://h.test/f.woff2", "http://o.test/y.png",
    ]  # fmt: skip
