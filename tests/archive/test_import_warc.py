"""WARC files made by warcio (the reference writer), imported into a store."""

from __future__ import annotations

import gzip
import io
import itertools
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.warcwriter import WARCWriter

from web_index import WebIndex
from web_index.archive import import_warcs
from web_index.cli import app
from web_index.errors import WarcError
from web_index.models import AttemptMetadata, Page, RecordType, SimplePageQuery, TimeAwarePageQuery

T0 = datetime(2024, 8, 1, 12, 0, 0, tzinfo=UTC)
runner = CliRunner()


def _iso(when: datetime) -> str:
    # warcio writes a naive datetime as UTC (an aware one would get "+00:00Z").
    return datetime_to_iso_date(when.astimezone(UTC).replace(tzinfo=None), use_micros=True)


class Warc:
    """A WARC written with warcio: captures, then the file's bytes."""

    def __init__(self, gzip: bool = True) -> None:
        self.buf = io.BytesIO()
        self.writer = WARCWriter(self.buf, gzip=gzip, warc_version="1.1")

    def info(self, software: str) -> None:
        self.writer.write_record(self.writer.create_warcinfo_record("x.warc.gz", {"software": software}))

    def capture(
        self,
        url: str,
        body: bytes,
        when: datetime = T0,
        status: str = "200 OK",
        headers: list[tuple[str, str]] | None = None,
        method: str = "GET",
        pair: bool = True,
    ) -> str:
        """Write the capture; return its response record's ``WARC-Record-ID``."""
        date = _iso(when)
        fields = headers if headers is not None else [("Content-Type", "text/html")]
        http = StatusAndHeaders(status, fields, protocol="HTTP/1.1")
        response = self.writer.create_warc_record(
            url,
            "response",
            payload=io.BytesIO(body),
            http_headers=http,
            warc_headers_dict={"WARC-Date": date},
        )
        rid = str(response.rec_headers.get_header("WARC-Record-ID"))
        if not pair:
            self.writer.write_record(response)
            return rid
        request = self.writer.create_warc_record(
            url,
            "request",
            payload=io.BytesIO(b""),
            http_headers=StatusAndHeaders(
                f"{method} / HTTP/1.1", [("Host", "example.com")], is_http_request=True
            ),
            warc_headers_dict={"WARC-Date": date},
        )
        self.writer.write_request_response_pair(request, response)
        return rid

    def revisit(
        self, url: str, when: datetime, refers_to: datetime, record_id: str | None = None,
        digest: str = "sha1:AAAA", refers_to_uri: str | None = None,
    ) -> None:  # fmt: skip
        """A revisit of the capture of ``refers_to_uri`` (else ``url``) at ``refers_to``
        (``record_id``: WARC-Refers-To)."""
        http = StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1")
        record = self.writer.create_revisit_record(
            url, digest=digest, refers_to_uri=refers_to_uri or url,
            refers_to_date=_iso(refers_to), http_headers=http,
        )  # fmt: skip
        record.rec_headers.replace_header("WARC-Date", _iso(when))
        if record_id is not None:
            record.rec_headers.add_header("WARC-Refers-To", record_id)
        self.writer.write_record(record)

    def other(self, kind: str, url: str, body: bytes, content_type: str) -> None:
        record = self.writer.create_warc_record(
            url, kind, payload=io.BytesIO(body), warc_content_type=content_type,
            warc_headers_dict={"WARC-Date": _iso(T0)},
        )  # fmt: skip
        self.writer.write_record(record)

    def save(self, path: Path) -> Path:
        path.write_bytes(self.buf.getvalue())
        return path


def _get(index: WebIndex, url: str, type: RecordType = RecordType.GET) -> object:
    return index.query([SimplePageQuery(url=url, type=type)])[0]


