"""``GET /search`` over real HTTP: from the store's published databases, and routed
through a pipeline's orchestrator to searchers running as a worker process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.factories import publish_pack
from tests.server.serving import serving
from tests.servers import free_port, wait_port
from web_index import WebIndex
from web_index.crawl import site_files
from web_index.errors import SearchError

CLI = str(Path(sys.executable).parent / "web-index")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WebIndex]:
    with WebIndex(tmp_path / "store") as index:
        publish_pack(site_files(index), tmp_path, "a.test", 1, {"one": "alpha apples", "two": "beta apples"})
        yield index


def test_search_answers_from_the_published_database_and_sees_a_new_generation(
    store: WebIndex, tmp_path: Path
) -> None:
    with serving(store, refresh=0.2) as http:
        got = http.get("/search", params={"site": "a.test", "q": "alpha"})
        assert got.status_code == 200
        body = got.json()
        assert (body["site"], body["query"], body["total"]) == ("a.test", "alpha", 1)
        assert [h["url"] for h in body["hits"]] == ["http://a.test/one"]
        assert "<mark>alpha</mark>" in body["hits"][0]["snippet"]
        page = http.get("/search", params={"site": "a.test", "q": "apples", "limit": 1, "offset": 1}).json()
        assert (page["total"], page["offset"], page["limit"], len(page["hits"])) == (2, 1, 1, 1)

        publish_pack(site_files(store), tmp_path, "a.test", 2, {"three": "cherries"})
        deadline = time.monotonic() + 10
        while http.get("/search", params={"site": "a.test", "q": "cherries"}).json().get("total") != 1:
            assert time.monotonic() < deadline, "the new generation was never served"
            time.sleep(0.1)


@pytest.mark.parametrize(
    ("params", "status", "parameter", "says"),
    [
        ({"q": "alpha"}, 400, "site", "site: required"),
        ({"site": "a.test"}, 400, "q", "q: required"),
        ({"site": "a.test", "q": "   "}, 400, "q", "q: required"),
        ({"site": "../../etc", "q": "x"}, 400, "site", "give it as host[:port]"),
        ({"site": "a.test", "q": "x", "limit": "ten"}, 400, "limit", "'ten' is not a whole number"),
        ({"site": "a.test", "q": "x", "limit": "0"}, 400, "limit", "0 is not between 1 and 1000"),
        ({"site": "a.test", "q": "x", "offset": "-1"}, 400, "offset", "-1 is not between 0 and 10000"),
        ({"site": "a.test", "q": "()*:"}, 400, "q", "empty query"),
        ({"site": "z.test", "q": "x"}, 404, None, "no search database is published for 'z.test'"),
    ],
)
def test_bad_requests_name_the_parameter(
    store: WebIndex, params: dict[str, str], status: int, parameter: str | None, says: str
) -> None:
    with serving(store) as http:
        got = http.get("/search", params=params)
        assert got.status_code == status
        body = got.json()
        assert body.get("parameter") == parameter
        assert says in body["error"]


def worker(store: Path, queue: str, *roles: str) -> subprocess.Popen[bytes]:
    args = [CLI, "worker", "--store", str(store), "--queue", queue, "--heartbeat", "0.2"]
    for role in roles:
        args += ["--role", role]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_routed_searches_reach_a_searcher_process_and_fail_fast_without_one(
    store: WebIndex, tmp_path: Path
) -> None:
    queue = f"sqlite:///{tmp_path / 'queue.sqlite'}"
    proc = worker(tmp_path / "store", queue, "orchestrator", "searcher")
    try:
        with serving(store, queue=queue, search_timeout=2.0) as http:
            deadline = time.monotonic() + 30
            while (got := http.get("/search", params={"site": "a.test", "q": "alpha"})).status_code != 200:
                assert got.status_code == 503, got.text  # not up yet
                assert time.monotonic() < deadline, got.text
            assert [h["url"] for h in got.json()["hits"]] == ["http://a.test/one"]
            missing = http.get("/search", params={"site": "z.test", "q": "x"})
            assert missing.status_code == 404
            assert "no search database is published" in missing.json()["error"]
            assert http.get("/search", params={"site": "a.test", "q": "()"}).json()["parameter"] == "q"

            proc.terminate()
            assert proc.wait(timeout=30) == 0
            gone = http.get("/search", params={"site": "a.test", "q": "alpha"})
            assert gone.status_code == 503
            assert "no searcher answered for 'a.test' within 2s" in gone.json()["error"]
    finally:
        proc.kill()
        proc.wait()


def listening_on(port: int) -> list[str]:
    """The IPv4 addresses with a socket listening on ``port`` (from /proc/net/tcp)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:
            found.append(".".join(str(b) for b in reversed(bytes.fromhex(address))))
    return found


