"""``POST /api/save`` over real HTTP, fetching a loopback site into a real store:
the capture's address once saved, with the page's requisites; the attempt's
state and reason when the page could not be had; the bearer token as
``/api/insert`` checks it; the address policy; the time limit."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.ui.save_site import SLOW_SECONDS, TOKEN, Site, attempts, live_site, saving_server
from web_index import WebIndex

AUTH = {"authorization": f"Bearer {TOKEN}".encode()}


@pytest.fixture
def site() -> Iterator[Site]:
    with live_site() as got:
        yield got


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Any, httpx.Client]]:
    with saving_server(tmp_path / "store") as got:
        yield got


def test_a_save_answers_the_capture_and_records_its_requisites(
    server: tuple[Any, httpx.Client], site: Site
) -> None:
    index, http = server
    url = site.url("/garden")
    saved = http.post("/api/save", json={"url": url}, headers=AUTH)
    assert saved.status_code == 200, saved.text
    body = saved.json()
    capture = body["capture"]
    assert body["state"] == "success" and capture["url"] == url and len(capture["timestamp"]) == 14
    assert capture["memento"] == f"/store/{capture['timestamp']}id_/{url}"
    assert body["requisites"] == {"fetched": 2, "failed": 0, "skipped": 0}
    # The memento is the page, from the store; its stylesheet is stored beside it.
    memento = http.get(capture["memento"])
    assert memento.status_code == 200 and "Garden" in memento.text
    assert http.get(f"/store/{capture['timestamp']}id_/{site.url('/style.css')}").text.startswith("body {")
    assert sorted(m.url for m in attempts(index)) == sorted(
        [url, site.url("/style.css"), site.url("/pic.png")]
    )


def test_a_failed_save_says_the_state_and_the_reason(server: tuple[Any, httpx.Client], site: Site) -> None:
    index, http = server
    slow = http.post("/api/save", json={"url": site.url("/slow")}, headers=AUTH)
    assert slow.status_code == 502, slow.text
    assert slow.json()["state"] == "timeout"
    assert slow.json()["reason"] == f"the attempt exceeded its limit of {SLOW_SECONDS:g}s"
    assert "capture" not in slow.json()
    forbidden = http.post("/api/save", json={"url": site.url("/private")}, headers=AUTH)
    assert forbidden.status_code == 502
    assert "robots.txt" in forbidden.json()["reason"]
    assert "/private" not in site.fetched()
    states = {m.url: str(m.state) for m in attempts(index)}  # every attempt recorded, failures too
    assert states[site.url("/slow")] == "timeout" and states[site.url("/private")] != "success"


def test_the_bearer_token_is_required(server: tuple[Any, httpx.Client], site: Site) -> None:
    index, http = server
    for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": f"Basic {TOKEN}".encode()}):
        refused = http.post("/api/save", json={"url": site.url("/garden")}, headers=headers)
        assert refused.status_code == 401 and "www-authenticate" in refused.headers
    assert attempts(index) == [] and site.hits == []


@pytest.mark.parametrize(
    ("url", "status", "said"),
    [
        ("file:///etc/passwd", 400, "'file:///etc/passwd' is not an http(s) URL"),
        ("javascript:alert(1)", 400, "is not an http(s) URL"),
        ("http://169.254.169.254/latest/meta-data/", 403, "169.254.169.254 is link-local, cloud-metadata"),
        ("http://100.100.100.200/", 403, "cloud-metadata"),
        ("http://192.168.1.1/", 403, "--allow-private"),
    ],
)
def test_urls_that_are_not_to_be_fetched_are_refused(
    server: tuple[Any, httpx.Client], url: str, status: int, said: str
) -> None:
    index, http = server
    refused = http.post("/api/save", json={"url": url}, headers=AUTH)
    assert refused.status_code == status and said in refused.json()["error"]
    assert refused.json()["parameter"] == "url"
    assert attempts(index) == []


def test_bad_bodies_are_a_400(server: tuple[Any, httpx.Client]) -> None:
    _, http = server
    for body in (b"", b"not json", b"[]", b'{"url": 3}'):
        refused = http.post("/api/save", content=body, headers=AUTH)
        assert refused.status_code == 400 and "\n" not in refused.json()["error"]


def test_past_the_servers_limit_a_429(tmp_path: Path, site: Site) -> None:
    with saving_server(tmp_path / "store", max_saves=1) as (_, http):
        answers: list[httpx.Response] = []
        first = threading.Thread(
            target=lambda: answers.append(
                http.post("/api/save", json={"url": site.url("/slow")}, headers=AUTH)
            )
        )
        first.start()
        while "/slow" not in site.hits:
            threading.Event().wait(0.02)
        full = http.post("/api/save", json={"url": site.url("/garden")}, headers=AUTH)
        assert full.status_code == 429 and full.headers["retry-after"]
        assert "the most this server runs at once" in full.json()["error"]
        first.join()
        assert answers[0].status_code == 502
        assert http.post("/api/save", json={"url": site.url("/garden")}, headers=AUTH).status_code == 200


def test_a_save_past_its_time_limit_is_a_504(tmp_path: Path, site: Site) -> None:
    from dataclasses import replace

    from tests.ui.save_site import fetch_config
    from web_index.fetch import FetchLimits

    patient = SLOW_SECONDS * 10  # each attempt would wait longer than the save may
    slow_fetches = replace(fetch_config(), limits=FetchLimits(timeout=patient, read_timeout=patient))
    with saving_server(tmp_path / "store", fetch=slow_fetches, save_timeout=SLOW_SECONDS) as (_, http):
        cut = http.post("/api/save", json={"url": site.url("/slow")}, headers=AUTH)
        assert cut.status_code == 504
        assert "time limit (1 s) ran out while fetching" in cut.json()["reason"]


def test_serve_gives_the_saves_its_address_policy_and_bounds(tmp_path: Path) -> None:
    from web_index.cli._serve import _app

    WebIndex(tmp_path / "store").close()
    for loopback, private, workers in ((False, False, 1), (True, True, 3)):
        app, index = _app(
            str(tmp_path / "store"), TOKEN, None, loopback, private, 10.0,
            save_form=workers == 1, max_saves=2, save_timeout=30.0,
        )  # fmt: skip
        with index:
            saves = app.state.saves
            policy = saves.config.address_policy
            assert (policy.allow_loopback, policy.allow_private) == (loopback, private)
            assert (saves.max_in_flight, saves.timeout, saves.config.limits.timeout) == (2, 30.0, 10.0)
            assert saves.config.policy.max_calibre == 60  # up to the browser
            assert (app.state.ui_sessions is None) == (workers > 1)  # the form needs one process
    app, index = _app(str(tmp_path / "store"), None, None, True, True, 10.0)
    with index:
        assert app.state.saves is None and app.state.ui_sessions is None
