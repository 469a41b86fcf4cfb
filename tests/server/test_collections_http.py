"""`web-index serve --config collections.yaml` over real HTTP: a second `web-index serve` is the
remote CDX server and Memento archive, a deliberately slow server tests the timeouts, a local
site the `$live` collection; every Resource API answer is read by warcio with its digests
checked. Also what the server refuses: the cloud-metadata address through `$live`, a bad
collections.yaml (one line, exit 2), and cross-origin reads (no CORS headers)."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
from warcio.archiveiterator import ArchiveIterator

from tests.factories import metadata
from tests.servers import free_port, wait_port
from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, reply
from web_index.models import Response

T0 = datetime(2024, 6, 1, 12, tzinfo=UTC)
WEB_INDEX = str(Path(sys.executable).parent / "web-index")


def _page(url: str, at: datetime, body: bytes) -> Response:
    return Response(
        url=url, request_url=url, status_code=200, headers={"content-type": "text/html"}, timestamp=at,
        data=body, is_final=True, fetcher_name="test", fetcher_version="1.0", fetcher_calibre=10,
    )  # fmt: skip


def _fill(path: Path, pages: dict[str, list[tuple[datetime, bytes]]]) -> None:
    with WebIndex(path) as index:
        for url, versions in pages.items():
            for at, body in versions:
                index.insert("get", url, at, metadata(url), [_page(url, at, body)])
        index.flush()


class Served:
    """``web-index serve`` in a process of its own, on a free loopback port."""

    def __init__(self, store: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [WEB_INDEX, "serve", "--store", str(store), "--port", str(self.port), *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            wait_port(self.port)
        except Exception:
            self.stop()
            raise AssertionError(self.errors()) from None

    def errors(self) -> str:
        self.stop()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("served-collections")
    local = {
        "http://example.com/a": [(T0, b"<html>local a 1</html>"), (T0 + timedelta(days=9), b"local a 2")]
    }
    remote = {
        "http://example.com/a": [(T0 + timedelta(days=4), b"<html>remote a</html>")],
        "http://example.com/r": [(T0 + timedelta(days=2), b"<html>remote only</html>")],
    }
    _fill(base / "local", local)
    _fill(base / "remote", remote)
    WebIndex(base / "cache").close()

    def slow(r: BaseHTTPRequestHandler) -> None:
        time.sleep(4)
        reply(r, 404, "")

    def page(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, f"<html>live {r.path}</html>")

    others = LocalServer({"/slow/*": slow, "/*": page}).start()
    far = Served(base / "remote")
    (base / "collections.yaml").write_text(
        "collections:\n"
        f"  far: cdx+{far.url}/store/cdx\n"
        f"  far-memento: memento+{far.url}/store/\n"
        "  many:\n"
        "    index_group:\n"
        "      near: local\n"
        f"      far: cdx+{far.url}/store/cdx\n"
        f"      late: cdx+{others.url('/slow/cdx')} {others.base_url}/slow/\n"
        "    index_timeout: 1.0\n"
        "  live:\n"
        "    sequence:\n"
        "      - index: cache\n"
        "      - index: $live\n"
    )
    closed = free_port()  # nothing listens there: an archive that is down
    with (base / "collections.yaml").open("a") as fh:
        fh.write(f"  down: cdx+http://127.0.0.1:{closed}/store/cdx\n")
    near = Served(base / "local", "--config", str(base / "collections.yaml"), "--allow-loopback")
    try:
        with httpx.Client(base_url=near.url, timeout=30) as http:
            yield {"http": http, "base": base, "remote": remote, "local": local, "others": others, "far": far}
    finally:
        near.stop()
        far.stop()
        others.stop()


def _record(answer: httpx.Response) -> tuple[Any, bytes]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"] == "application/warc-record"
    records = []
    for record in ArchiveIterator(io.BytesIO(answer.content), check_digests="raise"):
        records.append((record, record.content_stream().read()))
    assert len(records) == 1
    return records[0]


def test_a_group_merges_its_sources_and_skips_the_late_one(world: dict[str, Any]) -> None:
    started = time.monotonic()
    answer = world["http"].get(
        "/many/cdx", params={"url": "example.com/a", "closest": "20240606", "output": "json"}
    )
    assert time.monotonic() - started < 3.5  # the late source's 4 s are not waited for
    lines = [httpx.Response(200, content=line).json() for line in answer.content.splitlines()]
    assert [(x["source"], x["source_type"], x["timestamp"]) for x in lines] == [
        ("far", "cdx", "20240605120000"),  # "20240606" is the end of that day: 1.5, 3.5, 5.5 days
        ("near", "web-index", "20240610120000"),
        ("near", "web-index", "20240601120000"),
    ]
    assert lines[0]["live_url"] == f"{world['far'].url}/store/20240605120000id_/http://example.com/a"


def test_remote_captures_load_as_warc_records(world: dict[str, Any]) -> None:
    http = world["http"]
    for coll in ("far", "far-memento"):
        answer = http.get(f"/{coll}/resource", params={"url": "http://example.com/r", "closest": "2024"})
        record, payload = _record(answer)
        assert payload == b"<html>remote only</html>"
        assert record.rec_headers.get_header("WARC-Target-URI") == "http://example.com/r"
        assert record.rec_headers.get_header("WARC-Date") == "2024-06-03T12:00:00Z"
        assert answer.headers["archive-source-coll"] == coll
        assert answer.headers["memento-datetime"] == "Mon, 03 Jun 2024 12:00:00 GMT"
        memento = http.get(f"/{coll}/20240603120000id_/http://example.com/r")
        assert memento.status_code == 200 and memento.content == b"<html>remote only</html>"
    # Without closest, the latest capture of the group (the local store's), as for the store alone.
    _, payload = _record(http.get("/many/resource", params={"url": "http://example.com/a"}))
    assert payload == b"local a 2"
    # In a group, the closest capture is loaded from where its row points.
    record, payload = _record(
        http.get("/many/resource", params={"url": "http://example.com/a", "closest": "20240606"})
    )
    assert payload == b"<html>remote a</html>"


def test_a_live_collection_records_what_it_fetched(world: dict[str, Any]) -> None:
    http, site = world["http"], world["others"]
    url = site.url("/fresh")
    answer = http.get("/live/cdx", params={"url": url, "output": "json"})
    assert answer.json()["source_type"] == "live"
    _, payload = _record(http.get("/live/resource", params={"url": url}))
    assert payload == b"<html>live /fresh</html>"
    answer = http.get("/live/cdx", params={"url": url, "output": "json"})
    assert answer.json()["source_type"] == "web-index"  # served from the store now
    with WebIndex(world["base"] / "cache", read_only=True) as cache:
        assert [p.url for p in cache.scan("get")] == [url]


def test_live_never_reaches_the_cloud_metadata_address(world: dict[str, Any]) -> None:
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/latest/"):
        answer = world["http"].get("/live/resource", params={"url": url})
        assert answer.status_code == 404, url
    with WebIndex(world["base"] / "cache", read_only=True) as cache:
        assert all("169.254" not in p.url and "fd00" not in p.url for p in cache.scan("get"))
        refused = [m for m in cache.scan("get-metadata") if "169.254" in m.url or "fd00" in m.url]
        assert len(refused) == 2 and all("address policy refuses" in (m.logs or "") for m in refused)


def test_an_archive_that_is_down_is_a_503_not_a_miss(world: dict[str, Any]) -> None:
    for path in ("/down/cdx", "/down/resource", "/down/timemap/link/http://example.com/a"):
        answer = world["http"].get(path, params={"url": "http://example.com/a"})
        assert answer.status_code == 503, (path, answer.text)
        assert "source down" in answer.json()["error"]


def test_no_cross_origin_reads_and_unknown_collections(world: dict[str, Any]) -> None:
    http = world["http"]
    answer = http.get("/far/cdx", params={"url": "example.com/r"}, headers={"origin": "https://evil.test"})
    assert answer.status_code == 200 and not any(k.startswith("access-control-") for k in answer.headers)
    preflight = http.options(
        "/api/query", headers={"origin": "https://evil.test", "access-control-request-method": "POST"}
    )
    assert "access-control-allow-origin" not in preflight.headers
    missing = http.get("/nowhere/cdx", params={"url": "example.com/"})
    assert missing.status_code == 404
    assert "down, far, far-memento, live, many, store" in missing.json()["error"]


def test_a_bad_collections_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    WebIndex(tmp_path / "store").close()
    config = tmp_path / "collections.yaml"
    config.write_text("collections:\n  x:\n    index: $live\n    index_timeout: -1\n")
    done = subprocess.run(
        [
            WEB_INDEX,
            "serve",
            "--store",
            str(tmp_path / "store"),
            "--port",
            str(free_port()),
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert f"{config}: collections.x.index_timeout" in done.stderr and "Traceback" not in done.stderr
