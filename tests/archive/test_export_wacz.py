"""export-wacz: every package is checked by py-wacz's validator, read back by
warcio, and its index followed into the .wacz file itself, by offset."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import subprocess
import sys
import zipfile
import zlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from warcio.archiveiterator import ArchiveIterator

from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.archive import WaczReport, _wacz_index, _wacz_pages, export_wacz, export_warcs, import_warcs
from web_index.cli import app
from web_index.models import RecordType

runner = CliRunner()
WACZ = Path(sys.executable).parent / "wacz"  # py-wacz, in the dev group


def html(title: str, words: str) -> bytes:
    return f"<html><head><title>{title}</title></head><body><p>{words}</p></body></html>".encode()


def fill(index: WebIndex, n: int = 0) -> None:
    """A small crawl: entry pages, a redirect, a revisit, a failure, an image; and ``n`` more pages."""
    index.insert_many(
        [
            attempt("https://a.example.com/", T0, body=html("Home A", "welcome")),
            attempt(
                "https://a.example.com/about", T0 + timedelta(seconds=1), hops=2, body=html("About", "us")
            ),
            attempt("https://a.example.com/copy", T0 + timedelta(seconds=2), body=html("Home A", "welcome")),
            attempt("https://b.example.org/", T0 + timedelta(seconds=3), body=html("B", "bee")),
            attempt("https://b.example.org/gone", T0 + timedelta(seconds=4), state="timeout"),
            attempt("https://b.example.org/", T0 + timedelta(seconds=5), method="head"),
            *(
                attempt(
                    f"https://c.example.net/p{i}", T0 + timedelta(seconds=10 + i), body=html(f"P{i}", f"w{i}")
                )
                for i in range(n)
            ),
        ]
    )


def validate(path: Path) -> None:
    done = subprocess.run([WACZ, "validate", "-f", str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Validation succeeded" in done.stdout


def data_offset(raw: bytes, info: zipfile.ZipInfo) -> int:
    """Where a member's data starts in the ZIP: after its local header, whose
    extra field may differ from the central directory's."""
    name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    return info.header_offset + 30 + name_len + extra_len


def check_package(path: Path) -> dict[str, Any]:
    """Everything a reader of the package relies on; returns its index lines and pages."""
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as zf:
        infos = {i.filename: i for i in zf.infolist()}
        members = {name: zf.read(name) for name in infos}
    package = json.loads(members["datapackage.json"])
    assert package["profile"] == "data-package" and package["wacz_version"] == "1.1.1"
    digest = json.loads(members["datapackage-digest.json"])
    assert digest["hash"] == "sha256:" + hashlib.sha256(members["datapackage.json"]).hexdigest()
    listed = [r["path"] for r in package["resources"]]
    assert listed == [n for n in infos if not n.startswith("datapackage")]  # every member, in ZIP order
    for resource in package["resources"]:
        data = members[resource["path"]]
        assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest()
        assert resource["bytes"] == len(data)
    for name, info in infos.items():
        stored = name.startswith("archive/") or name == "indexes/index.cdx.gz"
        assert (info.compress_type == zipfile.ZIP_STORED) == stored, name
        assert info.extra == b"" or info.header_offset > 0xFFFFFFFF  # no ZIP64 on a small package
        # ReplayWeb.page finds a member's data by the central directory alone: the
        # local header must not hold an extra field (force_zip64's) it does not know.
        assert data_offset(raw, info) == info.header_offset + 30 + len(name.encode()) + len(info.extra)
    warcs = [n for n in infos if n.startswith("archive/")]
    for name in warcs:
        kinds = [r.rec_type for r in ArchiveIterator(io.BytesIO(members[name]), check_digests="raise")]
        assert kinds[0] == "warcinfo" and "warcinfo" not in kinds[1:]
    lines = index_lines(members)
    assert lines == sorted(lines, key=lambda line: line.encode())
    for line in lines:
        _key, stamp, fields_text = line.split(" ", 2)
        fields = json.loads(fields_text)
        info = infos["archive/" + fields["filename"]]
        start = data_offset(raw, info) + int(fields["offset"])  # read in place, from the .wacz file
        member = zlib.decompressobj(31)
        record = member.decompress(raw[start : start + int(fields["length"])])
        assert member.eof and not member.unused_data  # exactly one gzip member
        (parsed,) = list(ArchiveIterator(io.BytesIO(gzip.compress(record)), check_digests="raise"))
        assert parsed.rec_headers.get_header("WARC-Target-URI") == fields["url"]
        when = parsed.rec_headers.get_header("WARC-Date")
        assert stamp == when[:19].replace("-", "").replace(":", "").replace("T", "")
        assert parsed.rec_type == ("revisit" if fields["mime"] == "warc/revisit" else "response")
        assert fields["digest"] == parsed.rec_headers.get_header("WARC-Payload-Digest", "-")
    pages = {}
    for name in ("pages/pages.jsonl", "pages/extraPages.jsonl"):
        if name in members:
            header, *rest = members[name].decode().splitlines()
            assert json.loads(header)["format"] == "json-pages-1.0"
            pages[name] = [json.loads(p) for p in rest]
    assert "pages/pages.jsonl" in pages
    return {"lines": lines, "pages": pages, "package": package, "members": members}