def test_each_record_type_becomes_what_the_docs_say(tmp_path: Path) -> None:
    w = Warc()
    w.info("Wget/1.21.3")
    w.capture("https://example.com/", b"<p>home</p>", headers=[("Content-Type", "text/html"), ("X-A", "1")])
    w.capture("https://example.com/head", b"", method="HEAD", when=T0 + timedelta(seconds=1))
    w.capture("https://example.com/gone", b"nope", status="404 Not Found", when=T0 + timedelta(seconds=2))
    w.revisit("https://example.com/", T0 + timedelta(days=1), refers_to=T0)
    w.other("resource", "https://example.com/shot.png", b"\x89PNG...", "image/png")
    w.other("metadata", "https://example.com/", b"outlinks: none", "application/warc-fields")
    path = w.save(tmp_path / "a.warc.gz")
    with WebIndex(tmp_path / "s") as index:
        report = import_warcs(index, [path], calibre=30)
        home = index.query([SimplePageQuery(url="https://example.com/")])[0]
        first = index.query([TimeAwarePageQuery(url="https://example.com/", timestamp=T0, not_after=T0)])[0]
        head = _get(index, "https://example.com/head", RecordType.HEAD)
        gone = _get(index, "https://example.com/gone")
        shot = _get(index, "https://example.com/shot.png")
        meta = _get(index, "https://example.com/gone", RecordType.GET_METADATA)
    assert report.stored == 5 and report.skipped == {"warcinfo": 1, "metadata": 1}
    assert isinstance(home, Page) and home.data == b"<p>home</p>"  # the revisit carries the body
    assert home.timestamp == T0 + timedelta(days=1) and home.calibre == 30  # the latest: the revisit
    assert isinstance(first, Page) and first.timestamp == T0 and first.headers["x-a"] == "1"
    assert isinstance(head, Page) and head.type is RecordType.HEAD and head.data is None
    assert isinstance(gone, Page) and gone.status_code == 404 and gone.data == b"nope"
    assert (
        isinstance(shot, Page) and shot.status_code == 200 and shot.headers == {"content-type": "image/png"}
    )
    assert isinstance(meta, AttemptMetadata)
    assert (meta.fetcher_name, meta.fetcher_version, meta.timestamp) == (
        "Wget",
        "1.21.3",
        T0 + timedelta(seconds=2),
    )


def test_importing_again_stores_nothing_twice(tmp_path: Path) -> None:
    w = Warc()
    for i in range(7):
        w.capture(f"https://example.com/{i}", b"x" * i, when=T0 + timedelta(minutes=i))
    path = w.save(tmp_path / "a.warc.gz")
    with WebIndex(tmp_path / "s") as index:
        first = import_warcs(index, [path], batch=3)
        index.flush()
        second = import_warcs(index, [path], batch=3)
        records = index.stats().records
    assert (first.stored, first.already_stored) == (7, 0)
    assert (second.stored, second.already_stored) == (0, 7)
    assert records == 14  # 7 pages, 7 metadata records


@pytest.mark.parametrize("names", ["the request names its response", "the response names its request"])
def test_a_head_request_is_matched_to_its_response_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, names: str
) -> None:
    """warcio's pairs give the request ``WARC-Concurrent-To`` its response; other writers give
    the response the request's id. Requests never answered are not held without bound."""
    monkeypatch.setattr("web_index.archive._import_run._METHODS_KEPT", 4)
    w = Warc()
    head = StatusAndHeaders("HEAD / HTTP/1.1", [("Host", "example.com")], is_http_request=True)
    for i in range(10):  # requests whose responses never come (a fetch that failed)
        w.writer.write_record(
            w.writer.create_warc_record(
                f"https://example.com/lost{i}", "request", payload=io.BytesIO(b""),
                http_headers=head, warc_headers_dict={"WARC-Date": _iso(T0)},
            )
        )  # fmt: skip
    request = w.writer.create_warc_record(
        "https://example.com/h", "request", payload=io.BytesIO(b""),
        http_headers=head, warc_headers_dict={"WARC-Date": _iso(T0)},
    )  # fmt: skip
    response = w.writer.create_warc_record(
        "https://example.com/h", "response", payload=io.BytesIO(b""),
        http_headers=StatusAndHeaders("200 OK", [("Content-Type", "text/html")], protocol="HTTP/1.1"),
        warc_headers_dict={"WARC-Date": _iso(T0)},
    )  # fmt: skip
    naming, named = (request, response) if names == "the request names its response" else (response, request)
    naming.rec_headers.add_header("WARC-Concurrent-To", named.rec_headers.get_header("WARC-Record-ID"))
    w.writer.write_record(request)
    w.writer.write_record(response)
    path = w.save(tmp_path / "a.warc.gz")
    with WebIndex(tmp_path / "s") as index:
        assert import_warcs(index, [path]).stored == 1
        head = _get(index, "https://example.com/h", RecordType.HEAD)
    assert isinstance(head, Page) and head.type is RecordType.HEAD


