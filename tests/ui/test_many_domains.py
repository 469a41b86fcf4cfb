"""The home page's list of what a store holds, on a store of 10,000 small
domains made by a bulk load: every domain with its captures and attempts, the
most recently fetched first, 50 a page. (Its speed is the bench's to say.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from tests.factories import T0, attempt
from tests.server.serving import serving
from web_index import WebIndex

pytestmark = pytest.mark.slow

DOMAINS = 10_000
_ROW = re.compile(
    r'<tr><td class="wrap"><a href="[^"]*">([^<]+)</a></td><td>([\d-]+)</td><td class="num">([\d,]+)</td>'
    r'<td class="num">([\d,]+)</td><td class="num">(?:<a [^>]*>)?([\d,]+)'
)


def _fetched(i: int) -> tuple[str, str, int, int]:
    """Domain ``i``'s month, captures, attempts and failures, as loaded below."""
    return (f"d{i:05d}.test", f"{T0 + timedelta(hours=i):%Y-%m}", 1, 1 + (i % 7 == 0))


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    store: Path = tmp_path_factory.mktemp("many") / "store"
    with WebIndex(store) as index, index.bulk_load() as load:
        load.add([attempt(f"http://d{i:05d}.test/", T0 + timedelta(hours=i)) for i in range(DOMAINS)])
        failing = range(0, DOMAINS, 7)
        load.add(
            [attempt(f"http://d{i:05d}.test/x", T0 + timedelta(hours=i), state="timeout") for i in failing]
        )
    with WebIndex(store, read_only=True) as index, serving(index, ui=True) as client:
        yield client


def test_every_domain_is_listed_with_its_counts_newest_first_and_paged(many: httpx.Client) -> None:
    expected = [_fetched(i) for i in range(DOMAINS)]
    expected.sort(key=lambda e: e[0])
    expected.sort(key=lambda e: (e[1], e[3]), reverse=True)
    pages = DOMAINS // 50
    for number in (1, 2, pages // 2, pages):
        got = many.get("/", params={"page": number})
        assert got.status_code == 200
        assert f"Page {number} of {pages}" in got.text and "10,000 registrable domains" in got.text
        rows = [(d, m, int(c), int(a), int(f)) for d, m, c, a, f in _ROW.findall(got.text)]
        want = expected[(number - 1) * 50 : number * 50]
        assert rows == [(d, m, c, a, a - 1) for d, m, c, a in want]
    assert many.get("/", params={"page": pages + 1}).status_code == 404
