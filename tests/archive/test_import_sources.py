"""Where imports read from: ARC files (read by warcio), s3:// prefixes on a real
S3 server, and records that are not web pages."""

from __future__ import annotations

import gzip
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.archive.test_import_warc import T0, Warc
from tests.servers import SeaweedFS
from web_index import WebIndex
from web_index.archive import archive_files, import_warcs, read_arc
from web_index.cli import app
from web_index.errors import WarcError
from web_index.models import Page, SimplePageQuery
from web_index.storage.backends import S3Backend

runner = CliRunner()
_DESC = b"1 0 InternetArchive\nURL IP-address Archive-date Content-type Archive-length\n"


def arc_record(url: str, when: str, block: bytes, mime: str = "text/html") -> bytes:
    """One ARC v1 record as its own gzip member."""
    return gzip.compress(f"{url} 192.0.2.1 {when} {mime} {len(block)}\n".encode() + block + b"\n")


def arc_file(*records: bytes) -> bytes:
    desc = arc_record("filedesc://crawl.arc", "20240801120000", _DESC, "text/plain")
    return desc + b"".join(records)


def http(body: bytes, status: str = "200 OK") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: text/html\r\n\r\n".encode() + body


def test_arc_records_are_imported_once(tmp_path: Path) -> None:
    path = tmp_path / "crawl.arc.gz"
    path.write_bytes(
        arc_file(
            arc_record("http://example.com/", "20240801120001", http(b"<p>one</p>")),
            arc_record("dns:example.com", "20240801120000", b"example.com. 60 IN A 192.0.2.1", "text/dns"),
            arc_record("http://example.com/gone", "20240801120002", http(b"no", "404 Not Found")),
        )
    )
    with WebIndex(tmp_path / "s", create=True) as index:
        first = import_warcs(index, [tmp_path])  # a folder: its .arc.gz found
        again = import_warcs(index, [path])
        home = index.query([SimplePageQuery(url="http://example.com/")])[0]
        gone = index.query([SimplePageQuery(url="http://example.com/gone")])[0]
    assert (first.stored, first.skipped) == (2, {"warcinfo": 1, "dns URL": 1})
    assert again.stored == 0 and again.already_stored == 2  # ids from URL, date and content
    assert (
        isinstance(home, Page) and home.data == b"<p>one</p>" and home.timestamp == T0 + timedelta(seconds=1)
    )
    assert isinstance(gone, Page) and gone.status_code == 404


@pytest.mark.parametrize("cut", [5, 30, 60])
def test_a_truncated_arc_is_named_with_its_offset(tmp_path: Path, cut: int) -> None:
    whole = arc_file(arc_record("http://example.com/a", "20240801120001", http(b"<p>a</p>" * 20)))
    last = arc_record("http://example.com/b", "20240801120002", http(b"<p>b</p>" * 20))
    path = tmp_path / "cut.arc.gz"
    path.write_bytes(whole + last[:-cut])
    items = list(read_arc(path))
    problems = [i for i in items if isinstance(i, WarcError)]
    assert [i.headers.get("WARC-Target-URI", i.type) for i in items if not isinstance(i, WarcError)] == [
        "warcinfo",
        "http://example.com/a",
    ]
    assert len(problems) == 1 and problems[0].offset == len(whole) and problems[0].path == str(path)
    with WebIndex(tmp_path / "s", create=True) as index:
        with pytest.raises(WarcError):
            import_warcs(index, [path])
        assert index.presence([SimplePageQuery(url="http://example.com/a")]) == [True]  # kept


def test_dns_records_in_warcs_are_counted_not_errors(tmp_path: Path) -> None:
    w = Warc()
    w.other("resource", "dns:example.com", b"20240801120000\nexample.com. 60 IN A 192.0.2.1", "text/dns")
    w.capture("https://example.com/", b"<p>home</p>")
    with WebIndex(tmp_path / "s", create=True) as index:
        report = import_warcs(index, [w.save(tmp_path / "a.warc.gz")])
    assert report.stored == 1 and report.skipped == {"dns URL": 1} and report.problems == []


def test_import_from_s3(seaweed: SeaweedFS, tmp_path: Path) -> None:
    prefix = seaweed.new_store()
    bucket = S3Backend(prefix)
    for n, folder in enumerate(["2024/08", "2024/09", ""]):
        w = Warc()
        w.capture(f"https://example.com/{n}", f"<p>{n}</p>".encode(), when=T0 + timedelta(days=40 * n))
        bucket.write_bytes(f"{folder}/part-{n}.warc.gz".lstrip("/"), w.buf.getvalue())
    bucket.write_bytes("notes.txt", b"not a WARC")
    files = archive_files([prefix])
    assert [f.name for f in files] == [f"{prefix}/2024/08/part-0.warc.gz", f"{prefix}/2024/09/part-1.warc.gz",
                                       f"{prefix}/part-2.warc.gz"]  # fmt: skip
    store = str(tmp_path / "s")
    done = runner.invoke(app, ["import-warc", "--store", store, prefix, f"{prefix}/part-2.warc.gz"])
    assert done.exit_code == 0, done.output
    assert "4 files" in done.stderr and "stored 3, already stored 1" in done.stderr
    with WebIndex(store) as index:
        page = index.query([SimplePageQuery(url="https://example.com/1")])[0]
    assert isinstance(page, Page) and page.data == b"<p>1</p>"
    missing = runner.invoke(app, ["import-warc", "--store", store, f"{prefix}/nothing.warc.gz"])
    assert missing.exit_code == 2 and "nothing.warc.gz: no such object" in missing.stderr
    # A damaged object is named by its s3:// URL and offset, like a file.
    w = Warc()
    w.capture("https://example.com/cut", b"<p>cut</p>" * 50)
    bucket.write_bytes("cut/cut.warc.gz", w.buf.getvalue()[:-20])
    cut = runner.invoke(app, ["import-warc", "--store", store, f"{prefix}/cut/"])
    assert cut.exit_code == 2 and f"{prefix}/cut/cut.warc.gz@" in cut.stderr