def test_importing_again_reads_no_http_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record the store holds is known by its WARC headers: parsing its HTTP message and
    decoding its body would be most of a re-import's time for nothing."""
    w = Warc()
    for i in range(5):
        w.capture(f"https://example.com/{i}", b"x" * i, headers=[("Content-Encoding", "identity")])
    path = w.save(tmp_path / "a.warc.gz")
    with WebIndex(tmp_path / "s") as index:
        assert import_warcs(index, [path], batch=2).stored == 5

        def parsed(block: bytes) -> object:
            raise AssertionError("an HTTP message parsed for a record already stored")

        monkeypatch.setattr("web_index.archive._import_run.parse_http_response", parsed)
        again = import_warcs(index, [path], batch=2)
    assert (again.stored, again.already_stored) == (0, 5)


@pytest.mark.parametrize("bulk", [True, False])
def test_a_problem_mid_batch_stores_what_came_before_it_only(tmp_path: Path, bulk: bool) -> None:
    w = Warc(gzip=False)
    for i in range(5):
        w.capture(f"https://example.com/{i}", b"page %d" % i, status="099 Odd" if i == 2 else "200 OK")
    path = w.save(tmp_path / "a.warc")
    with WebIndex(tmp_path / "s") as index:
        with pytest.raises(WarcError, match="status_code"):
            import_warcs(index, [path], bulk=bulk)
        index.flush()
        stored = [_get(index, f"https://example.com/{i}") is not None for i in range(5)]
        assert stored == [True, True, False, False, False]
        report = import_warcs(index, [path], bulk=bulk, skip_invalid=True)
        assert (report.stored, report.already_stored, len(report.problems)) == (2, 2, 1)


@pytest.mark.parametrize("form", ["per-record gzip", "whole-file gzip", "plain"])
def test_every_gzip_form(tmp_path: Path, form: str) -> None:
    w = Warc(gzip=form == "per-record gzip")
    for i in range(3):
        w.capture(f"https://example.com/{i}", b"body %d" % i)
    data = w.buf.getvalue()
    path = tmp_path / ("a.warc" if form == "plain" else "a.warc.gz")
    path.write_bytes(gzip.compress(data) if form == "whole-file gzip" else data)
    with WebIndex(tmp_path / "s") as index:
        assert import_warcs(index, [path]).stored == 3
        assert _get(index, "https://example.com/2").data == b"body 2"  # type: ignore[attr-defined]


def _three(tmp_path: Path, name: str = "a.warc.gz") -> tuple[Path, bytes]:
    w = Warc()
    for i in range(3):
        w.capture(f"https://example.com/{i}", b"page %d " % i * 100, pair=False)
    return w.save(tmp_path / name), w.buf.getvalue()


