"""WACZ packages imported into a store: a package made by py-wacz's ``wacz create``
from warcio-written WARCs gives the store exactly what its WARCs give through
import-warc, and a bad package is one line, exit 2 and the store as it was."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.archive.test_import_warc import T0, Warc
from web_index import WebIndex
from web_index.archive import import_wacz, import_warcs
from web_index.cli import app
from web_index.errors import WaczError, WarcError
from web_index.models import RecordType

runner = CliRunner()
WACZ = Path(sys.executable).with_name("wacz")


def _warcs(tmp: Path) -> list[Path]:
    """Two WARCs: every kind of record the import tells apart, in two gzip forms."""
    a = Warc()
    a.info("Wget/1.21.3")
    a.capture("https://example.com/", b"<title>Home</title><p>home</p>")
    a.capture("https://example.com/head", b"", method="HEAD", when=T0 + timedelta(seconds=1))
    a.capture("https://example.com/gone", b"nope", status="404 Not Found", when=T0 + timedelta(seconds=2))
    a.other("resource", "https://example.com/shot.png", b"\x89PNG...", "image/png")
    a.other("metadata", "https://example.com/", b"outlinks: none", "application/warc-fields")
    b = Warc(gzip=False)
    b.info("Heritrix/3.4.0")
    b.revisit("https://example.com/", T0 + timedelta(days=1), refers_to=T0)  # to a capture in a.warc.gz
    for i in range(5):
        b.capture(f"https://example.org/{i}", b"page %d" % i, when=T0 + timedelta(hours=i), pair=i % 2 == 0)
    return [a.save(tmp / "a.warc.gz"), b.save(tmp / "b.warc")]


def _wacz_create(out: Path, warcs: list[Path]) -> Path:
    if not WACZ.exists():
        pytest.skip("py-wacz is not installed (the dev group)")
    run = subprocess.run([str(WACZ), "create", "-o", str(out), *map(str, warcs)], capture_output=True)
    assert run.returncode == 0, run.stderr
    return out


def _package(
    out: Path,
    members: dict[str, bytes],
    *,
    deflate: tuple[str, ...] = (),
    unlisted: tuple[str, ...] = (),
    digest: bool = True,
    edit: Callable[[dict], None] | None = None,
) -> Path:
    """A WACZ written here: ``members`` listed with their size and sha256 (but
    ``unlisted``), DEFLATED when named in ``deflate``; ``edit`` changes the
    datapackage before it is written."""
    resources = [
        {
            "name": m.rsplit("/", 1)[-1],
            "path": m,
            "hash": "sha256:" + hashlib.sha256(d).hexdigest(),
            "bytes": len(d),
        }
        for m, d in members.items()
        if m not in unlisted
    ]
    package = {"profile": "data-package", "wacz_version": "1.1.1", "resources": resources}
    if edit is not None:
        edit(package)
    data = json.dumps(package).encode()
    with zipfile.ZipFile(out, "w") as zf:
        for m, d in members.items():
            zf.writestr(m, d, zipfile.ZIP_DEFLATED if m in deflate else zipfile.ZIP_STORED)
        zf.writestr("datapackage.json", data, zipfile.ZIP_DEFLATED)
        if digest:
            given = {"path": "datapackage.json", "hash": "sha256:" + hashlib.sha256(data).hexdigest()}
            zf.writestr("datapackage-digest.json", json.dumps(given))
    return out


def _everything(index: WebIndex) -> dict[RecordType, list[object]]:
    return {t: list(index.scan(t)) for t in RecordType}


def _snapshot(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*")) if p.is_file()}


def test_a_package_made_by_py_wacz_imports_as_its_warcs_do(tmp_path: Path) -> None:
    warcs = _warcs(tmp_path)
    package = _wacz_create(tmp_path / "crawl.wacz", warcs)
    check = subprocess.run([str(WACZ), "validate", "-f", str(package)], capture_output=True)
    assert check.returncode == 0, check.stdout  # a package as py-wacz means it
    with WebIndex(tmp_path / "from-warc") as index:
        by_warc = import_warcs(index, warcs)
        expected = _everything(index)
    with WebIndex(tmp_path / "from-wacz") as index:
        first = import_wacz(index, [package])
        got = _everything(index)
        store = _snapshot(tmp_path / "from-wacz")
        second = import_wacz(index, [package])
        assert _snapshot(tmp_path / "from-wacz") == store  # the second import wrote nothing
        assert _everything(index) == got
    assert (first.files, first.records, first.stored, first.skipped) == (
        2, by_warc.records, by_warc.stored, by_warc.skipped,
    )  # fmt: skip
    assert first.stored == 10 and first.skipped == {"warcinfo": 2, "metadata": 1}
    assert got == expected and sum(map(len, got.values())) == 20  # every page and its metadata
    assert (second.stored, second.already_stored) == (0, first.stored)


def test_the_commands_import_a_package(tmp_path: Path) -> None:
    package = _wacz_create(tmp_path / "crawl.wacz", _warcs(tmp_path))
    store = str(tmp_path / "s")
    result = runner.invoke(app, ["import-wacz", "--store", store, str(package)])
    assert result.exit_code == 0, result.output
    assert "2 files, 19 records" in result.stderr and "stored 10, already stored 0" in result.stderr
    again = runner.invoke(app, ["import-warc", "--store", store, str(package)])  # import-warc reads it too
    assert again.exit_code == 0, again.output
    assert "stored 0, already stored 10" in again.stderr


def test_stored_and_deflated_members_and_pages(tmp_path: Path) -> None:
    a, b = _warcs(tmp_path)
    title = "A title found only in pages.jsonl"
    pages = (
        b'{"format": "json-pages-1.0", "id": "pages", "title": "All Pages"}\n'
        + json.dumps({"url": "https://example.com/", "ts": "2024-08-01T12:00:00Z", "title": title}).encode()
    )
    members = {
        "archive/a.warc.gz": a.read_bytes(),
        "archive/b.warc": b.read_bytes(),
        "pages/pages.jsonl": pages,
        "pages/extraPages.jsonl": pages.replace(b'"pages"', b'"extra-pages"'),
    }
    package = _package(tmp_path / "p.wacz", members, deflate=("archive/b.warc", "pages/pages.jsonl"))
    with WebIndex(tmp_path / "from-warc") as index:
        import_warcs(index, [a, b])
        expected = _everything(index)
    with WebIndex(tmp_path / "from-wacz") as index:
        report = import_wacz(index, [package])
        assert _everything(index) == expected
    assert report.files == 2 and report.stored == 10
    # The store has no place for a page's title (docs/archive.md): it is nowhere in it.
    assert not any(title.encode() in data for data in _snapshot(tmp_path / "from-wacz").values())


def _zip_patch(path: Path, member: str, *, compressed: int, size: int) -> None:
    """Rewrite a member's sizes in the ZIP's central directory (what zipfile trusts)."""
    data = bytearray(path.read_bytes())
    at = 0
    while True:
        at = data.index(b"PK\x01\x02", at)
        name_len = struct.unpack_from("<H", data, at + 28)[0]
        if data[at + 46 : at + 46 + name_len] == member.encode():
            break
        at += 4
    struct.pack_into("<II", data, at + 20, compressed, size)
    path.write_bytes(bytes(data))


def _good(tmp: Path) -> dict[str, bytes]:
    return {"archive/a.warc.gz": _warcs(tmp)[0].read_bytes()}


def _not_a_zip(tmp: Path) -> tuple[Path, str]:
    (tmp / "x.wacz").write_text("hello\n")
    return tmp / "x.wacz", "not a ZIP file"


def _truncated(tmp: Path) -> tuple[Path, str]:
    path = _package(tmp / "x.wacz", _good(tmp))
    path.write_bytes(path.read_bytes()[:-30])  # the end of central directory is cut
    return path, "not a ZIP file, or cut short"


def _no_datapackage(tmp: Path) -> tuple[Path, str]:
    with zipfile.ZipFile(tmp / "x.wacz", "w") as zf:
        zf.writestr("archive/a.warc.gz", _good(tmp)["archive/a.warc.gz"])
    return tmp / "x.wacz", "no datapackage.json"


def _missing_member(tmp: Path) -> tuple[Path, str]:
    def add(package: dict) -> None:
        package["resources"].append(
            {"name": "b", "path": "archive/b.warc.gz", "hash": "sha256:00", "bytes": 1}
        )

    return _package(
        tmp / "x.wacz", _good(tmp), edit=add
    ), "!archive/b.warc.gz: listed in datapackage.json, missing"


def _wrong_hash(tmp: Path) -> tuple[Path, str]:
    def wrong(package: dict) -> None:
        package["resources"][0]["hash"] = "sha256:" + "0" * 64

    return _package(tmp / "x.wacz", _good(tmp), edit=wrong), "!archive/a.warc.gz: its sha256 hash is not"


def _wrong_size(tmp: Path) -> tuple[Path, str]:
    def wrong(package: dict) -> None:
        package["resources"][0]["bytes"] += 1

    return _package(tmp / "x.wacz", _good(tmp), edit=wrong), "!archive/a.warc.gz: datapackage.json says"


def _wrong_digest(tmp: Path) -> tuple[Path, str]:
    path = _package(tmp / "x.wacz", _good(tmp), digest=False)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("datapackage-digest.json", json.dumps({"hash": "sha256:" + "1" * 64}))
    return path, "!datapackage-digest.json: the hash of datapackage.json"


def _dot_dot(tmp: Path) -> tuple[Path, str]:
    members = {"../evil.warc.gz": _good(tmp)["archive/a.warc.gz"]}
    return _package(tmp / "x.wacz", members), "unsafe member name '../evil.warc.gz'"


def _absolute(tmp: Path) -> tuple[Path, str]:
    path = _package(tmp / "x.wacz", _good(tmp))
    data = path.read_bytes().replace(b"archive/a.warc.gz", b"/rchive/a.warc.gz")  # same length, everywhere
    path.write_bytes(data)
    return path, "unsafe member name '/rchive/a.warc.gz'"


def _four_gib_in_a_tiny_file(tmp: Path) -> tuple[Path, str]:
    def lie(package: dict) -> None:
        package["resources"][0]["bytes"] = 0xFFFFFFF0

    path = _package(tmp / "x.wacz", _good(tmp), edit=lie)
    _zip_patch(path, "archive/a.warc.gz", compressed=0xFFFFFFF0, size=0xFFFFFFF0)
    return path, "!archive/a.warc.gz: the ZIP's directory says 4294967280 bytes"


def _four_gib_declared(tmp: Path) -> tuple[Path, str]:
    def lie(package: dict) -> None:
        package["resources"][0]["bytes"] = 4 << 30

    return _package(tmp / "x.wacz", _good(tmp), edit=lie), "datapackage.json says 4294967296 bytes"


def _inflates_past_its_size(tmp: Path) -> tuple[Path, str]:
    bomb = b"\0" * (64 << 20)  # 64 MiB that deflate to 64 KiB, declared as 1000 bytes

    def lie(package: dict) -> None:
        package["resources"][0].update(bytes=1000, hash="sha256:" + hashlib.sha256(bomb[:1000]).hexdigest())

    path = _package(tmp / "x.wacz", {"logs/a.log": bomb}, deflate=("logs/a.log",), edit=lie)
    _zip_patch(path, "logs/a.log", compressed=path.stat().st_size // 2 - 100, size=1000)
    return path, "!logs/a.log: cannot be read"


def _not_a_warc(tmp: Path) -> tuple[Path, str]:
    members = {**_good(tmp), "archive/b.warc.gz": b"<html>not a WARC</html>"}
    return _package(tmp / "x.wacz", members), "!archive/b.warc.gz: not a WARC file"


def _unlisted_warc(tmp: Path) -> tuple[Path, str]:
    members = {**_good(tmp), "archive/b.warc.gz": _good(tmp)["archive/a.warc.gz"]}
    path = _package(tmp / "x.wacz", members, unlisted=("archive/b.warc.gz",))
    return path, "!archive/b.warc.gz: not listed in datapackage.json"


BAD = [
    _not_a_zip,
    _truncated,
    _no_datapackage,
    _missing_member,
    _wrong_hash,
    _wrong_size,
    _wrong_digest,
    _dot_dot,
    _absolute,
    _four_gib_in_a_tiny_file,
    _four_gib_declared,
    _inflates_past_its_size,
    _not_a_warc,
    _unlisted_warc,
]


@pytest.mark.parametrize("command", ["import-wacz", "import-warc"])
@pytest.mark.parametrize("bad", BAD, ids=lambda f: f.__name__.strip("_"))
def test_a_bad_package_is_one_line_exit_2_and_the_store_as_it_was(
    tmp_path: Path, bad: Callable[[Path], tuple[Path, str]], command: str
) -> None:
    store = tmp_path / "s"
    other = Warc()
    other.capture("https://example.net/", b"already there")
    with WebIndex(store) as index:
        import_warcs(index, [other.save(tmp_path / "other.warc.gz")])
    before = _snapshot(store)
    (tmp_path / "made").mkdir()
    package, problem = bad(tmp_path / "made")
    files = sorted(tmp_path.rglob("*"))
    result = runner.invoke(app, [command, "--store", str(store), str(package)])
    assert result.exit_code == 2, result.output
    [line] = [x for x in result.stderr.splitlines() if x.strip()]
    assert line.startswith(f"error: {package}") and problem in line, line
    assert _snapshot(store) == before
    assert sorted(tmp_path.rglob("*")) == files  # nothing extracted anywhere


def test_the_api_raises_before_storing_anything(tmp_path: Path) -> None:
    (tmp_path / "made").mkdir()
    good = _package(tmp_path / "good.wacz", _good(tmp_path / "made"))
    bad, _ = _wrong_hash(tmp_path / "made")
    with WebIndex(tmp_path / "s") as index:
        with pytest.raises(WaczError) as caught:
            import_wacz(index, [good, bad], skip_invalid=True)  # a bad package is never skipped
        assert (caught.value.path, caught.value.member) == (str(bad), "archive/a.warc.gz")
        assert _everything(index) == {t: [] for t in RecordType}


@pytest.mark.parametrize("deflate", [(), ("archive/a.warc.gz",)], ids=["stored", "deflated"])
def test_a_record_cut_short_inside_a_member_is_named_by_package_member_and_offset(
    tmp_path: Path, deflate: tuple[str, ...]
) -> None:
    data = _good(tmp_path)["archive/a.warc.gz"]
    package = _package(
        tmp_path / "x.wacz", {"archive/a.warc.gz": data[:-40]}, deflate=deflate
    )  # hashed as cut
    with WebIndex(tmp_path / "s") as index, pytest.raises(WarcError) as caught:
        import_wacz(index, [package])
    assert str(caught.value).startswith(f"{package}!archive/a.warc.gz@") and "truncated" in str(caught.value)
