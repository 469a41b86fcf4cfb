"""Collections over real sources: one store, its WARC + CDXJ export, a second
``web-index serve`` over it as a remote CDX server and Memento archive, a
deliberately slow server and a broken one. Every source must find what the
store finds (the store's own CDX queries are the reference), merged groups
must hold each source's captures in the query's order, late and broken
sources are skipped, sequences fall back step by step, and every capture
loads to the body the store holds, from wherever its row points."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.factories import metadata
from tests.servers import Redis, free_port, wait_port
from web_index import WebIndex
from web_index.archive import (
    Collection,
    export_warcs,
    find_captures,
    open_collections,
    parse_cdx_query,
    parse_collections,
)
from web_index.cli._sample_site import LocalServer, reply
from web_index.fetch import AddressPolicy
from web_index.models import Response

T = TypeVar("T")
HOSTS = ["a.example.com", "www.a.example.com", "b.example.com", "c.example.org"]
PATHS = ["/", "/x", "/x/y", "/z?q=1"]
T0 = datetime(2024, 3, 1, tzinfo=UTC)


def _response(url: str, request_url: str, at: datetime, status: int, body: bytes, **headers: str) -> Response:
    return Response(
        url=url, request_url=request_url, status_code=status,
        headers={"content-type": "text/html", **headers}, timestamp=at, data=body, is_final=status < 300,
        fetcher_name="test", fetcher_version="1.0", fetcher_calibre=10,
    )  # fmt: skip


class Loop:
    """One event loop in a thread, for collections that outlive a test example."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("collections")
    seconds = sorted(__import__("random").Random(3).sample(range(86400 * 60), 40))
    bodies: dict[tuple[str, str], bytes] = {}
    with WebIndex(base / "store") as index:
        for n, s in enumerate(seconds):
            url = f"http://{HOSTS[n % 4]}{PATHS[n * 7 % 4]}"
            at = T0 + timedelta(seconds=s)
            body = f"<html>page {n} of {url}</html>".encode()
            if n % 9 == 4:  # a redirect chain: two captures
                hop = url.rstrip("/") + "/moved"
                chain = [
                    _response(url, url, at, 301, b"", location=hop),
                    _response(url, hop, at + timedelta(seconds=2), 200, body),
                ]
                bodies[(hop, (at + timedelta(seconds=2)).strftime("%Y%m%d%H%M%S"))] = body
            else:
                chain = [_response(url, url, at, 200, body)]
            bodies[(url, at.strftime("%Y%m%d%H%M%S"))] = chain[0].data or b""
            index.insert("get", url, at, metadata(url), chain)
        index.flush()
    export_warcs(WebIndex(base / "store", read_only=True), base / "warcs", name="w")
    port = free_port()
    remote = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "web-index"),
            "serve",
            "--store",
            str(base / "store"),
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )

    def slow(r: BaseHTTPRequestHandler) -> None:
        time.sleep(3)
        reply(r, 404, "")

    def broken(r: BaseHTTPRequestHandler) -> None:
        reply(r, 500, "down")

    others = LocalServer({"/slow/*": slow, "/broken/*": broken}).start()
    loop = Loop()
    try:
        wait_port(port)
        yield {
            "base": base,
            "remote": f"http://127.0.0.1:{port}",
            "others": others,
            "bodies": bodies,
            "loop": loop,
        }
    finally:
        loop.close()
        others.stop()
        remote.terminate()
        remote.wait(10)


def _open(world: dict[str, Any], collections: dict[str, Any]) -> dict[str, Collection]:
    specs = parse_collections({"collections": collections}, base=world["base"])
    return world["loop"].run(_opened(specs))


async def _opened(specs: Any) -> dict[str, Collection]:
    return open_collections(specs, address_policy=AddressPolicy.permissive_local(), remote_timeout=10)


