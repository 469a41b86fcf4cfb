"""Every collection that is a store gets the whole UI (its attempts, failures
included, and its overview); any other collection its captures only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.factories import attempt
from tests.server.serving import serving
from web_index import WebIndex
from web_index.archive import Collection

T0 = datetime(2024, 5, 1, 12, tzinfo=UTC)
URL = "https://second.example/page"


def test_a_second_store_shows_its_attempts_and_overview(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "main") as main, WebIndex(tmp_path / "second") as second:
        main.insert(*attempt("https://main.example/", T0))
        second.insert(*attempt(URL, T0))
        second.insert(*attempt(URL, T0 + timedelta(days=1), state="unreachable"))
        other = {"second": Collection.of_store("second", second)}
        with serving(main, ui=True, collections=other) as http:
            home = http.get("/").text
            assert 'href="/ui/second/"' in home and 'href="/ui/store/"' in home
            history = http.get(f"/ui/second/history?url={quote(URL)}")
            assert history.status_code == 200
            rows = history.text.split('<table class="attempts">')[1]
            assert rows.count('<span class="state state-unreachable">') == 1
            assert rows.count('<span class="state state-success">') == 1
            assert http.get("/ui/second/").status_code == 200
            # The store of one collection is not another's.
            assert "unreachable" not in http.get(f"/ui/store/history?url={quote(URL)}").text


def test_the_pages_never_fetch_the_live_web_of_a_live_collection(tmp_path: Path) -> None:
    """The web pages are read-only: a ``$live`` collection's captures are not
    replayed from the live site, though its memento API would fetch it."""
    from collections import Counter

    from web_index.archive import load_collections, open_collections
    from web_index.cli._sample_site import LocalServer, reply
    from web_index.fetch import AddressPolicy

    hits: Counter[str] = Counter()

    def page(r: object) -> None:
        hits[r.path] += 1  # type: ignore[attr-defined]
        reply(r, 200, "<html><body>live</body></html>")  # type: ignore[arg-type]

    (tmp_path / "collections.yaml").write_text("collections:\n  live:\n    index: $live\n")
    with LocalServer({"/*": page}) as site, WebIndex(tmp_path / "main") as main:
        specs = load_collections(tmp_path / "collections.yaml")
        live = open_collections(specs, address_policy=AddressPolicy(allow_loopback=True))
        with serving(main, ui=True, collections=live) as http:
            url = site.url("/p")
            for path in (
                f"/ui/live/history?url={quote(url)}",
                f"/ui/live/20240501120000/{url}",
                f"/ui/live/20240501120000if_/{url}",
                f"/ui/live/compare?url={quote(url)}&a=2024&b=2025",
            ):
                got = http.get(path)
                assert got.status_code in (200, 404), (path, got.text)
            assert hits == Counter()
            assert http.get(f"/live/20240501120000id_/{url}").status_code == 200  # the API does go live
            assert hits["/p"] == 1


def test_a_remote_url_with_more_captures_than_one_answer_holds(tmp_path: Path, monkeypatch: Any) -> None:
    """A collection that is not a store answers at most MAX_LIMIT captures (the
    oldest): the history says so, and a capture page or a comparison asks for
    the captures near its moment instead of choosing among the oldest, and for
    a neighbour the nearest ones leave out."""
    from web_index.archive import export_warcs, load_collections, open_collections
    from web_index.ui import _captures

    days = 7
    uneven = "https://second.example/uneven"  # one capture, then a burst ten days later
    bursts = [T0, *(T0 + timedelta(days=10, minutes=m) for m in range(4))]
    exact = "https://second.example/exact"  # as many captures as one answer holds
    with WebIndex(tmp_path / "source") as source:
        for day in range(days):
            source.insert(*attempt(URL, T0 + timedelta(days=day), body=f"<html>day {day}</html>".encode()))
        for n, when in enumerate(bursts):
            source.insert(*attempt(uneven, when, body=f"<html>burst {n}</html>".encode()))
        for day in range(4):
            source.insert(*attempt(exact, T0 + timedelta(days=day)))
        export_warcs(source, tmp_path / "warcs")
    (tmp_path / "collections.yaml").write_text(f"collections:\n  arch: {tmp_path / 'warcs'}\n")
    monkeypatch.setattr(_captures, "MAX_LIMIT", 4)
    monkeypatch.setattr(_captures, "NEAR_CAPTURES", 3)
    stamp = [f"{T0 + timedelta(days=d):%Y%m%d%H%M%S}" for d in range(days)]
    with WebIndex(tmp_path / "main") as main:
        arch = open_collections(load_collections(tmp_path / "collections.yaml"))
        with serving(main, ui=True, collections=arch) as http:
            history = http.get(f"/ui/arch/history?url={quote(URL)}").text
            assert "4 captures (the oldest 4 only" in history
            assert "only" not in http.get(f"/ui/arch/history?url={quote(exact)}").text.split("</h1>")[1][:200]
            last = http.get(f"/ui/arch/{stamp[-1]}/{URL}")
            assert last.status_code == 200, last.text  # not sent to the fourth, the latest of the oldest
            assert f'href="/ui/arch/{stamp[-2]}/{URL}"' in last.text  # the one before it
            assert "day 6" in last.text
            pair = http.get(f"/ui/arch/compare?url={quote(URL)}&a={stamp[0]}&b={stamp[-1]}").text
            assert f"/ui/arch/{stamp[0]}/{URL}" in pair and f"/ui/arch/{stamp[-1]}/{URL}" in pair
            assert "day 0" in pair and "day 6" in pair, pair
            # The three captures nearest the burst's first all follow it: the one
            # ten days before is asked for.
            first, lone, next_one = (f"{when:%Y%m%d%H%M%S}" for when in (bursts[1], bursts[0], bursts[2]))
            page = http.get(f"/ui/arch/{first}/{uneven}")
            assert page.status_code == 200 and "burst 1" in page.text
            assert f'href="/ui/arch/{lone}/{uneven}"' in page.text
            assert f'href="/ui/arch/{next_one}/{uneven}"' in page.text
