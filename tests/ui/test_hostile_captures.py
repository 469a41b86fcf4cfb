"""Captures built to lead a reader out of the archive, over real HTTP (an audit's cases):
an archived URL whose dot segments would turn the UI's links into links to other pages of
this server, documents that are not HTML (SVG, XML, a type that is two) shown as pages with
their links unrewritten, and a collection's replay loading from another collection's paths
(which may be the live web's)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime
from html import unescape
from urllib.parse import unquote

import httpx
import pytest

from tests.factories import browser_path
from tests.server.serving import serving
from web_index import WebIndex
from web_index.models import AttemptMetadata, Response

T = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
STAMP = "20240301120000"
# A WARC import keeps such a target URI as it is; a browser resolves its dot segments.
DOTTED = f"http://evil.test/../../../../store/{STAMP}id_/http://site.test/x"
LINKS = "http://site.test/links"
# Refreshes as browsers follow them: a delay with a fraction, a URL without "url=".
REFRESHES = {
    "http://site.test/refresh-bare": '<meta http-equiv="refresh" content="0; http://live.example/a">',
    "http://site.test/refresh-half": "<meta http-equiv=refresh content=\"0.5; URL='http://live.example/b'\">",
    "http://site.test/refresh-space": '<meta http-equiv="refresh" content="0 http://live.example/c">',
    "http://site.test/refresh-dot": '<meta http-equiv="refresh" content=".5;url=http://live.example/d">',
}
TYPES = {
    "http://site.test/comma": "text/plain, text/html",
    "http://site.test/comma-after-charset": "text/plain; charset=iso-8859-1, text/html",
    "http://site.test/mixed": "multipart/x-mixed-replace; boundary=x",
    "http://site.test/untyped": "",
    "http://site.test/doc.xml": "application/xml",
    "http://site.test/pic.svg": "image/svg+xml",
}
OUT = '<a href="http://live.example/">out</a><svg xmlns="http://www.w3.org/2000/svg"></svg>'


def _page(url: str, body: str, ctype: str = "text/html; charset=utf-8") -> tuple[object, ...]:
    meta = AttemptMetadata(
        state="success", url=url, fetcher_name="t", fetcher_version="1", fetcher_calibre=10
    )
    response = Response(
        url=url, request_url=url, status_code=200, headers={"content-type": ctype}, timestamp=T,
        data=body.encode(), is_final=True, fetcher_name="t", fetcher_version="1", fetcher_calibre=10,
    )  # fmt: skip
    return ("get", url, T, meta, [response])


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    store = tmp_path_factory.mktemp("hostile") / "store"
    with WebIndex(store) as index:
        links = f'<a href="{DOTTED}">dotted</a><a href="http://evil.test/a/../b">b</a>'
        items = [_page(DOTTED, "<p>dotted</p>"), _page(LINKS, links)]
        items += [_page(url, body) for url, body in REFRESHES.items()]
        index.insert_many(items + [_page(url, OUT, ctype) for url, ctype in TYPES.items()])  # type: ignore[arg-type]
    with WebIndex(store, read_only=True) as index, serving(index, ui=True) as client:
        yield client


def _hrefs(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'(?:href|src)="([^"]+)"', html)]


def test_a_dotted_url_s_links_lead_to_its_own_pages(ui: httpx.Client) -> None:
    """Every link the UI makes to a capture whose URL has dot segments is one a browser keeps as
    it is: resolved as a browser would, it still names the capture, and it opens it."""
    history = ui.get("/ui/store/history", params={"url": DOTTED})
    assert history.status_code == 200
    resolved = [browser_path(str(history.url), h) for h in _hrefs(history.text)]
    captures = [p for p in resolved if p.startswith(f"/ui/store/{STAMP}")]
    assert captures and all(unquote(p.split("/", 4)[4]) == DOTTED for p in captures)
    opened = ui.get(captures[0], follow_redirects=True)
    assert opened.status_code == 200 and not opened.history  # its own address: no redirect
    inside = [browser_path(str(opened.url), h) for h in _hrefs(opened.text)]
    frame = [p for p in inside if p.startswith(f"/ui/store/{STAMP}if_/")]
    raw = [p for p in inside if p.startswith(f"/store/{STAMP}id_/")]
    assert frame and raw and all(unquote(p.split("/", 4)[4]) == DOTTED for p in frame)
    assert all(unquote(p.split("/", 3)[3]) == DOTTED for p in raw)
    assert ui.get(raw[0]).content == b"<p>dotted</p>"  # the capture, not another page
    assert b"<p>dotted</p>" in ui.get(frame[0]).content


def test_a_replayed_page_s_dotted_links_stay_in_the_archive(ui: httpx.Client) -> None:
    """An absolute link with dot segments in a replayed page is rewritten into the archive so
    that a browser's resolving it still names the same URL, in this collection's replay."""
    got = ui.get(f"/ui/store/{STAMP}if_/{LINKS}", headers={"Sec-Fetch-Dest": "iframe"})
    targets = [browser_path(str(got.url), h) for h in _hrefs(got.text)]
    prefix = f"/ui/store/{STAMP}if_/"
    assert len(targets) == 2 and all(t.startswith(prefix) for t in targets)
    assert [unquote(t[len(prefix) :]) for t in targets] == [DOTTED, "http://evil.test/a/../b"]


def test_every_refresh_a_browser_follows_stays_in_the_archive(ui: httpx.Client) -> None:
    for url in REFRESHES:
        got = ui.get(f"/ui/store/{STAMP}if_/{url}").text
        content = unescape(re.findall(r'content="([^"]*)"', got)[0])
        assert "live.example" in content and f"; url=/ui/store/{STAMP}if_/http://live.example/" in content


def test_documents_that_are_not_html_are_shown_as_text(ui: httpx.Client) -> None:
    """A replayed SVG, XML document or body of two types, opened as a page (its links would be
    followed as they are), comes as text; an SVG an <img> asks for comes as an image."""
    for url in TYPES:
        for dest in ("document", "iframe"):
            got = ui.get(f"/ui/store/{STAMP}if_/{url}", headers={"Sec-Fetch-Dest": dest})
            assert got.headers["content-type"].startswith("text/plain"), (url, dest)
            assert got.headers["x-content-type-options"] == "nosniff"
    latin = ui.get(f"/ui/store/{STAMP}if_/http://site.test/comma-after-charset")
    assert latin.headers["content-type"] == "text/plain; charset=iso-8859-1"  # its own charset
    svg = ui.get(f"/ui/store/{STAMP}if_/http://site.test/pic.svg", headers={"Sec-Fetch-Dest": "image"})
    assert svg.headers["content-type"] == "image/svg+xml"


def test_a_replay_loads_from_its_own_collection_only(ui: httpx.Client) -> None:
    """The replay's policy names this collection's replay paths, not the server: another
    collection on it (``$live``) fetches the live web."""
    got = ui.get(f"/ui/store/{STAMP}if_/{LINKS}")
    root = str(ui.base_url).rstrip("/")
    policy = got.headers["content-security-policy"]
    assert f"default-src {root}/ui/store/ data:;" in policy and "'self' data:" not in policy
