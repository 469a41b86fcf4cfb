"""``GET /{coll}/cdx`` over real HTTP: its outputs and errors, and cdx_toolkit, a client
written for pywb's and Common Crawl's CDX servers, iterating a site's captures."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import cdx_toolkit
import httpx
import pytest

from tests.factories import attempt
from tests.server.serving import serving
from web_index import WebIndex

T0 = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
URLS = [f"https://example.com/p/{i}" for i in range(5)]


@pytest.fixture
def http(tmp_path: Path) -> Iterator[httpx.Client]:
    with WebIndex(tmp_path / "store") as index:
        for day in range(3):
            for i, url in enumerate(URLS):
                index.insert(*attempt(url, T0 + timedelta(days=day, minutes=i), body=f"{url} {day}".encode()))
        index.insert(*attempt("https://example.com/gone", T0, state="timeout"))
        with serving(index) as client:
            yield client


def test_the_outputs(http: httpx.Client) -> None:
    url = URLS[1]
    cdxj = http.get("/store/cdx", params={"url": url})
    assert cdxj.status_code == 200 and cdxj.headers["content-type"].startswith("text/x-cdxj")
    lines = cdxj.text.splitlines()
    assert [line.split(" ", 2)[:2] for line in lines] == [
        ["com,example)/p/1", (T0 + timedelta(days=d, minutes=1)).strftime("%Y%m%d%H%M%S")] for d in range(3)
    ]
    fields = json.loads(lines[0].split(" ", 2)[2])
    assert fields["url"] == url and fields["status"] == "200" and fields["source"] == "store"
    as_json = [
        json.loads(x)
        for x in http.get("/store/index", params={"url": url, "output": "json"}).text.splitlines()
    ]
    assert [r["timestamp"] for r in as_json] == [line.split(" ")[1] for line in lines]
    closest = http.get(
        "/store/cdx", params={"url": url, "closest": "20240302", "limit": "1", "output": "json"}
    )
    assert json.loads(closest.text)["timestamp"] == (T0 + timedelta(days=1, minutes=1)).strftime(
        "%Y%m%d%H%M%S"
    )
    text = http.get("/store/cdx", params={"url": "example.com/p/", "matchType": "prefix", "output": "text"})
    assert len(text.text.splitlines()) == 15 and all(len(x.split(" ")) == 9 for x in text.text.splitlines())
    link = http.get("/store/cdx", params={"url": url, "output": "link"})
    assert link.headers["content-type"].startswith("application/link-format")
    assert link.text.count('rel="memento"') == 3


def test_errors_name_the_parameter(http: httpx.Client) -> None:
    bad = http.get("/store/cdx", params={"url": URLS[0], "from": "yesterday"})
    assert bad.status_code == 400 and bad.json()["parameter"] == "from"
    assert http.get("/store/cdx").json() == {"error": "url: required", "parameter": "url"}
    none = http.get("/store/cdx", params={"url": "https://example.com/gone"})  # failed: no capture
    assert none.status_code == 404 and "no captures" in none.json()["message"]
    assert http.get("/other/cdx", params={"url": URLS[0]}).status_code == 404
    pages = http.get(
        "/store/cdx", params={"url": "example.com", "matchType": "domain", "showNumPages": "true"}
    )
    assert pages.json() == {"pages": 1, "pageSize": 1000, "blocks": 1}
    past = http.get("/store/cdx", params={"url": "example.com", "matchType": "domain", "page": "1"})
    assert past.status_code == 400 and past.json()["parameter"] == "page"
    address = http.get("/store/cdx", params={"url": "http://[fd00:ec2::254]/"})  # no www. form to scan
    assert address.status_code == 404


def test_a_regex_filter_cannot_hold_the_server(tmp_path: Path) -> None:
    # (a|aa)+$ on a run of 40 a's that does not end there backtracks ~10^8 times in Python's re;
    # matched with a timeout, it is a 400 naming the filter, at once.
    url = "https://example.com/" + "a" * 40 + "!"
    with WebIndex(tmp_path / "store") as index:
        index.insert(*attempt(url, T0))
        with serving(index) as http:
            started = time.monotonic()
            evil = http.get("/store/cdx", params={"url": url, "filter": "~url:https://example.com/(a|aa)+$"})
            assert time.monotonic() - started < 3
            assert evil.status_code == 400 and evil.json()["parameter"] == "filter"
            fine = http.get("/store/cdx", params={"url": url, "filter": "~url:https://example.com/a+!"})
            assert fine.status_code == 200


def test_cdx_toolkit_iterates_a_site(http: httpx.Client) -> None:
    base = str(http.base_url).rstrip("/")
    cdx = cdx_toolkit.CDXFetcher(source=f"{base}/store/cdx", wb=f"{base}/store")
    got = list(cdx.iter("example.com/p/*"))  # pages until the 400 past the last
    assert sorted((c["url"], c["timestamp"]) for c in got) == sorted(
        (url, (T0 + timedelta(days=d, minutes=i)).strftime("%Y%m%d%H%M%S"))
        for d in range(3)
        for i, url in enumerate(URLS)
    )
    assert cdx.get_size_estimate("example.com/p/*") > 0  # its reckoning, from showNumPages' "blocks"
    only = cdx.get(URLS[2], filter=["=status:200"], limit=2)
    assert [c["url"] for c in only] == [URLS[2]] * 2


def test_an_answer_cut_by_the_default_limit_says_so(
    http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import web_index.server._cdx as served

    monkeypatch.setattr(served, "DEFAULT_LIMIT", 10)  # 15 captures under the prefix
    prefix = {"url": "example.com/p/", "matchType": "prefix", "output": "json"}
    cut = http.get("/store/cdx", params=prefix)
    assert len(cut.text.splitlines()) == 10 and cut.headers[served.TRUNCATED_HEADER] == "10"
    whole = http.get("/store/cdx", params={**prefix, "limit": "20"})
    assert len(whole.text.splitlines()) == 15 and served.TRUNCATED_HEADER not in whole.headers
    # The first ten either way, in the same order.
    assert whole.text.splitlines()[:10] == cut.text.splitlines()
    asked = http.get("/store/cdx", params={**prefix, "limit": "10"})
    assert asked.text == cut.text and served.TRUNCATED_HEADER not in asked.headers
    pages = http.get("/store/cdx", params={**prefix, "showNumPages": "true"})
    assert pages.headers[served.TRUNCATED_HEADER] == "10"
    exact = http.get("/store/cdx", params={"url": URLS[0]})
    assert len(exact.text.splitlines()) == 3 and served.TRUNCATED_HEADER not in exact.headers
