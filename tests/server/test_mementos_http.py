"""Mementos over real HTTP: ``/{coll}/{timestamp}id_/{url}`` and the redirect to the closest;
read by cdx_toolkit, and by the real pywb 2.10, whose collection's only index is this server's
CDX API (``cdx+``), replaying a page that lives only in web-index."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from urllib.parse import unquote

import cdx_toolkit
import httpx
import pytest

from tests.archive.pywb import running_pywb_remote
from tests.factories import browser_path
from tests.server.serving import serving
from web_index import WebIndex
from web_index.archive import content_policy
from web_index.models import AttemptMetadata, Response

T0 = datetime(2024, 5, 1, 8, 30, tzinfo=UTC)
PAGE = "https://example.com/news?id=7"
OLD = "http://example.com/old"
HOSTILE = "http://example.com/hostile"
JUMP = "http://example.com/jump"
VIDEO = "http://example.com/clip.mp4"
CLIP = bytes(range(256)) * 4
# Archived fields a browser acts on for the origin that serves them: none may reach the
# archive's own origin (its cookies, a refresh to the live web, reports sent there...).
_ACTING = {
    "set-cookie": "web_index_session=attacker; Path=/\npwned=1",
    "refresh": "0; url=http://live.example/",
    "content-security-policy": "default-src *; report-uri http://live.example/report",
    "content-security-policy-report-only": "default-src 'none'; report-uri http://live.example/ro",
    "clear-site-data": '"cookies", "storage"',
    "service-worker-allowed": "/",
    "link": "<http://live.example/>; rel=preconnect",
    "www-authenticate": 'Basic realm="archive"',
    "access-control-allow-origin": "*",
    "cache-control": "max-age=31536000, immutable",
    "x-served-by": "origin",
}


def _root(http: httpx.Client) -> str:
    return str(http.base_url).rstrip("/")


def _stamp(t: datetime) -> str:
    return t.strftime("%Y%m%d%H%M%S")


def _response(
    url: str, request_url: str, at: datetime, status: int, headers: dict[str, str], body: bytes
) -> Response:
    return Response(
        url=url, request_url=request_url, status_code=status, headers=headers, timestamp=at, data=body,
        is_final=status < 300, fetcher_name="t", fetcher_version="1", fetcher_calibre=10,
    )  # fmt: skip


def _meta(url: str) -> AttemptMetadata:
    return AttemptMetadata(
        state="success", url=url, fetcher_name="t", fetcher_version="1", fetcher_calibre=10
    )


@pytest.fixture
def http(tmp_path: Path) -> Iterator[httpx.Client]:
    html = {"content-type": "text/html; charset=utf-8", "x-served-by": "origin"}
    with WebIndex(tmp_path / "store") as index:
        for day in range(2):
            at = T0 + timedelta(days=day)
            body = f"<html><body><p>Day {day} news</p></body></html>".encode()
            index.insert("get", PAGE, at, _meta(PAGE), [_response(PAGE, PAGE, at, 200, html, body)])
        moved = [
            _response(OLD, OLD, T0, 301, {"location": "/new"}, b""),
            _response(
                OLD, "http://example.com/new", T0 + timedelta(seconds=2), 200, html, b"<p>New home</p>"
            ),
        ]
        index.insert("get", OLD, T0, _meta(OLD), moved)
        dotted = [
            _response(JUMP, JUMP, T0, 302, {"location": "http://evil.test/../../store/x"}, b""),
            _response(JUMP, "http://evil.test/store/x", T0 + timedelta(seconds=1), 200, html, b"<p>x</p>"),
        ]
        index.insert("get", JUMP, T0, _meta(JUMP), dotted)
        hostile = {**html, **_ACTING, "etag": '"v1"', "last-modified": "Wed, 01 May 2024 08:00:00 GMT"}
        page = _response(HOSTILE, HOSTILE, T0, 200, hostile, b"<p>hi</p>")
        index.insert("get", HOSTILE, T0, _meta(HOSTILE), [page])
        video = {"content-type": "video/mp4", "accept-ranges": "none", "etag": '"clip"'}
        index.insert("get", VIDEO, T0, _meta(VIDEO), [_response(VIDEO, VIDEO, T0, 200, video, CLIP)])
        with serving(index) as client:
            yield client


def test_a_memento_is_the_response_as_it_was(http: httpx.Client) -> None:
    got = http.get(f"/store/{_stamp(T0)}id_/{PAGE}")
    assert got.status_code == 200 and got.content == b"<html><body><p>Day 0 news</p></body></html>"
    assert got.headers["content-type"].startswith("text/html")
    assert got.headers["x-archive-orig-x-served-by"] == "origin" and "x-served-by" not in got.headers
    assert got.headers["memento-datetime"] == format_datetime(T0, usegmt=True)
    assert f'<{PAGE}>; rel="original"' in got.headers["link"]
    policy = got.headers["content-security-policy"]
    assert (
        policy.startswith("sandbox;")
        and f"default-src {_root(http)}/store/ data:;" in policy  # not another collection's paths
        and "script-src 'none'" in policy
    )
    assert got.headers["x-content-type-options"] == "nosniff"
    later = http.get(f"/store/{_stamp(T0 + timedelta(days=1, hours=5))}id_/{PAGE}")  # the closest
    assert later.content.startswith(b"<html><body><p>Day 1")
    assert http.get(f"/store/2024id_/{PAGE}").content.startswith(b"<html><body><p>Day 1")  # end of 2024
    assert http.head(f"/store/{_stamp(T0)}id_/{PAGE}").status_code == 200


def test_archived_fields_a_browser_acts_on_are_served_under_names_of_their_own(http: httpx.Client) -> None:
    """Of an archived response's fields only those that describe the body keep their names:
    cookies, refreshes, policies with reports, Link, Clear-Site-Data and the rest are served as
    ``X-Archive-Orig-*`` (pywb's names), and the archive's own policy is the only one."""
    got = http.get(f"/store/{_stamp(T0)}id_/{HOSTILE}")
    assert got.status_code == 200 and got.content == b"<p>hi</p>"
    for name in _ACTING:
        assert name not in got.headers or name in ("content-security-policy", "link"), name
    cookies = got.headers.get_list("x-archive-orig-set-cookie")
    assert cookies == ["web_index_session=attacker; Path=/", "pwned=1"]
    assert got.headers["x-archive-orig-refresh"] == _ACTING["refresh"]
    assert got.headers.get_list("content-security-policy") == [content_policy(f"{_root(http)}/store/")]
    assert "live.example" not in got.headers["link"]  # only the memento's own Link
    assert not got.cookies
    kept = {
        "content-type": "text/html; charset=utf-8",
        "etag": '"v1"',
        "last-modified": "Wed, 01 May 2024 08:00:00 GMT",
    }
    assert {name: got.headers[name] for name in kept} == kept


def test_a_memento_serves_the_byte_range_asked(http: httpx.Client) -> None:
    """A player seeks in a replayed video by ranges: a 206 of the bytes asked, a 416 past the
    end, the whole body where the range names another version; the archived Accept-Ranges
    is the origin's, not this server's, so it is served under a name of its own."""
    path = f"/store/{_stamp(T0)}id_/{VIDEO}"
    whole = http.get(path)
    assert whole.status_code == 200 and whole.content == CLIP
    assert whole.headers["accept-ranges"] == "bytes"
    assert whole.headers["x-archive-orig-accept-ranges"] == "none"
    part = http.get(path, headers={"range": "bytes=1000-"})
    assert part.status_code == 206 and part.content == CLIP[1000:]
    assert part.headers["content-range"] == f"bytes 1000-1023/{len(CLIP)}"
    assert part.headers["content-length"] == "24" and part.headers["memento-datetime"]
    assert part.headers["content-type"] == "video/mp4"
    tail = http.get(path, headers={"range": "bytes=-10", "if-range": '"clip"'})
    assert tail.status_code == 206 and tail.content == CLIP[-10:]
    past = http.get(path, headers={"range": f"bytes={len(CLIP)}-"})
    assert past.status_code == 416 and past.content == b""
    assert past.headers["content-range"] == f"bytes */{len(CLIP)}"
    changed = http.get(path, headers={"range": "bytes=0-9", "if-range": '"another"'})
    assert changed.status_code == 200 and changed.content == CLIP
    moved = http.get(f"/store/{_stamp(T0)}id_/{OLD}", headers={"range": "bytes=0-1"})
    assert moved.status_code == 301 and "content-range" not in moved.headers  # as archived


def test_a_redirect_to_a_dotted_url_points_at_its_memento_as_a_browser_reads_it(http: httpx.Client) -> None:
    """A Location with dot segments is sent percent-encoded after the memento's prefix: a
    browser resolving it stays on the target's memento, not on another page of this server."""
    got = http.get(f"/store/{_stamp(T0)}id_/{JUMP}")
    assert got.status_code == 302
    where = browser_path(str(got.url), got.headers["location"])
    prefix = f"/store/{_stamp(T0)}id_/"
    assert where.startswith(prefix) and unquote(where[len(prefix) :]) == "http://evil.test/../../store/x"


def test_a_timestamp_redirects_to_the_closest_memento(http: httpx.Client) -> None:
    got = http.get(f"/store/20240502/{PAGE}")
    assert got.status_code == 302
    assert got.headers["location"].endswith(f"/store/{_stamp(T0 + timedelta(days=1))}id_/{PAGE}")


def test_a_redirect_points_at_its_targets_memento(http: httpx.Client) -> None:
    moved = http.get(f"/store/{_stamp(T0)}id_/{OLD}")
    assert moved.status_code == 301
    target = moved.headers["location"]
    assert target.endswith("id_/http://example.com/new")
    assert http.get(target).content == b"<p>New home</p>"


def test_what_is_not_there(http: httpx.Client) -> None:
    assert http.get(f"/store/{_stamp(T0)}id_/https://example.com/never").status_code == 404
    assert http.get(f"/store/{_stamp(T0)}id_/ftp://example.com/x").json()["parameter"] == "url"
    assert http.get(f"/store/yesterday/{PAGE}").status_code == 404
    assert http.get(f"/other/{_stamp(T0)}id_/{PAGE}").status_code == 404


def test_cdx_toolkit_fetches_the_content(http: httpx.Client) -> None:
    base = str(http.base_url).rstrip("/")
    cdx = cdx_toolkit.CDXFetcher(source=f"{base}/store/cdx", wb=f"{base}/store")
    captures = list(cdx.iter(PAGE))
    assert [c["timestamp"] for c in captures] == [_stamp(T0), _stamp(T0 + timedelta(days=1))]
    assert captures[1].content == b"<html><body><p>Day 1 news</p></body></html>"  # sent as http%3A//...


def test_pywb_replays_a_page_from_this_cdx_server(http: httpx.Client, tmp_path: Path) -> None:
    cdx = f"cdx+{str(http.base_url).rstrip('/')}/store/cdx"
    with running_pywb_remote(cdx, tmp_path / "pywb") as pywb:
        raw = pywb.replay_raw(PAGE, _stamp(T0))
        assert raw.status_code == 200, pywb.log_tail()
        assert raw.content == b"<html><body><p>Day 0 news</p></body></html>"
        rewritten = pywb.client.get(f"{pywb.base_url}/{pywb.collection}/{_stamp(T0)}mp_/{PAGE}")
        assert rewritten.status_code == 200 and b"Day 0 news" in rewritten.content, pywb.log_tail()
        listed = pywb.cdx(PAGE)
        assert [c["timestamp"] for c in listed] == [_stamp(T0), _stamp(T0 + timedelta(days=1))]


def test_the_timegate_chooses_by_accept_datetime(http: httpx.Client) -> None:
    for path in (f"/store/timegate/{PAGE}", f"/store/{PAGE}"):
        asked = http.get(path, headers={"Accept-Datetime": "Wed, 01 May 2024 09:00:00 GMT"})
        assert asked.status_code == 302 and asked.headers["vary"] == "accept-datetime"
        assert asked.headers["location"].endswith(f"/store/{_stamp(T0)}id_/{PAGE}")
        assert f'<{PAGE}>; rel="original"' in asked.headers["link"]
        assert f'datetime="{format_datetime(T0, usegmt=True)}"' in asked.headers["link"]
        latest = http.head(path)
        assert latest.headers["location"].endswith(f"/store/{_stamp(T0 + timedelta(days=1))}id_/{PAGE}")
    bad = http.get(f"/store/timegate/{PAGE}", headers={"Accept-Datetime": "last week"})
    assert bad.status_code == 400 and bad.json()["parameter"] == "Accept-Datetime"
    assert http.get("/store/timegate/https://example.com/never").status_code == 404


def test_the_timemap_lists_every_memento(http: httpx.Client) -> None:
    link = http.get(f"/store/timemap/link/{PAGE}")
    assert link.headers["content-type"].startswith("application/link-format")
    entries = link.text.strip().split(",\n")
    assert entries[0] == f'<{PAGE}>; rel="original"' and 'rel="timegate"' in entries[1]
    assert f'from="{format_datetime(T0, usegmt=True)}"' in entries[2]
    days = [T0, T0 + timedelta(days=1)]
    dated = [(f"{http.base_url}/store/{_stamp(t)}id_/{PAGE}", format_datetime(t, usegmt=True)) for t in days]
    assert entries[3:] == [f'<{uri}>; rel="memento"; datetime="{date}"' for uri, date in dated]
    as_json = http.get(f"/store/timemap/json/{PAGE}").json()
    assert as_json["original_uri"] == PAGE
    assert [m["datetime"] for m in as_json["mementos"]["list"]] == [
        t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in days
    ]
    assert http.get(f"/store/timemap/xml/{PAGE}").status_code == 404


def test_a_timemap_cut_by_its_limit_says_so(http: httpx.Client, monkeypatch: pytest.MonkeyPatch) -> None:
    import web_index.server._timemaps as timemaps
    from web_index.server._cdx import TRUNCATED_HEADER

    for form in ("link", "json"):
        whole = http.get(f"/store/timemap/{form}/{PAGE}")
        assert TRUNCATED_HEADER not in whole.headers
        monkeypatch.setattr(timemaps, "MAX_LIMIT", 2)  # as many as there are: complete
        assert TRUNCATED_HEADER not in http.get(f"/store/timemap/{form}/{PAGE}").headers
        monkeypatch.setattr(timemaps, "MAX_LIMIT", 1)  # fewer: the oldest, and the header
        cut = http.get(f"/store/timemap/{form}/{PAGE}")
        assert cut.status_code == 200 and cut.headers[TRUNCATED_HEADER] == "1"
        if form == "link":
            assert cut.text.count('rel="memento"') == 1 and f"/store/{_stamp(T0)}id_/" in cut.text
        else:
            assert [m["datetime"] for m in cut.json()["mementos"]["list"]] == [
                T0.strftime("%Y-%m-%dT%H:%M:%SZ")
            ]
        monkeypatch.undo()


def test_pywb_replays_through_the_memento_protocol(http: httpx.Client, tmp_path: Path) -> None:
    source = f"memento+{str(http.base_url).rstrip('/')}/store/"
    with running_pywb_remote(source, tmp_path / "pywb") as pywb:
        raw = pywb.replay_raw(PAGE, _stamp(T0 + timedelta(hours=1)))  # asked by TimeGate
        assert raw.status_code == 200, pywb.log_tail()
        assert raw.content == b"<html><body><p>Day 0 news</p></body></html>"
        timemap = pywb.client.get(f"{pywb.base_url}/{pywb.collection}/timemap/link/{PAGE}")
        assert timemap.status_code == 200 and timemap.text.count('rel="memento"') == 2, pywb.log_tail()
        # A player seeking through pywb in a video that lives only here.
        seek = pywb.client.get(pywb.replay_url(VIDEO, _stamp(T0)), headers={"range": "bytes=1000-"})
        assert seek.status_code == 206 and seek.content == CLIP[1000:], pywb.log_tail()
        assert seek.headers["content-range"] == f"bytes 1000-1023/{len(CLIP)}"


def test_a_policy_names_a_collection_s_paths_but_on_an_ipv6_literal() -> None:
    """CSP has no form for an IPv6 literal (a browser drops such a source and loads nothing):
    a server reached at one gets 'self', every other a collection's own paths."""
    from web_index.archive import collection_sources

    assert collection_sources("http://127.0.0.1:8080", "/store/") == "http://127.0.0.1:8080/store/"
    assert collection_sources("https://archive.example", "/ui/store/") == "https://archive.example/ui/store/"
    assert collection_sources("http://[::1]:8080", "/store/") == "'self'"
