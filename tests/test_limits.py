"""Caps on body, header, URL and log sizes: over them an insert is refused,
naming the field and storing nothing; at them it is stored."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from tests.factories import T0, attempt, metadata
from web_index import Limits, WebIndex
from web_index.errors import InvalidRecordError
from web_index.models import SimplePageQuery

SMALL = Limits(max_body_bytes=1000, max_headers_bytes=200, max_url_chars=100, max_text_chars=50)
URL = "https://a.example.com/"


def _refused(idx: WebIndex, item: tuple[Any, ...], field: str) -> None:
    with pytest.raises(InvalidRecordError) as caught:
        idx.insert(*item)
    assert caught.value.field == field
    assert "over the store's limit" in caught.value.problem


def _with_hop(item: tuple[Any, ...], **changes: Any) -> tuple[Any, ...]:
    """``item`` with its first response changed."""
    return (*item[:4], [replace(item[4][0], **changes), *item[4][1:]])


def test_each_limit_refuses_one_over_and_stores_at_it(store_path: Path) -> None:
    stored = 0
    with WebIndex(store_path, limits=SMALL) as idx:
        at_limit: list[tuple[Any, ...]] = []
        over: list[tuple[tuple[Any, ...], str]] = []

        at_limit.append(attempt(URL, T0, body=b"x" * 1000))
        over.append((attempt(URL, T0, body=b"x" * 1001), "data[0].data"))

        long_url = URL + "p" * (100 - len(URL))
        at_limit.append(attempt(long_url, T0))
        over.append((attempt(long_url + "q", T0), "url"))

        two_hops = attempt(URL, T0, hops=2)
        at_limit.append(_with_hop(two_hops, request_url=URL + "r" * (100 - len(URL))))
        over.append((_with_hop(two_hops, request_url=URL + "r" * (101 - len(URL))), "data[0].request_url"))

        # {"x":"vvv..."} is 8 characters of JSON around the value.
        at_limit.append(_with_hop(attempt(URL, T0), headers={"x": "v" * 192}))
        over.append((_with_hop(attempt(URL, T0), headers={"x": "v" * 193}), "data[0].headers"))

        at_limit.append(("get", URL, T0, metadata(URL, "error", logs="l" * 50), []))
        over.append((("get", URL, T0, metadata(URL, "error", logs="l" * 51), []), "metadata.logs"))
        at_limit.append(("get", URL, T0, metadata(URL, "error", traceback="t" * 50), []))
        over.append((("get", URL, T0, metadata(URL, "error", traceback="t" * 51), []), "metadata.traceback"))

        for item in at_limit:
            idx.insert(*item)
            stored += 1
        for item, field in over:
            _refused(idx, item, field)
        # Nothing of a refused insert was stored, alone or in a batch.
        with pytest.raises(InvalidRecordError):
            idx.insert_many([attempt(URL, T0), over[0][0]])
        assert idx.verify().buffered_attempts == stored


def test_the_defaults_take_what_the_fetchers_can_fetch(store_path: Path) -> None:
    assert Limits().max_body_bytes >= 32 * 1024 * 1024  # the fetchers' body cap
    body = b"y" * (32 * 1024 * 1024)
    with WebIndex(store_path) as idx:
        key = idx.insert(*attempt(URL + "big", T0, body=body))
        got = idx.query([key])[0]
        assert got is not None and got.data == body
        idx.flush()
        got = idx.query([SimplePageQuery(url=URL + "big")])[0]
        assert got is not None and got.data == body
        _refused(idx, attempt(URL, T0, body=b"z" * (Limits().max_body_bytes + 1)), "data[0].data")
