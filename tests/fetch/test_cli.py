"""``web-index fetch`` and ``web-index demo``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from web_index import WebIndex
from web_index.cli import _fetch  # noqa: F401 - registers the commands
from web_index.cli._app import EXIT_USAGE, app
from web_index.cli._demo import run_demo
from web_index.cli._sample_site import LocalServer
from web_index.models import AttemptMetadata, Page, SimplePageQuery

runner = CliRunner()
LOCAL_HTTP = ["--allow-loopback", "--max-calibre", "http", "--max-retries", "0", "--timeout", "2"]


def test_fetch_urls_into_the_store(server: LocalServer, tmp_path: Path) -> None:
    store = tmp_path / "store"
    urls = [server.url("/ok?cli"), server.url("/auth"), server.url("/private/page")]
    result = runner.invoke(app, ["fetch", "--store", str(store), *LOCAL_HTTP, *urls])
    assert result.exit_code == 0, result.output
    assert "unauthorised" in result.output and "success" in result.output
    with WebIndex(store) as index:
        page, auth, private = index.query(
            [
                SimplePageQuery(url=urls[0]),
                SimplePageQuery(url=urls[1], type="get-metadata"),
                SimplePageQuery(url=urls[2], type="get-metadata"),
            ]
        )
    assert isinstance(page, Page)
    assert isinstance(auth, AttemptMetadata) and auth.state == "unauthorised"
    assert isinstance(private, AttemptMetadata) and private.logs and "robots.txt" in private.logs


def test_fetch_from_file_as_json(server: LocalServer, tmp_path: Path) -> None:
    listing = tmp_path / "urls.txt"
    listing.write_text(f"# a comment\n{server.url('/ok?file')}\n\n{server.url('/redirect/1')}\n")
    result = runner.invoke(
        app,
        ["fetch", "--from", str(listing), "--json", "--method", "head", *LOCAL_HTTP],
        env={"WEB_INDEX_STORE": str(tmp_path / "env-store")},
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert [r["state"] for r in rows] == ["success", "success"]
    assert rows[0]["key"]["type"] == "head"
    assert (tmp_path / "env-store").exists()


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--calibre", "bazooka", "http://example.com/"],
        ["--calibre", "browser", "--max-calibre", "http", "http://example.com/"],
        ["--method", "post", "http://example.com/"],
        ["not a url"],
    ],
)
def test_usage_errors(args: list[str], tmp_path: Path) -> None:
    result = runner.invoke(app, ["fetch", "--store", str(tmp_path / "s"), *args])
    assert result.exit_code == EXIT_USAGE, result.output


def test_demo(tmp_path: Path, closed_port: int, chromium_or_none: str | None) -> None:
    chromium = chromium_or_none or "/nonexistent/chromium"
    code = run_demo(tmp_path / "demo", chromium=chromium, slow_seconds=2.0, timeout=1.0, port=closed_port)
    assert code == 0
    base = f"http://127.0.0.1:{closed_port}"
    expected = {
        "/": "success",
        "/old-about": "success",
        "/app": "success" if chromium_or_none else "low-quality",
        "/protected": "blocked",
        "/slow": "timeout",
        "/private": "error",
        "/missing": "success",
    }
    with WebIndex(tmp_path / "demo") as index:
        metas = index.query([SimplePageQuery(url=base + path, type="get-metadata") for path in expected])
        [redirected] = index.query([SimplePageQuery(url=base + "/old-about")])
    assert [getattr(m, "state", None) for m in metas] == list(expected.values())
    assert isinstance(redirected, Page) and [r.status_code for r in redirected.responses] == [301, 200]
    with WebIndex(tmp_path / "demo", read_only=True) as index:
        stats = index.stats()  # left compacted: Parquet files to look at, nothing buffered
    assert stats.buffered_attempts == 0 and stats.partitions
    assert all(p.compacted and p.part_files == 0 for p in stats.partitions)


def test_a_refused_address_is_named_and_nothing_fetched_exits_1(server: LocalServer, tmp_path: Path) -> None:
    url = server.url("/ok?refused")
    result = runner.invoke(app, ["fetch", "--store", str(tmp_path / "s"), "--max-calibre", "http", url])
    assert result.exit_code == 1, result.output
    last = result.stderr.strip().splitlines()[-1]
    assert "nothing was fetched: address policy refuses 127.0.0.1" in last
    assert "--allow-loopback" in last and "robots" not in last
    with WebIndex(tmp_path / "s") as index:  # the refused attempt is recorded all the same
        [meta] = index.query([SimplePageQuery(url=url, type="get-metadata")])
    assert isinstance(meta, AttemptMetadata) and meta.state == "error"


def test_the_demo_port_is_fixed_and_a_taken_one_is_said(tmp_path: Path) -> None:
    import socket

    from web_index.cli._fetch import DEMO_PORT

    assert DEMO_PORT == 8421
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["demo", "--store", str(tmp_path / "d"), "--port", str(port)])
    assert result.exit_code == EXIT_USAGE
    assert f"port {port} of 127.0.0.1 is taken" in result.stderr and "--port" in result.stderr


def test_the_demo_as_json(tmp_path: Path, closed_port: int) -> None:
    args = ["demo", "--store", str(tmp_path / "d"), "--port", str(closed_port), "--json"]
    result = runner.invoke(app, [*args, "--chromium", "/nonexistent/chromium", "--slow-seconds", "2"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]  # nothing but JSON on stdout
    by_path = {r["url"].removeprefix(f"http://127.0.0.1:{closed_port}"): r for r in rows}
    assert by_path["/"]["page"] is True and by_path["/"]["status_code"] == 200
    assert by_path["/old-about"]["hops"] == 2
    assert by_path["/protected"] == {**by_path["/protected"], "state": "blocked", "page": False}