def test_serve_binds_loopback_by_default_and_refuses_a_bad_host(tmp_path: Path) -> None:
    """On loopback by default, and answering to the loopback's names only."""
    store = tmp_path / "store"
    WebIndex(store).close()
    bad = subprocess.run([CLI, "serve", "--store", str(store), "--host", "example.org"], capture_output=True)
    assert bad.returncode == 2
    assert bad.stderr.decode().strip().splitlines() == [
        "error: --host 'example.org': give an IP address (127.0.0.1, ::1, 0.0.0.0)"
    ]
    port = free_port()
    proc = subprocess.Popen(
        [CLI, "serve", "--store", str(store), "--port", str(port)], stderr=subprocess.PIPE
    )
    try:
        wait_port(port)
        assert listening_on(port) == ["127.0.0.1"]
        got = httpx.get(f"http://127.0.0.1:{port}/search?site=a.test&q=x")
        assert got.status_code == 404
        assert json.loads(got.text)["error"].startswith("no search database is published for 'a.test'")
        for name in ("localhost", f"localhost:{port}", "[::1]"):  # what else names the loopback
            assert httpx.get(f"http://127.0.0.1:{port}/", headers={"Host": name}).status_code == 200
        # A page elsewhere whose DNS turns its name into 127.0.0.1 (DNS rebinding) is refused.
        cdx = f"http://127.0.0.1:{port}/store/cdx?url=a.test"
        rebound = httpx.get(cdx, headers={"Host": f"evil.test:{port}"})
        assert rebound.status_code == 400
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]


def test_the_names_a_server_answers_to() -> None:
    """Loopback's names on loopback, any elsewhere (others reach it by names it cannot know),
    what ``--allowed-host`` says when given."""
    from web_index.cli._serve import allowed_hosts

    assert allowed_hosts("127.0.0.1", []) == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("127.0.0.2", []) == ["127.0.0.1", "localhost", "[::1]", "127.0.0.2"]
    assert allowed_hosts("::1", []) == allowed_hosts("localhost", []) == ["127.0.0.1", "localhost", "[::1]"]
    assert allowed_hosts("0.0.0.0", []) is None and allowed_hosts("10.0.0.5", []) is None
    assert allowed_hosts("0.0.0.0", ["Archive.Example:8080"]) == ["Archive.Example:8080"]


@pytest.mark.parametrize(
    ("given", "host", "known"),
    [
        ("127.0.0.1", "127.0.0.1:8080", True),
        ("localhost", "LOCALHOST:8080", True),
        ("[::1]", "[::1]:8080", True),
        ("::1", "[::1]", True),  # given bare
        ("Archive.Example:8080", "archive.example", True),  # a port given is no part of the name
        ("127.0.0.1", "127.0.0.1.evil.test", False),
        ("127.0.0.1", "evil.test:8080", False),
        ("[::1]", "[0:0:0:0:0:0:0:2]:80", False),
        ("127.0.0.1", "", False),
    ],
)
def test_the_host_check(given: str, host: str, known: bool) -> None:
    from web_index.server._hosts import host_name

    assert (host_name(host) == host_name(given)) is known


def test_every_role_in_one_process_on_the_embedded_broker(tmp_path: Path) -> None:
    from web_index.cli._sample_site import LocalServer, crawl_site_routes
    from web_index.crawl import CrawlSpec, IndexCrawl, SearchRouter, default_broker, encode

    store = tmp_path / "store"
    WebIndex(store).close()
    roles = ["indexer", "crawler", "timer", "packer", "orchestrator", "searcher"]
    args = [CLI, "worker", "--store", str(store), "--allow-loopback", "--heartbeat", "0.3"]
    proc = subprocess.Popen([*args, *(f"--role={r}" for r in roles)], stderr=subprocess.PIPE)
    try:
        with LocalServer(crawl_site_routes(30)) as site, WebIndex(store, read_only=True) as index:
            broker = default_broker(index)  # the worker's too: no --queue on either side
            spec = CrawlSpec(id="one-process", seed=site.url("/p/0"), max_depth=100, settle=0.5)
            broker.send("index", [encode(IndexCrawl(site=f"127.0.0.1:{site.port}", spec=spec))])
            router = SearchRouter(broker, timeout=2)
            deadline = time.monotonic() + 60
            while True:
                try:
                    page = router.search(f"127.0.0.1:{site.port}", "token29x")
                    if page.total:
                        break
                except SearchError:
                    pass  # not crawled, packed or placed yet
                assert time.monotonic() < deadline, "no answer from the one-process pipeline"
                time.sleep(0.2)
            assert page.hits[0].url == site.url("/p/29")
            router.close()
            broker.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
    assert b"Traceback" not in proc.stderr.read()  # type: ignore[union-attr]
