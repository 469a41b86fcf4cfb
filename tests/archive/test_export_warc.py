"""export-warc: WARC/1.1 out of the store, checked by warcio (the reference
reader) and by importing it back."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import shutil
import tempfile
import zlib
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from warcio.archiveiterator import ArchiveIterator
from warcio.statusandheaders import StatusAndHeaders

from tests.archive.test_import_warc import T0, Warc, _iso
from web_index import WebIndex
from web_index.archive import export_warcs, import_warcs
from web_index.cli import app
from web_index.models import AttemptMetadata, Page, RecordType, Response, SimplePageQuery

runner = CliRunner()
URLS = [
    "https://a.example.com/x",
    "https://a.example.com/x/y?q=1",
    "http://b.example.org/",
    "http://127.0.0.1/p",
]
# Header values as the wire has them: Latin-1 text without line breaks.
_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=12)
_NAMES = st.sampled_from(["content-type", "x-a", "server", "etag", "content-length", "content-encoding",
                          "transfer-encoding", "set-cookie", "location"])  # fmt: skip
_VALUES = {
    "content-encoding": st.sampled_from(["gzip", "deflate", "br", "identity", "gzip, br"]),
    "transfer-encoding": st.sampled_from(["chunked", "gzip, chunked"]),
    "content-length": st.integers(0, 99).map(str),
    # The wire trims spaces around a value (RFC 9110), so none are generated.
    "set-cookie": st.lists(_TEXT.map(str.strip).filter(bool), min_size=1, max_size=3).map("\n".join),
}


@st.composite
def headers(draw: st.DrawFn) -> dict[str, str]:
    names = draw(st.lists(_NAMES, unique=True, max_size=5))
    return {n: draw(_VALUES.get(n, _TEXT.map(str.strip))) for n in names}


@st.composite
def attempts(draw: st.DrawFn, method: str) -> tuple[Any, ...]:
    url = draw(st.sampled_from(URLS))
    start = datetime(2024, 7, 31, 23, 59, tzinfo=UTC) + timedelta(microseconds=draw(st.integers(0, 10**8)))
    hops = draw(st.integers(1, 3))
    responses = []
    for i in range(hops):
        responses.append(
            Response(
                url=url,
                request_url=url if i == hops - 1 else f"{url}{'&' if '?' in url else '?'}hop={i}",
                status_code=draw(st.integers(100, 599)),
                headers=draw(headers()),
                timestamp=start + timedelta(microseconds=i * 1000 + draw(st.integers(0, 999))),
                data=None
                if method == "head"
                else draw(st.sampled_from([b"", b"same", b"\x00\xff" * 40]) | st.binary()),
                is_final=i == hops - 1,
                fetcher_name="t",
                fetcher_version="1",
                fetcher_calibre=10,
            )
        )
    meta = AttemptMetadata(
        state="success", url=url, fetcher_name="t", fetcher_version="1", fetcher_calibre=10
    )
    return (method, url, start, meta, responses)


def captured(index: WebIndex, type: RecordType) -> Counter[tuple[Any, ...]]:
    """Every stored response as (URL, status, headers, body, time), counted."""
    out: Counter[tuple[Any, ...]] = Counter()
    for page in index.scan(type):
        assert isinstance(page, Page)
        for r in page.responses:
            out[(r.request_url, r.status_code, tuple(sorted(r.headers.items())), r.data, r.timestamp)] += 1
    return out


def _one(
    url: str, at: datetime, body: bytes, headers: dict[str, str] | None = None
) -> tuple[AttemptMetadata, list[Response]]:
    meta = AttemptMetadata(
        state="success", url=url, fetcher_name="t", fetcher_version="1", fetcher_calibre=10
    )
    fields = {"content-type": "text/plain", **(headers or {})}
    response = Response(url=url, request_url=url, status_code=200, headers=fields,
                        timestamp=at, data=body, is_final=True, fetcher_name="t", fetcher_version="1",
                        fetcher_calibre=10)  # fmt: skip
    return meta, [response]


def _same_instant() -> list[tuple[Any, ...]]:
    """Two captures of a URL in one microsecond, both stored decoded, then each body again."""
    url, zipped = URLS[0], {"content-encoding": "gzip"}
    moments = [(T0, b"one"), (T0, b"two"), (T0 + timedelta(days=1), b"one"), (T0 + timedelta(days=2), b"two")]
    return [("get", url, at, *_one(url, at, body, zipped)) for at, body in moments]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(gets=_same_instant(), heads=[], flush=False, roll=1 << 30)
@given(
    gets=st.lists(attempts("get"), max_size=8),
    heads=st.lists(attempts("head"), max_size=3),
    flush=st.booleans(),
    roll=st.sampled_from([1, 1 << 30]),
)
def test_import_of_export_gives_back_every_response(
    gets: list[tuple[Any, ...]], heads: list[tuple[Any, ...]], flush: bool, roll: int
) -> None:
    work = Path(tempfile.mkdtemp())
    try:
        with WebIndex(work / "a", create=True) as source, WebIndex(work / "b", create=True) as copy:
            if gets or heads:
                source.insert_many(gets + heads)
            if flush:
                source.flush()
            for kind in (RecordType.GET, RecordType.HEAD):
                report = export_warcs(source, work / "out", type=kind, name=kind.value, max_file_bytes=roll)
                assert report.attempts == len(gets if kind is RecordType.GET else heads)
                _check_with_warcio(report.files, report.cdxj)
                first = import_warcs(copy, report.files)
                assert first.problems == [] and first.stored == report.responses + report.revisits
                assert import_warcs(copy, report.files).stored == 0  # same record ids: nothing twice
                assert captured(copy, kind) == captured(source, kind)
    finally:
        shutil.rmtree(work)


def _check_with_warcio(files: list[Path], cdxj: Path | None) -> None:
    """Every record's digests verify in warcio; each revisit names (``WARC-Refers-To``) a
    response of the URI, date and payload it refers to; the CDXJ is sorted and each of its lines
    points at the gzip member of the record it names."""
    assert cdxj is not None
    named_by = ("WARC-Target-URI", "WARC-Date", "WARC-Payload-Digest")
    responses, revisits = {}, []
    for path in files:
        with path.open("rb") as fh:
            records = [(r.rec_type, r.rec_headers) for r in ArchiveIterator(fh, check_digests="raise")]
        assert records[0][0] == "warcinfo" and "warcinfo" not in [kind for kind, _ in records[1:]]
        for kind, head in records:
            if kind == "response":
                responses[head.get_header("WARC-Record-ID")] = [head.get_header(f) for f in named_by]
            elif kind == "revisit":
                refers = ("WARC-Refers-To-Target-URI", "WARC-Refers-To-Date", "WARC-Payload-Digest")
                revisits.append((head.get_header("WARC-Refers-To"), [head.get_header(f) for f in refers]))
    for named, refers in revisits:
        assert responses[named] == refers
    lines = cdxj.read_bytes().splitlines()
    assert lines == sorted(lines)
    folder = files[0].parent if files else cdxj.parent
    for line in lines:
        _key, stamp, raw = line.decode().split(" ", 2)
        fields = json.loads(raw)
        data = (folder / fields["filename"]).read_bytes()
        start, length = int(fields["offset"]), int(fields["length"])
        member = zlib.decompressobj(31)
        record = member.decompress(data[start : start + length])
        assert member.eof and not member.unused_data  # exactly one gzip member
        head = record.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        assert f"WARC-Target-URI: {fields['url']}\r\n" in head
        assert stamp == head.split("WARC-Date: ")[1][:19].replace("-", "").replace(":", "").replace("T", "")
        assert fields["mime"] == "warc/revisit" or "WARC-Type: response" in head


def test_filters_and_rolling(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        for n, url in enumerate(URLS * 3):
            index.insert(
                "get", url, T0 + timedelta(days=20 * n), *_one(url, T0 + timedelta(days=20 * n), bytes([n]))
            )
        every = export_warcs(index, tmp_path / "all", max_file_bytes=1500)
        only_a = export_warcs(index, tmp_path / "a", domain="www.example.com")
        prefix = export_warcs(index, tmp_path / "p", url_prefix="https://A.example.com/x/")
        window = export_warcs(index, tmp_path / "w", start=T0 + timedelta(days=30), end="20240930")
    assert every.attempts == 12 and len(every.files) > 3
    assert [json.loads(line.split(" ", 2)[2])["url"] for line in only_a.cdxj.read_text().splitlines()] == (
        [URLS[0]] * 3 + [URLS[1]] * 3  # the SURT order: com,example,a)/x then com,example,a)/x/y
    )
    assert {json.loads(line.split(" ", 2)[2])["url"] for line in prefix.cdxj.read_text().splitlines()} == {
        URLS[1]
    }
    assert window.attempts == 2  # days 40 and 60 after 2024-08-01; 80 is past September


def test_import_decodes_bodies_as_the_fetchers_store_them(tmp_path: Path) -> None:
    words = [b"%x" % (n * 2654435761 % 4099) for n in range(8000)]  # text that compresses ~2:1
    page = b"<p>" + b" ".join(words) + b"</p>"
    packed = gzip.compress(page)
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (packed[:100], packed[100:])) + b"0\r\n\r\n"
    broken = packed[: len(packed) // 2] + b"\xff" * 40 + packed[len(packed) // 2 :]
    w = Warc()
    fields = [("Content-Type", "text/html"), ("Content-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]
    w.capture("https://example.com/both", chunked, headers=fields)
    w.capture("https://example.com/br", b"\x1b\x02brotli", headers=[("Content-Encoding", "br")])
    w.capture("https://example.com/broken", broken, headers=[("Content-Encoding", "gzip")])
    w.capture("https://example.com/plain-chunked", b"12 apples", headers=[("Transfer-Encoding", "chunked")])
    path = w.save(tmp_path / "a.warc.gz")
    with WebIndex(tmp_path / "s", create=True) as index:
        assert import_warcs(index, [path]).stored == 4
        both, br, bad, plain = (
            index.query([SimplePageQuery(url=f"https://example.com/{p}")])[0]
            for p in ("both", "br", "broken", "plain-chunked")
        )
        meta = index.query([SimplePageQuery(url="https://example.com/broken", type="get-metadata")])[0]
    assert isinstance(both, Page) and both.data == page
    assert both.headers["content-encoding"] == "gzip" and both.headers["transfer-encoding"] == "chunked"
    assert (
        isinstance(br, Page) and br.data == b"\x1b\x02brotli"
    )  # a coding web-index does not decode: as sent
    # What decoded before the break is kept (zlib may pass some garbage before it notices).
    assert isinstance(bad, Page) and bad.data[:4096] == page[:4096] and len(bad.data) < len(page)
    assert (
        isinstance(meta, AttemptMetadata) and meta.logs is not None and "content-encoding gzip" in meta.logs
    )
    assert isinstance(plain, Page) and plain.data == b"12 apples"  # not chunked after all


def test_exported_http_messages_are_consistent(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        url = "https://example.com/"
        fields = {
            "content-encoding": "gzip",
            "content-length": "17",
            "transfer-encoding": "chunked",
            "x": "1",
        }
        meta, (response,) = _one(url, T0, b"decoded body")
        index.insert("get", url, T0, meta, [Response(**{**_fields(response), "headers": fields})])
        report = export_warcs(index, tmp_path / "out")
    with report.files[0].open("rb") as fh:
        bodies, http = [], {}
        for record in ArchiveIterator(fh):
            if record.rec_type == "response":
                bodies.append(record.content_stream().read())
                http = dict(record.http_headers.headers)
    assert bodies == [b"decoded body"]  # nothing left to decode
    assert http == {
        "x-web-index-original-content-encoding": "gzip",
        "x-web-index-original-content-length": "17",
        "x-web-index-original-transfer-encoding": "chunked",
        "x": "1",
        "content-length": "12",
    }


def _fields(response: Response) -> dict[str, Any]:
    return {f: getattr(response, f) for f in response.__struct_fields__}


def test_cli_export_warc(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    with WebIndex(store, create=True) as index:
        index.insert("get", URLS[0], T0, *_one(URLS[0], T0, b"x"))
    done = runner.invoke(
        app, ["export-warc", str(tmp_path / "out"), "--store", store, "--domain", "example.com"]
    )
    assert done.exit_code == 0, done.output
    assert "1 attempt: 1 response, 0 revisits in 1 file" in done.stderr
    again = runner.invoke(app, ["export-warc", str(tmp_path / "out"), "--store", store])
    assert again.exit_code == 2 and "web-index-00000.warc.gz exists" in again.stderr
    none = runner.invoke(
        app, ["export-warc", str(tmp_path / "o2"), "--store", store, "--domain", "nowhere.org"]
    )
    assert none.exit_code == 1
    bad = runner.invoke(app, ["export-warc", str(tmp_path / "o3"), "--store", store, "--from", "yesterday"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --from: ")  # the option typed


def test_a_revisit_finds_its_payload_among_captures_of_the_same_second(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "a", create=True) as source, WebIndex(tmp_path / "b", create=True) as copy:
        source.insert("get", URLS[0], T0, *_one(URLS[0], T0, b"first body"))
        source.insert("get", URLS[0], T0, *_one(URLS[0], T0, b""))  # same URL, same instant
        source.insert("get", URLS[1], T0, *_one(URLS[1], T0, b"first body"))  # a revisit of the first
        report = export_warcs(source, tmp_path / "out")
        assert report.revisits == 1
        import_warcs(copy, report.files)
        assert captured(copy, RecordType.GET) == captured(source, RecordType.GET)


@pytest.mark.parametrize("bulk", [True, False])
def test_a_revisit_gets_the_body_it_names_when_captures_share_an_instant(tmp_path: Path, bulk: bool) -> None:
    """Two captures of one URL at the same microsecond, both stored decoded (``content-encoding:
    gzip``): a later capture of either body is written as a revisit naming the one it repeats, and
    the import gives it that body, not whichever of the two the date finds first."""
    items = _same_instant()
    with WebIndex(tmp_path / "a", create=True) as source, WebIndex(tmp_path / "b", create=True) as copy:
        source.insert_many(items)
        report = export_warcs(source, tmp_path / "out")
        assert report.revisits == 2
        _check_with_warcio(report.files, report.cdxj)
        import_warcs(copy, report.files, bulk=bulk)
        assert captured(copy, RecordType.GET) == captured(source, RecordType.GET)


def test_an_iri_is_written_as_a_uri(tmp_path: Path) -> None:
    iri = "http://example.com/caf\u00e9 menu?b=\u00fc"
    with WebIndex(tmp_path / "s", create=True) as index:
        index.insert("get", iri, T0, *_one(iri, T0, b"menu"))
        report = export_warcs(index, tmp_path / "out")
    with report.files[0].open("rb") as fh:
        targets = {
            r.rec_headers.get_header("WARC-Target-URI")
            for r in ArchiveIterator(fh)
            if r.rec_type != "warcinfo"
        }
    assert report.cdxj is not None
    (line,) = report.cdxj.read_text().splitlines()
    assert targets == {"http://example.com/caf%C3%A9%20menu?b=%C3%BC"}
    assert json.loads(line.split(" ", 2)[2])["url"] == "http://example.com/caf%C3%A9%20menu?b=%C3%BC"


def test_a_revisit_of_a_decoded_capture(tmp_path: Path) -> None:
    page = b"<p>" + b"gzip me " * 100 + b"</p>"
    packed = gzip.compress(page)
    url = "https://example.com/"
    w = Warc()
    w.capture(url, packed, headers=[("Content-Type", "text/html"), ("Content-Encoding", "gzip")])
    w.capture(url, b"plain", when=T0)  # the same second, stored as sent
    http = StatusAndHeaders("200 OK", [("Content-Encoding", "gzip")], protocol="HTTP/1.1")
    digest = "sha1:" + base64.b32encode(hashlib.sha1(packed).digest()).decode()  # of the wire's payload
    record = w.writer.create_revisit_record(
        url, digest=digest, refers_to_uri=url, refers_to_date=_iso(T0), http_headers=http
    )
    record.rec_headers.replace_header("WARC-Date", _iso(T0 + timedelta(days=1)))
    w.writer.write_record(record)
    with WebIndex(tmp_path / "s", create=True) as index:
        assert import_warcs(index, [w.save(tmp_path / "a.warc.gz")]).stored == 3
        latest = index.query([SimplePageQuery(url=url)])[0]
    assert isinstance(latest, Page) and latest.data == page  # the decoded capture, not the plain one


@given(
    ident=st.text(max_size=60),
    kind=st.sampled_from(["response", "request", "revisit", "metadata"]),
    moment=st.datetimes(
        min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    offset=st.integers(-14 * 60, 14 * 60),
)
def test_record_ids_and_dates_are_uuid5_and_the_iso_form(
    ident: str, kind: str, moment: datetime, offset: int
) -> None:
    import uuid
    from datetime import timezone

    from web_index.archive._warc_write import _NAMESPACE, record_id, warc_date

    assert record_id(ident, kind) == f"<urn:uuid:{uuid.uuid5(_NAMESPACE, f'{kind}:{ident}')}>"
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S") + (
        f".{moment.microsecond:06d}" if moment.microsecond else ""
    )
    elsewhere = moment.astimezone(timezone(timedelta(minutes=offset)))
    assert warc_date(moment) == warc_date(elsewhere) == stamp + "Z"