def test_a_truncated_file_names_the_offset_and_keeps_what_came_before(tmp_path: Path) -> None:
    path, data = _three(tmp_path)
    path.write_bytes(data[:-40])  # the last gzip member cut short
    with WebIndex(tmp_path / "s") as index:
        with pytest.raises(WarcError) as caught:
            import_warcs(index, [path])
        assert caught.value.path == str(path) and 0 < caught.value.offset < len(data)
        assert "truncated" in str(caught.value)
        assert [_get(index, f"https://example.com/{i}") is not None for i in range(3)] == [True, True, False]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (lambda raw: raw.replace(b"Content-Length: ", b"Content-Length: 9", 1), "Content-Length"),
        (lambda raw: raw.replace(b"WARC-Date: ", b"X-No-Date: ", 1), "no WARC-Date"),
        (lambda raw: raw.replace(b"HTTP/1.1 200 OK", b"GARBAGE 200 OK!", 1), "not an HTTP response"),
    ],
    ids=["wrong Content-Length", "no WARC-Date", "not HTTP"],
)
def test_a_broken_record_is_named_and_skip_invalid_goes_on(
    tmp_path: Path, damage: object, problem: str
) -> None:
    w = Warc(gzip=False)
    for i in range(3):
        w.capture(f"https://example.com/{i}", b"page %d" % i)
    bad = tmp_path / "bad.warc"
    bad.write_bytes(damage(w.buf.getvalue()))  # type: ignore[operator]
    good, _ = _three(tmp_path, "good.warc.gz")
    with WebIndex(tmp_path / "s") as index:
        with pytest.raises(WarcError, match=problem):
            import_warcs(index, [bad, good])
        report = import_warcs(index, [bad, good], skip_invalid=True)
        assert report.problems and problem in str(report.problems[0])
        assert str(report.problems[0]).startswith(f"{bad}@")
        assert _get(index, "https://example.com/2") is not None  # good.warc.gz was read after it


