"""The Resource API over real HTTP: ``/{coll}/resource`` and ``/{coll}/resource-post`` answer
one WARC record, read by warcio with its digests checked, holding the capture closest to the
question (as ``closest_capture`` finds it, and as a small reference of its own says)."""

from __future__ import annotations

import io
import shutil
import socket
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import surt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from tests.server.serving import serving
from web_index import WebIndex
from web_index.archive import capture_ident, closest_capture, export_warcs, parse_cdx_query, record_id
from web_index.archive._http import parse_http_response, wire_headers
from web_index.models import AttemptMetadata, Page, RecordType, Response
from web_index.server._resource import MAX_BODY
from web_index.urls import domain_of, target_uri

T0 = datetime(2024, 5, 1, 8, 30, tzinfo=UTC)
PAGE = "https://example.com/news?id=7"
OLD, NEW = "http://example.com/old", "http://example.com/new"
# Two of them are one SURT key: the scheme and "www." do not count in matching.
URLS = ["https://example.com/a", "http://www.example.com/a", "https://example.com/b?x=1", "http://other.org/"]
HOPS = ["https://example.com/hop", "http://other.org/next"]  # only ever later responses of a chain
_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=12)
_NAMES = st.sampled_from(["content-type", "x-a", "server", "content-length", "content-encoding",
                          "transfer-encoding", "set-cookie", "location"])  # fmt: skip
_VALUES = {
    "content-encoding": st.sampled_from(["gzip", "br", "identity"]),
    "transfer-encoding": st.just("chunked"),
    "content-length": st.integers(0, 99).map(str),
    "set-cookie": st.lists(_TEXT.map(str.strip).filter(bool), min_size=1, max_size=2).map("\n".join),
}


def _response(url: str, request_url: str, at: datetime, status: int, headers: dict[str, str],
              body: bytes | None, *, last: bool = True) -> Response:  # fmt: skip
    return Response(
        url=url, request_url=request_url, status_code=status, headers=headers, timestamp=at, data=body,
        is_final=last, fetcher_name="t", fetcher_version="1", fetcher_calibre=10,
    )  # fmt: skip


def _meta(url: str) -> AttemptMetadata:
    return AttemptMetadata(
        state="success", url=url, fetcher_name="t", fetcher_version="1", fetcher_calibre=10
    )


def _stamp(t: datetime) -> str:
    return t.strftime("%Y%m%d%H%M%S")


def _records(answer: httpx.Response) -> list[Any]:
    """The records of an answer, each read to its end so that warcio checks its digests."""
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/warc-record"
    out = []
    for record in ArchiveIterator(io.BytesIO(answer.content), check_digests="raise"):
        record.payload = record.raw_stream.read()  # as stored: no content coding undone
        out.append(record)
    return out


def _check(answer: httpx.Response, expected: Response) -> Any:
    """``answer`` is one valid WARC response record of ``expected``: its URL,
    time, status, header fields (as an HTTP message carrying the body has them)
    and payload, both digests (checked by warcio) and the memento headers."""
    (record,) = _records(answer)
    assert record.rec_type == "response"
    head = record.rec_headers
    assert head.protocol == "WARC/1.1"
    assert head.get_header("WARC-Target-URI") == target_uri(expected.request_url)
    when = datetime.fromisoformat(head.get_header("WARC-Date").replace("Z", "+00:00"))
    assert when == expected.timestamp
    assert head.get_header("WARC-Payload-Digest") is not None or expected.data is None
    assert head.get_header("WARC-Block-Digest") is not None
    start = answer.content.index(b"\r\n\r\n") + 4
    block = answer.content[start : start + int(head.get_header("Content-Length"))]
    status, fields, body = parse_http_response(block)
    assert status == expected.status_code and status == int(record.http_headers.get_statuscode())
    assert fields == wire_headers(expected.headers, expected.data)
    assert body == record.payload == (expected.data or b"")
    moment = expected.timestamp.replace(microsecond=0)
    assert answer.headers["archive-source-coll"] == "store"
    assert answer.headers["memento-datetime"] == format_datetime(moment, usegmt=True)
    assert answer.headers["link"].startswith(f'<{target_uri(expected.request_url)}>; rel="original"')
    return record


