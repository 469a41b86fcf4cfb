"""The pywb harness (tests/archive/pywb.py) replays a WARC: the real pywb 2.10, its own venv.

A WARC written here with warcio, indexed by pywb's own ``cdx-indexer`` (from .pywb-venv), is
served by ``wayback``; every record comes back byte for byte with its status, the CDX API
lists each URL, and what the archive lacks is a 404. The same again with the index that
``wb-manager add`` builds.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from tests.archive.pywb import PywbServer, ensure_pywb_venv, pywb_bin, running_pywb

WARC_DATE = "2024-01-02T03:04:05Z"
STAMP = "20240102030405"


@dataclass(frozen=True)
class Capture:
    url: str
    status: int
    reason: str
    content_type: str
    body: bytes


CAPTURES = [
    Capture("http://example.com/", 200, "OK", "text/html; charset=utf-8", b"<p>H\xc3\xa9llo</p>"),
    Capture("https://example.org/img.bin", 200, "OK", "application/octet-stream", bytes(range(256)) * 5),
    Capture("http://example.com/gone?x=1&y=2", 404, "Not Found", "text/plain", b"no such page\n"),
]


def write_warc(path: Path, captures: list[Capture]) -> None:
    """A request and a response record per capture (gzip member per record)."""
    with path.open("wb") as fh:
        writer = WARCWriter(fh, gzip=True)
        for c in captures:
            head = StatusAndHeaders(
                f"{c.status} {c.reason}",
                [("Content-Type", c.content_type), ("Content-Length", str(len(c.body)))],
                protocol="HTTP/1.1",
            )
            response = writer.create_warc_record(
                c.url,
                "response",
                payload=BytesIO(c.body),
                http_headers=head,
                warc_headers_dict={"WARC-Date": WARC_DATE},
            )
            host = c.url.split("/")[2]
            request_head = StatusAndHeaders(
                f"GET /{c.url.split('/', 3)[3]} HTTP/1.1", [("Host", host)], is_http_request=True
            )
            request = writer.create_warc_record(
                c.url,
                "request",
                payload=BytesIO(b""),
                http_headers=request_head,
                warc_headers_dict={"WARC-Date": WARC_DATE},
            )
            writer.write_record(request)
            writer.write_record(response)


def pywb_cdxj(warc: Path, out: Path) -> None:
    """The CDXJ that pywb's own indexer writes (sorted; file names relative to the WARC's folder)."""
    subprocess.run(
        [str(pywb_bin("cdx-indexer")), "--cdxj", "--sort", "-d", str(warc.parent), "-o", str(out), str(warc)],
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module", params=["cdx-indexer", "wb-manager"])
def pywb(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PywbServer]:
    ensure_pywb_venv()
    src = tmp_path_factory.mktemp("warcs")
    warc = src / "harness.warc.gz"
    write_warc(warc, CAPTURES)
    cdxj: Path | None = None
    if request.param == "cdx-indexer":
        cdxj = src / "harness.cdxj"
        pywb_cdxj(warc, cdxj)
    with running_pywb([warc], cdxj, tmp_path_factory.mktemp("pywb")) as server:
        yield server


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda c: c.url)
def test_replays_each_record_exactly(pywb: PywbServer, capture: Capture) -> None:
    r = pywb.replay_raw(capture.url, STAMP)
    assert r.status_code == capture.status, pywb.log_tail()
    assert r.content == capture.body
    assert r.headers["content-type"] == capture.content_type
    assert r.headers["memento-datetime"] == "Tue, 02 Jan 2024 03:04:05 GMT"


def test_cdx_api_lists_each_url(pywb: PywbServer) -> None:
    for c in CAPTURES:
        rows = pywb.cdx(c.url)
        assert [(row["url"], row["timestamp"], row["status"]) for row in rows] == [
            (c.url, STAMP, str(c.status))
        ]
        assert rows[0]["filename"] == "harness.warc.gz"


def test_what_the_archive_lacks_is_404(pywb: PywbServer) -> None:
    assert pywb.replay_raw("http://example.com/not-archived", STAMP).status_code == 404
    assert pywb.replay_raw("http://example.net/", STAMP).status_code == 404
    assert pywb.cdx("http://example.com/not-archived") == []


def test_server_listens_on_loopback_only(pywb: PywbServer) -> None:
    assert pywb.base_url.startswith("http://127.0.0.1:")
    port = pywb.base_url.rsplit(":", 1)[1]
    if shutil.which("ss") is None:
        pytest.skip("ss (iproute2) not available")
    cmd = ["ss", "-Hltn", f"sport = :{port}"]
    listening = subprocess.run(cmd, capture_output=True, text=True, check=True)
    local = {line.split()[3] for line in listening.stdout.splitlines() if line.strip()}
    assert local == {f"127.0.0.1:{port}"}