def test_the_command(tmp_path: Path) -> None:
    path, data = _three(tmp_path)
    store = str(tmp_path / "s")
    result = runner.invoke(app, ["import-warc", "--store", store, str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "stored 3" in result.stderr
    again = runner.invoke(app, ["import-warc", "--store", store, str(path)])
    assert "stored 0, already stored 3" in again.stderr
    path.write_bytes(data[:-40])
    broken = runner.invoke(app, ["import-warc", "--store", store, str(path)])
    assert broken.exit_code == 2
    [line] = broken.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}@") and "truncated" in line


captures = st.lists(
    st.tuples(
        st.sampled_from(["https://a.example.com/", "https://b.example.org/x?q=1", "http://c.example.net/p"]),
        st.integers(0, 10**7),  # seconds after T0
        st.sampled_from(["200 OK", "301 Moved Permanently", "404 Not Found", "503 Service Unavailable"]),
        st.lists(
            st.tuples(
                st.sampled_from(["X-One", "X-Two", "Server"]), st.text("abc xyz", max_size=8).map(str.strip)
            ),
            max_size=3,
        ),
        st.binary(max_size=300),
    ),
    min_size=1,
    max_size=8,
    unique_by=lambda c: (c[0], c[1]),
)


@settings(max_examples=25, deadline=None)
@given(captures=captures, whole_gzip=st.booleans())
def test_what_goes_in_comes_out(
    tmp_path_factory: pytest.TempPathFactory, captures: list, whole_gzip: bool
) -> None:
    from web_index.fetch import join_headers

    tmp = tmp_path_factory.mktemp("rt")
    w = Warc(gzip=not whole_gzip)
    for url, seconds, status, headers, body in captures:
        w.capture(url, body, when=T0 + timedelta(seconds=seconds), status=status, headers=headers)
    data = w.buf.getvalue()
    path = tmp / "a.warc.gz"
    path.write_bytes(gzip.compress(data) if whole_gzip else data)
    with WebIndex(tmp / "s") as index:
        import_warcs(index, [path])
        at = [T0 + timedelta(seconds=s) for _, s, *_ in captures]
        queries = [
            TimeAwarePageQuery(url=c[0], timestamp=t, not_before=t, not_after=t)
            for c, t in zip(captures, at, strict=True)
        ]
        pages = index.query(queries)
    for (_, seconds, status, headers, body), page in zip(captures, pages, strict=True):
        assert isinstance(page, Page)
        assert page.timestamp == T0 + timedelta(seconds=seconds)
        assert page.status_code == int(status[:3]) and page.data == body
        assert page.headers == join_headers(headers)  # RFC 9110: no whitespace around a field value


def test_a_file_cut_anywhere_in_its_last_member_is_refused(tmp_path: Path) -> None:
    # Every cut, one byte apart: in the WARC headers, the HTTP message, the
    # body, the gzip trailer (where the record inflates whole but nothing vouches for it).
    from web_index.archive import read_warc

    path, data = _three(tmp_path)
    last = [r.offset for r in read_warc(path)][-1]  # type: ignore[union-attr]
    with WebIndex(tmp_path / "s") as index:
        for end in range(last + 1, len(data)):
            path.write_bytes(data[:end])
            with pytest.raises(WarcError, match="truncated") as caught:
                import_warcs(index, [path])
            assert caught.value.offset == last, end
        assert _get(index, "https://example.com/1") is not None
        assert _get(index, "https://example.com/2") is None  # never half a page


_URLS = ["https://example.com/a", "https://example.com/b", "https://example.org/c"]
# (url, second, body) captures and (url, second, second referred to) revisits; files made of them,
# some named twice in one import.
events = st.lists(
    st.tuples(st.sampled_from(_URLS), st.integers(0, 5) | st.integers(3_000_000, 3_000_005)).flatmap(
        lambda us: st.one_of(
            st.tuples(st.just("capture"), st.just(us), st.binary(max_size=20)),
            st.tuples(st.just("revisit"), st.just(us), st.integers(0, 5) | st.integers(3_000_000, 3_000_005)),
        )
    ),
    min_size=1,
    max_size=12,
    unique_by=lambda e: e[1],
)


def _warc(tmp: Path, name: str, events: list) -> Path:
    w = Warc()
    for kind, (url, second), extra in events:
        when = T0 + timedelta(seconds=second)
        if kind == "capture":
            w.capture(url, extra, when=when)
        else:
            w.revisit(url, when, refers_to=T0 + timedelta(seconds=extra))
    return w.save(tmp / name)


@pytest.mark.parametrize("at_once", [2048, 1])
@settings(max_examples=12, deadline=None)
@given(events=events, cuts=st.lists(st.integers(1, 11), max_size=2))
def test_a_bulk_import_resolves_revisits_against_the_whole_import(
    tmp_path_factory: pytest.TempPathFactory, events: list, cuts: list[int], at_once: int
) -> None:
    """A bulk import (the default) resolves its revisits once everything else it stores is
    written: it ends with the pages and the report of an import through the insert buffer of its
    captures first and its revisits after (revisits of revisits, of captures in other files or
    later in a file, captures months apart), and leaves nothing buffered and no part file; also
    when its revisits are resolved a few at a time (``at_once``: their bodies not all held)."""
    from unittest.mock import patch

    from web_index.archive import _import_run

    tmp = tmp_path_factory.mktemp("bulk")
    bounds = [0, *sorted(set(c for c in cuts if c < len(events))), len(events)]
    files = [
        _warc(tmp, f"{n}.warc.gz", events[lo:hi]) for n, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    in_order = [_warc(tmp, "captures.warc.gz", [e for e in events if e[0] == "capture"])]
    in_order.append(_warc(tmp, "revisits.warc.gz", [e for e in events if e[0] == "revisit"]))
    reports, answers = [], []
    for bulk, paths in ((True, files), (False, in_order)):
        with WebIndex(tmp / f"s-{bulk}") as index, patch.object(_import_run, "_RESOLVED_AT_ONCE", at_once):
            report = import_warcs(index, paths, bulk=bulk)
            if bulk:
                assert index.stats().buffered_attempts == 0
                assert not list((tmp / f"s-{bulk}").rglob("*.part-*"))
            queries = [
                TimeAwarePageQuery(url=url, timestamp=when, not_before=when, not_after=when)
                for url, when in ((u, T0 + timedelta(seconds=s)) for _, (u, s), _ in events)
            ]
            answers.append(
                [(p.data, p.status_code) if isinstance(p, Page) else p for p in index.query(queries)]
            )
        reports.append((report.stored, report.already_stored, report.skipped))
    assert reports[0] == reports[1]
    assert answers[0] == answers[1]


def test_a_file_named_twice_in_a_bulk_import_is_stored_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _warc(tmp_path, "a.warc.gz", [("capture", (_URLS[0], 0), b"x"), ("revisit", (_URLS[0], 9), 0)])
    lost = _warc(tmp_path, "b.warc.gz", [("revisit", (_URLS[1], 9), 0)])  # of nothing stored
    with WebIndex(tmp_path / "s") as index:
        loads = []
        bulk_load = index.bulk_load
        monkeypatch.setattr(index, "bulk_load", lambda **kw: loads.append(1) or bulk_load(**kw))
        report = import_warcs(index, [path, lost, path, lost])
        assert index.stats().records == 2 + 2  # each page and its metadata
    # The import's load, then one for the revisit found; none for the round that finds nothing.
    assert len(loads) == 2
    assert (report.stored, report.already_stored) == (2, 2)
    assert report.skipped == {"revisit not resolved": 2}


@given(
    total=st.integers(1, 10**12),
    share=st.floats(0, 1),
    records=st.integers(0, 10**9),
    elapsed=st.floats(0.001, 10**6),
    known=st.booleans(),
)
def test_the_pace_is_from_the_start_and_the_time_left_at_it(
    total: int, share: float, records: int, elapsed: float, known: bool
) -> None:
    from web_index.cli._pace import pace

    done = round(total * share)
    got = pace(done, records, elapsed, total if known else None)
    assert got.mb_per_s == pytest.approx(done / elapsed / 1e6)
    assert got.records_per_s == pytest.approx(records / elapsed)
    if not known:
        assert got.left == ""  # a pipe's size: no time left to say
    elif not done:
        assert got.left == "-:--:-- left"
    elif done >= total:
        assert got.left == "writing"  # every byte read: the commit, whose length is not known
    else:
        hours, minutes, seconds = (int(x) for x in got.left.removesuffix(" left").split(":"))
        assert minutes < 60 and seconds < 60
        assert hours * 3600 + minutes * 60 + seconds == round((total - done) * elapsed / done)


def test_the_progress_on_a_terminal_says_the_pace_since_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files come back from the workers whole: the MB/s is the import's since it started,
    and the bar ends saying that the records are stored, with the time that took."""
    from rich.console import Console

    from web_index.cli import _app, _pace

    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=200, color_system=None)
    monkeypatch.setattr(_app, "err", terminal)
    monkeypatch.setattr(_pace, "err", terminal)
    for n in range(3):
        _three(tmp_path, f"{n}.warc.gz")
    result = runner.invoke(app, ["import-warc", "--store", str(tmp_path / "s"), "--jobs", "2", str(tmp_path)])
    assert result.exit_code == 0, result.output
    frames = [line for line in screen.getvalue().replace("\r", "\n").splitlines() if "importing" in line]
    assert frames and "-:--:-- left" in frames[0]
    last = frames[-1]
    assert "3/3 files" in last and last.rstrip().endswith("stored"), last
    speed = float(last.split(" MB/s")[0].split()[-1])
    size = sum(p.stat().st_size for p in tmp_path.glob("*.warc.gz"))
    assert 0 <= speed <= size / 1e6 / 0.001  # at most the bytes over a millisecond: never GB/s
    records = int(last.split(" records")[0].split()[-1].replace(",", ""))
    rate = int(last.split("/s ")[-2].split()[-1].replace(",", ""))
    assert 0 < rate <= records / 0.001  # records a second since the start, not in the last update
