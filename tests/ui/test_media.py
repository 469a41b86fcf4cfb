"""A replayed page's video in a real browser: Chromium asks for media by byte ranges, and
the replay answers with the part asked (a 206), so that a player can seek."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from tests.server.serving import serving
from web_index import WebIndex
from web_index.models import AttemptMetadata, Response

T = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
STAMP = "20240301120000"
WATCH = "http://site.test/watch"
CLIP = "http://site.test/clip.webm"
# Not a playable video: the browser's first request for it is the same either way.
CLIP_BODY = bytes(range(256)) * 64

pytestmark = pytest.mark.browser


def _capture(url: str, ctype: str, body: bytes) -> tuple[object, ...]:
    meta = AttemptMetadata(
        state="success", url=url, fetcher_name="t", fetcher_version="1", fetcher_calibre=10
    )
    response = Response(
        url=url, request_url=url, status_code=200, headers={"content-type": ctype}, timestamp=T,
        data=body, is_final=True, fetcher_name="t", fetcher_version="1", fetcher_calibre=10,
    )  # fmt: skip
    return ("get", url, T, meta, [response])


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    store = tmp_path_factory.mktemp("media") / "store"
    page = b'<!doctype html><title>Watch</title><video src="/clip.webm" preload="auto" controls></video>'
    with WebIndex(store) as index:
        index.insert_many(
            [_capture(WATCH, "text/html; charset=utf-8", page), _capture(CLIP, "video/webm", CLIP_BODY)]  # type: ignore[list-item]
        )
    with WebIndex(store, read_only=True) as index, serving(index, ui=True) as client:
        yield client


def test_a_replayed_video_is_served_by_the_ranges_the_browser_asks(tab: Any, ui: httpx.Client) -> None:
    with tab.expect_response(lambda r: r.url.endswith("/clip.webm")) as answer:
        tab.goto(f"/ui/store/{STAMP}if_/{WATCH}")
    first = answer.value  # the browser's first request for the video
    asked = first.request.all_headers().get("range")
    assert asked and asked.startswith("bytes=0-"), asked
    assert first.status == 206, first.status
    headers = first.all_headers()
    assert headers["content-range"].startswith("bytes 0-") and headers["accept-ranges"] == "bytes"
    part = ui.get(f"/ui/store/{STAMP}if_/{CLIP}", headers={"range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == CLIP_BODY[100:200]
    assert part.headers["content-security-policy"].startswith("sandbox;")