@st.composite
def chains(draw: st.DrawFn, method: str) -> tuple[Any, ...]:
    url = draw(st.sampled_from(URLS))
    start = T0 + timedelta(
        seconds=draw(st.integers(0, 10 * 86400)), microseconds=draw(st.integers(0, 10**6 - 1))
    )
    hops = draw(st.integers(1, 3))
    # A chain's later responses are found only in the partition of its start,
    # and only under URLs no attempt starts at (test_a_hop_to_a_url_crawled_itself).
    near = [u for u in HOPS if domain_of(u) == domain_of(url)]
    targets = [url, *draw(st.lists(st.sampled_from(near), min_size=hops - 1, max_size=hops - 1))]
    responses = []
    for i, target in enumerate(targets):
        names = draw(st.lists(_NAMES, unique=True, max_size=4))
        fields = {n: draw(_VALUES.get(n, _TEXT.map(str.strip))) for n in names}
        last = i == hops - 1
        status = draw(st.sampled_from([200, 404, 500])) if last else draw(st.sampled_from([301, 302, 307]))
        body = None if method == "head" else draw(st.sampled_from([b"", b"same"]) | st.binary(max_size=64))
        at = start + timedelta(seconds=i * draw(st.integers(0, 2)), microseconds=i)
        responses.append(_response(url, target, at, status, fields, body, last=last))
    return (method, url, start, _meta(url), responses)


def _stored(index: WebIndex, kind: RecordType) -> list[Response]:
    out = []
    for page in index.scan(kind):
        assert isinstance(page, Page)
        out += page.responses
    return out


def _reference(stored: list[Response], url: str, closest: datetime | None) -> list[Response]:
    """Every response as close as any to ``closest`` (the latest without it) among those of ``url``."""
    key = surt.surt(url)
    mine = [r for r in stored if surt.surt(target_uri(r.request_url)) == key]
    if not mine:
        return []
    when = closest or datetime(9999, 1, 1, tzinfo=UTC)
    distance = {id(r): abs(r.timestamp.replace(microsecond=0) - when) for r in mine}
    nearest = min(distance.values())
    return [r for r in mine if distance[id(r)] == nearest]


@st.composite
def questions(draw: st.DrawFn) -> tuple[str, str | None, str, str]:
    url = draw(st.sampled_from([*URLS, *HOPS, "https://example.com/never"]))
    moment = T0 + timedelta(seconds=draw(st.integers(-86400, 11 * 86400)))
    closest = draw(st.none() | st.integers(4, 14).map(lambda n: _stamp(moment)[:n]))
    kind = draw(st.sampled_from(["get", "head"]))
    how = draw(st.sampled_from(["resource", "post-url", "post-path"]))
    return url, closest, kind, how


def _ask(http: httpx.Client, url: str, closest: str | None, kind: str, how: str) -> httpx.Response:
    params = {} if closest is None else {"closest": closest}
    if how == "resource":
        return http.get("/store/resource", params={"url": url, "type": kind, **params})
    parts = urlsplit(url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    head = f"{kind.upper()} {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: t\r\n\r\n".encode()
    if how == "post-url":
        params["url"] = url
    return http.post("/store/resource-post", params=params, content=head)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gets=st.lists(chains("get"), min_size=1, max_size=6),
    heads=st.lists(chains("head"), max_size=3),
    asked=st.lists(questions(), min_size=1, max_size=8),
)
def test_the_record_is_the_closest_capture(
    gets: list[tuple[Any, ...]], heads: list[tuple[Any, ...]], asked: list[tuple[str, str | None, str, str]]
) -> None:
    work = Path(tempfile.mkdtemp())
    try:
        with WebIndex(work / "store", create=True) as index:
            index.insert_many(gets + heads)
            stored = {kind: _stored(index, kind) for kind in (RecordType.GET, RecordType.HEAD)}
            with serving(index) as http:
                for url, closest, kind, how in asked:
                    query = parse_cdx_query({"url": [url], "closest": [closest or ""], "type": [kind]})
                    found = closest_capture(index, query, source="store")
                    candidates = _reference(stored[query.type], url, query.closest)
                    answer = _ask(http, url, closest, kind, how)
                    if not candidates:
                        assert found is None and answer.status_code == 404
                        assert "no captures" in answer.json()["error"]
                        continue
                    assert found is not None and any(found.response == r for r in candidates)
                    record = _check(answer, found.response)
                    ident = capture_ident(found.request_id, found.position)
                    assert record.rec_headers.get_header("WARC-Record-ID") == record_id(ident, "response")
                    memento = 'rel="memento"' in answer.headers["link"]
                    assert memento == (kind == "get")
    finally:
        shutil.rmtree(work)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WebIndex]:
    html = {"content-type": "text/html; charset=utf-8", "x-served-by": "origin"}
    with WebIndex(tmp_path / "store", create=True) as index:
        for day in range(2):
            at = T0 + timedelta(days=day)
            body = f"<html><body><p>Day {day} news</p></body></html>".encode()
            index.insert("get", PAGE, at, _meta(PAGE), [_response(PAGE, PAGE, at, 200, html, body)])
        moved = [
            _response(OLD, OLD, T0, 301, {"location": "/new"}, b"", last=False),
            _response(OLD, NEW, T0 + timedelta(seconds=2), 200, html, b"<p>New home</p>"),
        ]
        index.insert("get", OLD, T0, _meta(OLD), moved)
        index.insert("head", PAGE, T0, _meta(PAGE), [_response(PAGE, PAGE, T0, 200, {"x-head": "1"}, None)])
        yield index