def index_lines(members: dict[str, bytes]) -> list[str]:
    if "indexes/index.cdx" in members:
        assert "indexes/index.cdx.gz" not in members  # one form of index, not both
        return members["indexes/index.cdx"].decode().splitlines()
    blocks, idx = members["indexes/index.cdx.gz"], members["indexes/index.idx"].decode().splitlines()
    meta = idx[0].split(" ", 2)
    assert meta[:2] == ["!meta", "0"] and json.loads(meta[2])["filename"] == "index.cdx.gz"
    lines, end = [], 0
    for entry in idx[1:]:
        key, stamp, where_text = entry.split(" ", 2)
        where = json.loads(where_text)
        assert where["offset"] == end  # the blocks follow each other
        block = blocks[where["offset"] : where["offset"] + where["length"]]
        assert where["digest"] == "sha256:" + hashlib.sha256(block).hexdigest()
        unpacker = zlib.decompressobj(31)
        block_lines = unpacker.decompress(block).decode().splitlines()
        assert unpacker.eof and not unpacker.unused_data  # each block its own gzip member
        assert block_lines[0].split(" ", 2)[:2] == [key, stamp]
        lines += block_lines
        end += where["length"]
    assert end == len(blocks)
    return lines


def test_a_small_package(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        fill(index)
        report = export_wacz(index, tmp_path / "a.wacz", title="A crawl", description="*Two* sites")
        heads = export_wacz(index, tmp_path / "h.wacz", type="head")
        inner = export_wacz(index, tmp_path / "i.wacz", url_prefix="https://a.example.com/about")
    assert inner.path is not None
    validate(inner.path)
    # No entry page: the others are the page list, which must not be empty.
    assert [p["title"] for p in check_package(inner.path)["pages"]["pages/pages.jsonl"]] == ["About"]
    assert "pages/extraPages.jsonl" not in check_package(inner.path)["members"]
    assert heads.responses == 1 and heads.pages == 0  # a HEAD response has no body to show
    assert report.path == tmp_path / "a.wacz" and report.size == report.path.stat().st_size
    # The timeout has no GET record to scan, as in export-warc.
    assert (report.attempts, report.responses, report.revisits) == (4, 4, 1)
    assert not report.zipnum and report.index_lines == 5 and report.pages == 4
    validate(report.path)
    validate(tmp_path / "h.wacz")
    got = check_package(report.path)
    assert got["package"]["title"] == "A crawl" and got["package"]["description"] == "*Two* sites"
    entry, extra = got["pages"]["pages/pages.jsonl"], got["pages"]["pages/extraPages.jsonl"]
    assert [(p["url"], p["title"], p["text"]) for p in entry] == [
        ("https://a.example.com/", "Home A", "welcome"),
        ("https://b.example.org/", "B", "bee"),
    ]
    assert {p["url"] for p in extra} == {"https://a.example.com/about", "https://a.example.com/copy"}
    assert entry[0]["ts"] == "2024-08-01T12:00:00Z" and len({p["id"] for p in entry + extra}) == 4
    assert sorted(tmp_path.iterdir()) == [tmp_path / n for n in ("a.wacz", "h.wacz", "i.wacz", "s")]


def test_the_package_holds_export_warcs_records(tmp_path: Path) -> None:
    """One record stream: the same records, ids and digests as export-warc's; and they import back."""
    with WebIndex(tmp_path / "s", create=True) as index, WebIndex(tmp_path / "b", create=True) as copy:
        fill(index, 30)
        warcs = export_warcs(index, tmp_path / "warc", max_file_bytes=4000)
        wacz = export_wacz(index, tmp_path / "a.wacz", max_file_bytes=4000)
        assert wacz.path is not None
        members = check_package(wacz.path)["members"]
        archive = sorted(n for n in members if n.startswith("archive/"))
        assert [n.removeprefix("archive/") for n in archive] == [f.name for f in warcs.files]
        for name, path in zip(archive, warcs.files, strict=True):
            assert _records(members[name]) == _records(path.read_bytes())
        for name in archive:
            (tmp_path / name.removeprefix("archive/")).write_bytes(members[name])
        imported = import_warcs(copy, [tmp_path / n.removeprefix("archive/") for n in archive])
        assert imported.problems == [] and imported.stored == wacz.responses + wacz.revisits
        assert len(list(copy.scan(RecordType.GET))) == wacz.responses + wacz.revisits
    validate(wacz.path)


def _records(data: bytes) -> list[tuple[str, str, str | None]]:
    return [
        (
            r.rec_type,
            r.rec_headers.get_header("WARC-Record-ID"),
            r.rec_headers.get_header("WARC-Block-Digest"),
        )
        for r in ArchiveIterator(io.BytesIO(data))
        if r.rec_type != "warcinfo"  # dated when written
    ]


def test_zipnum_past_the_threshold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_wacz_index, "PLAIN_INDEX_MAX_LINES", 4)
    monkeypatch.setattr(_wacz_index, "ZIPNUM_BLOCK_LINES", 3)
    with WebIndex(tmp_path / "s", create=True) as index:
        fill(index, 6)
        small = export_wacz(index, tmp_path / "small.wacz", url_prefix="https://a.example.com/")
        large = export_wacz(index, tmp_path / "large.wacz")
    assert not small.zipnum and small.index_lines == 4  # up to the threshold: plain
    assert large.zipnum and large.index_lines == 11
    for report in (small, large):
        assert report.path is not None
        validate(report.path)
        check_package(report.path)
    with zipfile.ZipFile(tmp_path / "large.wacz") as zf:
        assert len(zf.read("indexes/index.idx").splitlines()) == 1 + 4  # the meta line, ceil(11 / 3) blocks


