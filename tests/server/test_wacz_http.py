"""``GET /{coll}/wacz``: the captures a CDX query selects, streamed as a WACZ package
that py-wacz validates and web-index imports back, bounded by ``max_records``."""

from __future__ import annotations

import io
import random
import subprocess
import threading
import time
import zipfile
from datetime import timedelta
from pathlib import Path

import pytest

from tests.factories import T0, attempt
from tests.server.serving import serving
from web_index import WebIndex
from web_index.archive import import_wacz
from web_index.models import SimplePageQuery

WACZ = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "wacz")  # py-wacz, the dev group's
URLS = [
    "https://a.example.com/",
    "https://a.example.com/page",
    "https://a.example.com/page2",
    "https://www.a.example.com/other",
    "https://b.example.org/",
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    with WebIndex(root) as index:
        for n, url in enumerate(URLS):
            index.insert(*attempt(url, T0 + timedelta(minutes=n), body=f"<title>{n}</title>".encode()))
        index.insert(*attempt(URLS[1], T0 + timedelta(days=40), body=b"<title>again</title>"))
        index.insert(*attempt(URLS[0], T0 + timedelta(days=41), method="head"))
        index.flush()
        index.compact()
    return root


def _package_urls(data: bytes) -> list[tuple[str, str]]:
    """The (url, timestamp) of every line of the package's CDXJ index."""
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        assert "datapackage.json" in names and "pages/pages.jsonl" in names
        text = zf.read("indexes/index.cdx").decode()
    out = []
    for line in text.splitlines():
        _key, ts, fields = line.split(" ", 2)
        url = fields.split('"url": "', 1)[1].split('"', 1)[0]
        out.append((url, ts))
    return sorted(out)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"url": URLS[1]}, [URLS[1], URLS[1]]),  # exact: not page2
        ({"url": "a.example.com/page", "matchType": "prefix"}, [URLS[1], URLS[1], URLS[2]]),
        ({"url": "a.example.com", "matchType": "host"}, [*URLS[:4], URLS[1]]),
        ({"url": URLS[1], "to": "20240901"}, [URLS[1]]),
    ],
)
def test_a_selection_streams_as_the_cdx_api_selects_it(
    store: Path, tmp_path: Path, params: dict[str, str], expected: list[str]
) -> None:
    with WebIndex(store, read_only=True) as index, serving(index) as http:
        got = http.get("/store/wacz", params=params)
        assert got.status_code == 200, got.text
        assert got.headers["content-type"] == "application/wacz"
        assert got.headers["content-disposition"].startswith("attachment; filename=")
        cdx = http.get("/store/cdx", params={**params, "output": "json"})
    listed = sorted((line.split('"url": "')[1].split('"')[0]) for line in cdx.text.splitlines())
    packaged = _package_urls(got.content)
    assert sorted(u for u, _ in packaged) == sorted(expected) == listed
    package = tmp_path / "got.wacz"
    package.write_bytes(got.content)
    done = subprocess.run([WACZ, "validate", "-f", str(package)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    with WebIndex(tmp_path / "copy") as copy:
        import_wacz(copy, [package])
        for url in set(expected):
            page = copy.query([SimplePageQuery(url=url)])[0]
            assert page is not None and page.responses[-1].data is not None


def test_head_responses_are_packaged_with_type_head(store: Path) -> None:
    with WebIndex(store, read_only=True) as index, serving(index) as http:
        got = http.get("/store/wacz", params={"url": URLS[0], "type": "head"})
    assert got.status_code == 200, got.text
    assert [u for u, _ in _package_urls(got.content)] == [URLS[0]]


def test_more_than_max_records_is_a_413_and_nothing_is_a_404(store: Path) -> None:
    with WebIndex(store, read_only=True) as index, serving(index, max_records=2) as http:
        too_many = http.get("/store/wacz", params={"url": "a.example.com", "matchType": "host"})
        assert too_many.status_code == 413
        assert "more than 2 captures" in too_many.json()["error"]
        assert http.get("/store/wacz", params={"url": URLS[1]}).status_code == 200  # 2 captures: allowed
        assert http.get("/store/wacz", params={"url": "https://c.example.net/"}).status_code == 404
        bad = http.get("/store/wacz", params={"url": URLS[1], "matchType": "everything"})
        assert bad.status_code == 400 and bad.json()["parameter"] == "matchType"
        assert http.get("/other/wacz", params={"url": URLS[1]}).status_code == 404


def test_a_client_that_goes_away_stops_the_export(tmp_path: Path) -> None:
    root = tmp_path / "big"
    rng = random.Random(5)
    with WebIndex(root) as index:
        index.insert_many(
            [
                attempt(
                    f"https://big.example.com/{n}", T0 + timedelta(seconds=n), body=rng.randbytes(200_000)
                )
                for n in range(100)
            ]
        )
        index.flush()
    with WebIndex(root, read_only=True) as index, serving(index) as http:
        with http.stream("GET", "/store/wacz", params={"url": "big.example.com", "matchType": "host"}) as got:
            assert got.status_code == 200
            first = next(got.iter_raw(65536))
            assert first.startswith(b"PK")
        # 20 MB of package, 1 MiB queued at most: the export waits on the queue until it sees
        # the client gone, then stops (its thread ends) instead of writing the rest.
        deadline = time.monotonic() + 15
        while any(t.name == "wacz-export" for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(t.name == "wacz-export" for t in threading.enumerate())


def test_an_iri_gets_an_ascii_file_name(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s") as index:
        index.insert(*attempt("https://例え.jp/ページ", T0, body=b"<title>x</title>"))
        index.flush()
    with WebIndex(tmp_path / "s", read_only=True) as index, serving(index) as http:
        got = http.get("/store/wacz", params={"url": "https://例え.jp/ページ"})
    assert got.status_code == 200, got.text
    assert got.headers["content-disposition"].isascii()