@pytest.fixture
def http(store: WebIndex) -> Iterator[httpx.Client]:
    with serving(store) as client:
        yield client


def _page(store: WebIndex, kind: str, url: str, position: int = 0, day: int = 0) -> Response:
    pages = [p for p in store.scan(kind) if isinstance(p, Page) and p.url == url]
    return sorted(pages, key=lambda p: p.timestamp)[day].responses[position]


def test_the_answer_says_where_and_when(http: httpx.Client, store: WebIndex) -> None:
    answer = http.get("/store/resource", params={"url": PAGE, "closest": _stamp(T0 + timedelta(hours=3))})
    record = _check(answer, _page(store, "get", PAGE))
    date = format_datetime(T0, usegmt=True)
    assert answer.headers["archive-source-coll"] == "store"
    assert answer.headers["memento-datetime"] == date
    assert answer.headers["link"] == (
        f'<{PAGE}>; rel="original", <{http.base_url}/store/{_stamp(T0)}id_/{PAGE}>; rel="memento"; '
        f'datetime="{date}"'
    )
    memento = answer.headers["link"].split("<")[2].split(">")[0]
    assert http.get(memento).content == record.payload
    halfway = http.get("/store/resource", params={"url": PAGE, "closest": _stamp(T0 + timedelta(hours=12))})
    assert halfway.content == answer.content  # of equally close ones, the earlier
    latest = http.get("/store/resource", params={"url": PAGE})  # no closest: the latest
    _check(latest, _page(store, "get", PAGE, day=1))
    again = http.get("/store/resource", params={"url": PAGE})
    assert again.content == latest.content  # the same id, the same bytes
    assert http.head("/store/resource", params={"url": PAGE}).status_code == 200


def test_each_response_of_a_redirect_chain(http: httpx.Client, store: WebIndex) -> None:
    moved = _check(
        http.get("/store/resource", params={"url": OLD, "closest": "2024"}), _page(store, "get", OLD)
    )
    assert (
        moved.http_headers.get_statuscode() == "301" and moved.http_headers.get_header("location") == "/new"
    )
    new = _check(http.get("/store/resource", params={"url": NEW}), _page(store, "get", OLD, position=1))
    assert new.payload == b"<p>New home</p>"
    posted = http.post("/store/resource-post", content=b"GET /new HTTP/1.1\r\nHost: example.com\r\n\r\n")
    assert posted.content == http.get("/store/resource", params={"url": NEW}).content


def test_a_head_record_by_post(http: httpx.Client, store: WebIndex) -> None:
    head = b"HEAD /news?id=7 HTTP/1.1\r\nHost: example.com\r\nUser-Agent: t\r\n\r\n"
    record = _check(http.post("/store/resource-post", content=head), _page(store, "head", PAGE))
    assert record.http_headers.get_header("x-head") == "1" and record.payload == b""
    assert http.post("/store/resource-post", params={"url": PAGE}, content=b"HEAD /\n\n").status_code == 200
    as_get = http.post("/store/resource-post", content=head.replace(b"HEAD", b"GET", 1))
    assert _check(as_get, _page(store, "get", PAGE, day=1)).payload.startswith(b"<html>")
    by_type = http.get("/store/resource", params={"url": PAGE, "type": "head"})
    assert by_type.content == http.post("/store/resource-post", content=head).content
    assert 'rel="memento"' not in by_type.headers["link"]  # the id_ mementos are GET captures


def test_the_record_is_the_one_the_export_writes(http: httpx.Client, store: WebIndex, tmp_path: Path) -> None:
    report = export_warcs(store, tmp_path / "out")
    exported = {}
    for path in report.files:
        with path.open("rb") as fh:
            for r in ArchiveIterator(fh):
                if r.rec_type == "response":
                    exported[r.rec_headers.get_header("WARC-Record-ID")] = (
                        r.rec_headers,
                        r.raw_stream.read(),
                    )
    for url, closest in [(PAGE, "20240501"), (PAGE, "20240502"), (OLD, None), (NEW, None)]:
        (mine,) = _records(http.get("/store/resource", params={"url": url, "closest": closest or ""}))
        theirs, payload = exported[mine.rec_headers.get_header("WARC-Record-ID")]
        assert mine.payload == payload
        assert [h for h in theirs.headers if h[0] != "WARC-Warcinfo-ID"] == mine.rec_headers.headers