def test_zipnum_at_the_real_threshold(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        fill(index, _wacz_index.PLAIN_INDEX_MAX_LINES - 4)  # 4 lines of fill's own: one more than plain holds
        report = export_wacz(index, tmp_path / "a.wacz", text=False)
    assert report.zipnum and report.index_lines == _wacz_index.PLAIN_INDEX_MAX_LINES + 1
    assert report.path is not None
    validate(report.path)
    got = check_package(report.path)
    assert len(got["lines"]) == report.index_lines
    assert all("text" not in p for p in got["pages"]["pages/pages.jsonl"])
    with zipfile.ZipFile(report.path) as zf:
        assert len(zf.read("indexes/index.idx").splitlines()) == 1 + 2


class _Unseekable(io.RawIOBase):
    """A pipe, as a server's response body would be: write only, no tell()."""

    def __init__(self) -> None:
        self.data = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.data += bytes(b)
        return len(b)


def test_a_package_written_to_a_stream(tmp_path: Path) -> None:
    pipe = _Unseekable()
    with WebIndex(tmp_path / "s", create=True) as index:
        fill(index)
        report = export_wacz(index, pipe)  # type: ignore[arg-type]
        empty = io.BytesIO()
        nothing = export_wacz(index, empty, domain="nowhere.org")
    assert isinstance(report, WaczReport) and report.path is None and report.responses == 4
    (tmp_path / "p.wacz").write_bytes(bytes(pipe.data))
    validate(tmp_path / "p.wacz")
    check_package(tmp_path / "p.wacz")
    assert nothing.attempts == 0
    (tmp_path / "e.wacz").write_bytes(empty.getvalue())  # a stream is answered even when empty
    validate(tmp_path / "e.wacz")


def test_a_failure_midway_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(self: object, capture: object) -> None:
        raise OSError(28, "No space left on device")

    (tmp_path / "out").mkdir()
    with WebIndex(tmp_path / "s", create=True) as index:
        fill(index)
        monkeypatch.setattr(_wacz_pages.PageLists, "add", broken)
        with pytest.raises(OSError, match="No space left"):
            export_wacz(index, tmp_path / "out" / "a.wacz")
    assert list((tmp_path / "out").iterdir()) == []


def test_cli_export_wacz(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    with WebIndex(store, create=True) as index:
        fill(index)
    out = tmp_path / "out"
    out.mkdir()
    done = runner.invoke(app, ["export-wacz", str(out / "a.wacz"), "--store", store, "--title", "T"])
    assert done.exit_code == 0, done.output
    assert "4 attempts: 4 responses, 1 revisit, 4 pages; plain index of 5 lines" in done.stderr
    validate(out / "a.wacz")
    again = runner.invoke(app, ["export-wacz", str(out / "a.wacz"), "--store", store])
    assert again.exit_code == 2 and again.stderr == f"error: {out / 'a.wacz'} exists: choose another name\n"
    (out / "file").write_text("")
    for unwritable in (out / "missing" / "b.wacz", out / "file" / "b.wacz"):
        bad = runner.invoke(app, ["export-wacz", str(unwritable), "--store", store])
        assert bad.exit_code == 2 and bad.stderr.startswith(f"error: cannot write {unwritable}: ")
        assert bad.stderr.count("\n") == 1 and isinstance(bad.exception, SystemExit)  # no traceback
    none = runner.invoke(
        app, ["export-wacz", str(out / "c.wacz"), "--store", store, "--domain", "nowhere.org"]
    )
    assert none.exit_code == 1
    assert none.stderr == f"error: nothing to export (0 attempts matched): {out / 'c.wacz'} not written\n"
    meta = runner.invoke(
        app, ["export-wacz", str(out / "d.wacz"), "--store", store, "--type", "get-metadata"]
    )
    assert meta.exit_code == 2 and meta.stderr.startswith("error: ")
    assert sorted(p.name for p in out.iterdir()) == ["a.wacz", "file"]  # no partial file left behind


def test_index_lines_sorted_past_memory() -> None:
    from web_index.archive._sorted_lines import SortedLines

    words = [f"k{(n * 7919) % 1000:03d} caf\u00e9 {n}" for n in range(1000)] + ["\udcff raw", "Z", ""]
    lines = SortedLines(run_lines=64)  # 16 runs spilled to files, merged as read
    for word in words:
        lines.add(word)
    assert lines.count == len(words)
    assert list(lines.sorted()) == sorted(w.encode("utf-8", "surrogateescape") for w in words)


@pytest.mark.parametrize("command", ["export-wacz", "export-warc"])
def test_cli_url_selects_as_the_cdx_api_matches(tmp_path: Path, command: str) -> None:
    store = str(tmp_path / "s")
    with WebIndex(store, create=True) as index:
        fill(index, 3)
        index.insert(
            *attempt("http://www.a.example.com/about", T0 + timedelta(days=1), body=html("Again", "x"))
        )

    def exported(*selectors: str) -> str:
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}{'.wacz' if command == 'export-wacz' else ''}"
        done = runner.invoke(app, [command, str(out), "--store", store, *selectors])
        assert done.exit_code == 0, done.output
        return done.stderr.split(":", 1)[0]

    # exact: the URL's captures whatever the scheme and www. (SURT), not /about2 or /
    assert exported("--url", "https://a.example.com/about") == "2 attempts"
    assert exported("--url", "a.example.com/about", "--to", "2024-08-01") == "1 attempt"
    assert exported("--url", "a.example.com", "--match-type", "host") == "4 attempts"
    assert exported("--url", "a.example.com/", "--url", "c.example.net/p1") == "2 attempts"
    assert exported("--url", "example.net", "--match-type", "domain") == "3 attempts"
    bad = runner.invoke(
        app, [command, str(tmp_path / "bad"), "--store", store, "--url", "x.com", "--match-type", "all"]
    )
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --match-type: ")


def test_a_package_past_4_gib_gets_zip64_records_and_no_local_extras(tmp_path: Path) -> None:
    """Members under 4 GiB each, the package past it: the offsets past 4 GiB go in ZIP64
    central-directory extras and a ZIP64 end record, which ReplayWeb.page reads; the EOCD's
    offset field holds 0xFFFFFFFF (the marker it looks for); no local header holds an extra
    (where it reads a member's data from the central directory alone)."""
    from datetime import UTC, datetime

    from web_index.archive._wacz_zip import ZipOut

    chunk = bytes(1 << 24)  # 16 MiB of zeros, written 96 times a member: 1.5 GiB each
    path = tmp_path / "big.wacz"
    with path.open("wb") as fh:
        out = ZipOut(fh, datetime(2024, 1, 1, tzinfo=UTC))
        for n in range(3):
            out.add(f"archive/part-{n}.warc.gz", (chunk for _ in range(96)), stored=True)
        out.add("pages/pages.jsonl", [b'{"format": "json-pages-1.0", "id": "pages"}\n'])
        out.end()
        out.zip.close()
    size = path.stat().st_size
    assert size > 4 << 30
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    assert [i.file_size for i in infos[:3]] == [96 << 24] * 3
    past = [i for i in infos if i.header_offset > 0xFFFFFFFF]
    assert past and all(i.extra for i in past)  # their offsets in ZIP64 extras
    with path.open("rb") as fh:
        for info in infos:
            fh.seek(info.header_offset)
            local = fh.read(30)
            assert local[:4] == b"PK\x03\x04"
            assert struct.unpack("<H", local[28:30])[0] == 0, info.filename  # no local extra field
        fh.seek(size - 22)
        eocd = fh.read(22)
    assert eocd[:4] == b"PK\x05\x06" and eocd[16:20] == b"\xff\xff\xff\xff"
    with path.open("rb") as fh:
        fh.seek(size - 22 - 20)
        assert fh.read(4) == b"PK\x06\x07"  # the ZIP64 end-of-central-directory locator
    path.unlink()