@pytest.fixture(scope="module")
def singles(world: dict[str, Any]) -> Iterator[dict[str, Collection]]:
    remote = world["remote"]
    opened = _open(
        world,
        {
            "store": "store",
            "file": "warcs",
            "cdx": f"cdx+{remote}/store/cdx",
            "memento": f"memento+{remote}/store/",
        },
    )
    yield opened
    for c in opened.values():
        world["loop"].run(c.aclose())


def _key(fields: dict[str, str]) -> tuple[str, ...]:
    return tuple(fields[k] for k in ("urlkey", "timestamp", "url", "mime", "status", "digest"))


queries = st.fixed_dictionaries(
    {
        "url": st.sampled_from(
            [f"http://{h}{p}" for h in HOSTS for p in PATHS]
            + [f"{h}/x/moved" for h in HOSTS]
            + ["http://example.com/"]  # as a domain: every host above but the last
        )
    },
    optional={
        "matchType": st.sampled_from(["exact", "prefix", "host", "domain"]),
        "closest": st.integers(0, 86400 * 60).map(
            lambda s: (T0 + timedelta(seconds=s)).strftime("%Y%m%d%H%M%S")
        ),
        "from": st.sampled_from(["2024", "202403", "20240315"]),
        "limit": st.integers(1, 8).map(str),
        "filter": st.sampled_from(["=status:200", "!=status:301", "~url:.*x"]),
        "collapse": st.sampled_from(["urlkey", "timestamp:8"]),
    },
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(params=queries)
@example(params={"url": "http://example.com/", "matchType": "domain"})  # subdomains, in every source
def test_every_source_finds_what_the_store_finds(
    world: dict[str, Any], singles: dict[str, Collection], params: dict[str, str]
) -> None:
    query = parse_cdx_query({k: [v] for k, v in params.items()})
    with WebIndex(world["base"] / "store", read_only=True) as index:
        expected = [_key(f) for f, _ in find_captures(index, query, source="x")]
    for name in ("store", "file", "cdx"):
        found = world["loop"].run(singles[name].find(query))
        assert [_key(f) for f, _ in found] == expected, name
        assert {(f["source"], f["source_type"]) for f, _ in found} <= {(name, _TYPES[name])}
    found = world["loop"].run(singles["memento"].find(query))
    if query.match_type == "exact" and not query.filters:
        assert [(f["urlkey"], f["timestamp"]) for f, _ in found] == [k[:2] for k in expected]
    for fields, _ in found:
        assert fields["live_url"] == f"{world['remote']}/store/{fields['timestamp']}id_/{fields['url']}"


_TYPES = {"store": "web-index", "file": "file", "cdx": "cdx", "memento": "memento"}


def test_a_group_merges_every_source_in_closest_order(world: dict[str, Any]) -> None:
    remote = world["remote"]
    (many,) = _open(
        world, {"many": {"index_group": {"s": "store", "f": "warcs", "c": f"cdx+{remote}/store/cdx"}}}
    ).values()
    for url, stamp in list(world["bodies"])[:10]:
        query = parse_cdx_query({"url": [url], "closest": [stamp]})
        found = world["loop"].run(many.find(query))
        assert sorted(f["source"] for f, _ in found[:3]) == ["c", "f", "s"]
        assert found[0][0]["timestamp"] == stamp
        distances = [abs((m - query.closest).total_seconds()) for _, m in found]  # type: ignore[operator]
        assert distances == sorted(distances)
    world["loop"].run(many.aclose())


def test_every_capture_loads_the_stored_body_from_each_source(
    world: dict[str, Any], singles: dict[str, Collection]
) -> None:
    for (url, stamp), body in world["bodies"].items():
        query = parse_cdx_query({"url": [url], "closest": [stamp]})
        for name, collection in singles.items():
            loaded = world["loop"].run(collection.load(query))
            assert loaded is not None, (name, url)
            assert loaded.capture[0]["timestamp"] == stamp, (name, url)
            assert loaded.response.data == body, (name, url)
            assert (loaded.record is not None) == (name == "file")


def test_late_and_broken_sources_are_skipped_and_logged(
    world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    remote, others = world["remote"], world["others"].base_url
    (many,) = _open(
        world,
        {
            "many": {
                "index_group": {
                    "good": f"cdx+{remote}/store/cdx",
                    "late": f"cdx+{others}/slow/cdx",
                    "down": f"cdx+{others}/broken/cdx",
                },
                "index_timeout": 0.5,
            }
        },
    ).values()
    url, _ = next(iter(world["bodies"]))
    caplog.set_level(logging.WARNING, "web_index.archive")
    started = time.monotonic()
    found = world["loop"].run(many.find(parse_cdx_query({"url": [url]})))
    assert time.monotonic() - started < 2.5  # not the slow source's 3 s
    assert found and {f["source"] for f, _ in found} == {"good"}
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "source late skipped: no answer in 0.5 s" in messages
    assert "source down skipped" in messages and "500" in messages
    world["loop"].run(many.aclose())


def test_a_sequence_falls_back_step_by_step(world: dict[str, Any], tmp_path: Path) -> None:
    remote, others = world["remote"], world["others"].base_url
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "none.cdxj").write_text("")
    url, stamp = next(iter(world["bodies"]))
    shutil.copytree(world["base"] / "warcs", tmp_path / "warcs")
    (seq,) = _open(
        world,
        {
            "seq": {
                "sequence": [
                    {"index": str(empty)},
                    {"index": f"cdx+{others}/broken/cdx"},
                    {"index_group": {"r": f"cdx+{remote}/store/cdx"}, "index_timeout": 5},
                    {"index": f"cdx+{others}/slow/cdx"},  # never asked: the step before answers
                ]
            }
        },
    ).values()
    started = time.monotonic()
    query = parse_cdx_query({"url": [url], "closest": [stamp]})
    found = world["loop"].run(seq.find(query))
    loaded = world["loop"].run(seq.load(query))
    assert time.monotonic() - started < 2.5
    assert found and found[0][0]["source"] == "r"
    assert loaded is not None and loaded.response.data == world["bodies"][(url, stamp)]
    world["loop"].run(seq.aclose())


def _loader_cases(world: dict[str, Any], tmp: Path, redis_url: str) -> dict[str, list[str]]:
    warcs = world["base"] / "warcs"
    index_file = tmp / "paths.txt"
    index_file.write_text("".join(f"{p.name} {p}\n" for p in warcs.glob("*.warc.gz")))
    return {
        "prefix-file": [f"warc-prefix+{warcs}/"],
        "prefix-http": [f"warc-prefix+{world['others'].base_url}/warcs/"],
        "index-file": [f"warc-index+{index_file}"],
        "index-redis": [f"warc-index+{redis_url}"],
        "index-http": [f"warc-index+{world['others'].base_url}/paths.txt"],
    }


def test_warc_loaders_find_the_records(world: dict[str, Any], tmp_path: Path, redis_server: Redis) -> None:
    import redis

    warcs = world["base"] / "warcs"
    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    client.hset("wi-warcs", mapping={p.name: str(p) for p in warcs.glob("*.warc.gz")})
    client.close()
    cdxj = tmp_path / "index" / "w.cdxj"  # an index whose WARCs live elsewhere
    cdxj.parent.mkdir()
    shutil.copy(warcs / "w.cdxj", cdxj)

    def paths(r: BaseHTTPRequestHandler) -> None:  # a WARC index served over HTTP: name and URL
        reply(r, 200, "".join(f"{p.name} {files.url('/warcs/' + p.name)}\n" for p in warcs.glob("*.warc.gz")))

    def ranged(r: BaseHTTPRequestHandler) -> None:
        data = (warcs / r.path.rsplit("/", 1)[1]).read_bytes()
        first, last = r.headers["range"].removeprefix("bytes=").split("-")
        reply(r, 206, data[int(first) : int(last) + 1], content_type="application/warc")

    def local(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, "".join(f"{p.name} {p}\n" for p in warcs.glob("*.warc.gz")))

    files = LocalServer({"/warcs/*": ranged, "/paths.txt": paths, "/local.txt": local})
    with files:
        world_here = {**world, "others": files}
        cases = _loader_cases(world_here, tmp_path, f"redis://127.0.0.1:{redis_server.port}/0/wi-warcs")
        opened = _open(world, {name: {"index": str(cdxj), "resource": r} for name, r in cases.items()})
        (url, stamp), body = next(iter(world["bodies"].items()))
        query = parse_cdx_query({"url": [url], "closest": [stamp]})
        for name, collection in opened.items():
            loaded = world["loop"].run(collection.load(query))
            assert loaded is not None and loaded.response.data == body, name
            assert loaded.record is not None and loaded.record.startswith(b"WARC/1.1\r\n"), name
            world["loop"].run(collection.aclose())
        (nowhere,) = _open(
            world, {"n": {"index": str(cdxj), "resource": [f"warc-prefix+{tmp_path}/"]}}
        ).values()
        assert world["loop"].run(nowhere.load(query)) is None  # no WARC there, none beside the index
        world["loop"].run(nowhere.aclose())
        # An index served over HTTP may not point at local files (these very WARCs, readable here).
        (remote,) = _open(
            world, {"r": {"index": str(cdxj), "resource": [f"warc-index+{files.base_url}/local.txt"]}}
        ).values()
        assert world["loop"].run(remote.load(query)) is None
        world["loop"].run(remote.aclose())


def test_live_fetches_record_into_the_collections_store(world: dict[str, Any], tmp_path: Path) -> None:
    WebIndex(tmp_path / "cache").close()

    def page(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, f"<html>live {r.path}</html>")

    with LocalServer({"/*": page}) as site:
        (live,) = _open(
            world, {"live": {"sequence": [{"index": str(tmp_path / "cache")}, {"index": "$live"}]}}
        ).values()
        query = parse_cdx_query({"url": [site.url("/fresh")], "closest": ["2100"]})
        assert world["loop"].run(live.find(query))[0][0]["source_type"] == "live"
        loaded = world["loop"].run(live.load(query))
        assert loaded is not None and loaded.response.data == b"<html>live /fresh</html>"
        found = world["loop"].run(live.find(query))  # now the store has it: cache-on-write
        assert found[0][0]["source_type"] == "web-index"
        head = parse_cdx_query({"url": [site.url("/h")], "type": ["head"]})
        loaded = world["loop"].run(live.load(head))  # a HEAD question is asked with HEAD
        assert loaded is not None and loaded.response.status_code == 200 and loaded.response.data is None
        world["loop"].run(live.aclose())
    with WebIndex(tmp_path / "cache", read_only=True) as cache:
        assert [p.url for p in cache.scan("head")] == [site.url("/h")]


def test_live_refuses_metadata_and_loopback_addresses_by_default(
    world: dict[str, Any], tmp_path: Path
) -> None:
    WebIndex(tmp_path / "cache").close()
    specs = parse_collections(
        {"collections": {"live": {"sequence": [{"index": "cache"}, {"index": "$live"}]}}}, base=tmp_path
    )
    with LocalServer({"/*": lambda r: reply(r, 200, "secret")}) as site:
        for url in ("http://169.254.169.254/latest/meta-data/", site.url("/admin")):
            opened = world["loop"].run(_default_policy(specs))
            query = parse_cdx_query({"url": [url]})
            assert world["loop"].run(opened["live"].load(query)) is None, url
            world["loop"].run(opened["live"].aclose())
    with WebIndex(tmp_path / "cache", read_only=True) as cache:
        assert not list(cache.scan("get"))  # nothing fetched
        refused = {m.url: m.logs for m in cache.scan("get-metadata")}  # and the refusals recorded
        assert len(refused) == 2
        assert all("address policy refuses" in (logs or "") for logs in refused.values())


async def _default_policy(specs: Any) -> dict[str, Collection]:
    return open_collections(specs)