def test_what_is_not_there_or_not_asked_right(http: httpx.Client) -> None:
    never = http.get("/store/resource", params={"url": "https://example.com/never"})
    assert (
        never.status_code == 404 and "no captures for GET https://example.com/never" in never.json()["error"]
    )
    bad = http.get("/store/resource", params={"url": PAGE, "closest": "yesterday"})
    assert bad.status_code == 400 and bad.json()["parameter"] == "closest"
    assert (
        http.get("/store/resource", params={"url": PAGE, "closest": "20241341"}).json()["parameter"]
        == "closest"
    )
    assert http.get("/store/resource").json()["parameter"] == "url"
    assert http.get("/store/resource", params={"url": PAGE, "type": "post"}).json()["parameter"] == "type"
    assert http.get("/other/resource", params={"url": PAGE}).status_code == 404
    assert http.get("/store/resource", params={"url": PAGE, "from": "2025"}).status_code == 404
    for body in (
        b"",
        b"\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon\r\n\r\n",
        b"GET / HTTP/1.1 x",
    ):
        wrong = http.post("/store/resource-post", params={"url": PAGE}, content=body)
        assert wrong.status_code == 400 and wrong.json()["parameter"] == "body", body
    for head in (b"GET /news HTTP/1.1\r\n\r\n", b"GET /news HTTP/1.1\r\nHost: bad host\r\n\r\n"):
        unnamed = http.post("/store/resource-post", content=head)  # no url, and none to make of it
        assert unnamed.status_code == 400 and unnamed.json()["parameter"] == "body"
    named = http.post("/store/resource-post", params={"url": "ftp://x/"}, content=b"GET / HTTP/1.1\r\n\r\n")
    assert named.status_code == 400 and named.json()["parameter"] == "url"
    for method in (b"POST", b"PUT", b"DELETE"):
        other = http.post(
            "/store/resource-post", params={"url": PAGE}, content=method + b" / HTTP/1.1\r\n\r\n"
        )
        assert other.status_code == 404 and "GET and HEAD" in other.json()["error"]
    typed = http.post("/store/resource-post", params={"url": PAGE, "type": "head"}, content=b"GET /\r\n\r\n")
    assert typed.status_code == 400 and typed.json()["parameter"] == "type"
    assert http.get("/store/resource-post", params={"url": PAGE}).status_code == 405


def test_the_posted_body_is_capped(http: httpx.Client) -> None:
    head = f"GET {urlsplit(PAGE).path}?id=7 HTTP/1.1\r\nHost: example.com\r\nX-Pad: ".encode()
    fits = head + b"a" * (MAX_BODY - len(head) - 4) + b"\r\n\r\n"
    assert len(fits) == MAX_BODY and http.post("/store/resource-post", content=fits).status_code == 200
    declared = http.post("/store/resource-post", content=fits + b"a")
    assert declared.status_code == 413 and declared.json()["parameter"] == "body"

    def streamed() -> Iterator[bytes]:  # no Content-Length: counted as it comes
        yield head
        for _ in range(MAX_BODY // 1024 + 1):
            yield b"a" * 1024

    assert http.post("/store/resource-post", content=streamed()).status_code == 413


@pytest.mark.parametrize("where", ["buffer", "compacted"])
def test_a_hop_to_a_url_crawled_itself(tmp_path: Path, where: str) -> None:
    # A hop is a capture of its own URL, found under its SURT key wherever its chain began.
    a, b = "https://example.com/a", "https://example.com/b"
    with WebIndex(tmp_path / "store", create=True) as index:
        index.insert("get", a, T0, _meta(a), [_response(a, a, T0, 200, {}, b"a itself")])
        later = T0 + timedelta(days=1)
        chain = [
            _response(b, b, later, 301, {}, b"", last=False),
            _response(b, a, later, 200, {}, b"a via b"),
        ]
        index.insert("get", b, later, _meta(b), chain)
        if where == "compacted":
            index.flush()
            index.compact()
        with serving(index) as http:
            (record,) = _records(http.get("/store/resource", params={"url": a}))
    assert record.payload == b"a via b"  # the latest capture of a


def test_a_body_declared_too_long_is_refused_unread(http: httpx.Client) -> None:
    with socket.create_connection((http.base_url.host, http.base_url.port), timeout=5) as conn:
        conn.sendall(
            f"POST /store/resource-post?url={PAGE} HTTP/1.1\r\nHost: x\r\n"
            f"Content-Length: {100 * MAX_BODY}\r\n\r\nGET / HTTP/1.1\r\n".encode()
        )
        try:
            answer = conn.recv(4096)  # without the rest of the body, which never comes
        except TimeoutError:
            answer = b"no answer: the server waits for the body"
    assert answer.startswith(b"HTTP/1.1 413 ")
