"""Every collection that is a store gets the whole UI (its attempts, failures
included, and its overview); any other collection its captures only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
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
