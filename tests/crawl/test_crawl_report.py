"""What ``web-index crawl`` says when pages fail or the scope stops it (issue 37):
a refused seed's reason on stderr whatever the queue, errors counted by state
and reason with their first URLs (in ``--json`` too), and ``--scope prefix``
taken as the seed's directory, said, and warned about when it stops the crawl."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.servers import Redis
from web_index.cli import app
from web_index.cli._sample_site import LocalServer, reply
from web_index.crawl import CrawlSpec, FailureGroup, in_scope, scope_prefix
from web_index.crawl._failures import GROUPS_KEPT, OTHER, URLS_KEPT, FailureTally


def robots(r: BaseHTTPRequestHandler) -> None:
    reply(r, 200, "User-agent: *\nDisallow:\n", content_type="text/plain")


def html(*links: str, words: str = "Some words of a page.") -> str:
    anchors = "".join(f'<a href="{link}">{link}</a> ' for link in links)
    return f"<html><head><title>t</title></head><body><p>{words}</p><p>{anchors}</p></body></html>"


def crawl(runner: CliRunner, tmp: Path, seed: str, *extra: str) -> Result:
    args = ["crawl", seed, "--store", str(tmp / "store"), "--settle", "0.3", "--timeout", "60", *extra]
    return runner.invoke(app, args)


@pytest.fixture(params=["embedded", "redis"])
def queue(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "embedded":
        return []
    server: Redis = request.getfixturevalue("redis_server")
    return ["--queue", server.url()]


def test_a_refused_seed_says_why_and_which_flag_allows_it(tmp_path: Path, queue: list[str]) -> None:
    runner = CliRunner()
    with LocalServer({"/robots.txt": robots, "/": lambda r: reply(r, 200, html())}) as site:
        done = crawl(runner, tmp_path, site.url("/"), *queue)
        assert done.exit_code == 1, done.output
        lines = done.stderr.strip().splitlines()
        assert lines[0] == (
            f"error: nothing was crawled: {site.url('/')} (error): address policy refuses 127.0.0.1:"
            " 127.0.0.1 is loopback (allow_loopback, --allow-loopback)"
        )
        as_json = crawl(runner, tmp_path, site.url("/"), *queue, "--json")
        assert as_json.exit_code == 1
        result = json.loads(as_json.stdout)
        assert (result["pages"], result["errors"]) == (0, 1)
        (group,) = result["failures"]
        assert (group["state"], group["count"], group["urls"]) == ("error", 1, [site.url("/")])
        assert "--allow-loopback" in group["reason"]


def test_a_crawl_with_errors_counts_them_by_state_and_reason(tmp_path: Path) -> None:
    broken = [f"/broken/{i}" for i in range(URLS_KEPT + 2)]

    def home(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, html(*broken, "/data.bin", "/fine"))

    routes = {
        "/robots.txt": robots,
        "/": home,
        "/fine": lambda r: reply(r, 200, html()),
        "/broken/*": lambda r: reply(r, 500, "<p>down</p>"),
        "/data.bin": lambda r: reply(r, 200, b"\x00\x01", content_type="application/octet-stream"),
    }
    runner = CliRunner()
    with LocalServer(routes) as site:
        done = crawl(runner, tmp_path, site.url("/"), "--allow-loopback", "--json")
        assert done.exit_code == 0, done.output
        result = json.loads(done.stdout)
        assert (result["pages"], result["errors"]) == (2, len(broken) + 1)
        groups = {(g["state"], g["reason"]): g for g in result["failures"]}
        assert sum(g["count"] for g in groups.values()) == result["errors"]
        not_html = groups[("success", "not HTML (application/octet-stream)")]
        assert (not_html["count"], not_html["urls"]) == (1, [site.url("/data.bin")])
        (server_error,) = [g for (state, _), g in groups.items() if state != "success"]
        assert server_error["count"] == len(broken)
        assert len(server_error["urls"]) == URLS_KEPT
        assert set(server_error["urls"]) < {site.url(p) for p in broken}
        # The same on stderr, one line a group, most frequent first.
        lines = done.stderr.strip().splitlines()
        assert lines[0] == f"warning: {len(broken) + 1} pages gave no text:"
        assert lines[1].startswith(f"  {len(broken)} x {server_error['state']}: {server_error['reason']}: ")
        assert lines[1].endswith(", ...")
        assert lines[2] == f"  1 x success: not HTML (application/octet-stream): {site.url('/data.bin')}"


def test_a_prefix_crawl_follows_the_seeds_directory_and_says_so(tmp_path: Path) -> None:
    requested: list[str] = []

    def page(r: BaseHTTPRequestHandler) -> None:
        requested.append(r.path)
        reply(r, 200, html("/std/a.html", "b.html", "/std/sub/c.html", "/other/d.html", "/std-x/e.html"))

    runner = CliRunner()
    with LocalServer({"/robots.txt": robots, "/*": page}) as site:
        done = crawl(runner, tmp_path, site.url("/std/index.html"), "--allow-loopback", "--scope", "prefix")
        assert done.exit_code == 0, done.output
        # b.html is relative: /std/b.html from /std/, /std/sub/b.html from /std/sub/c.html
        inside = ["/std/a.html", "/std/b.html", "/std/index.html", "/std/sub/b.html", "/std/sub/c.html"]
        assert sorted(requested) == inside
        assert done.stderr.strip().splitlines() == [f"scope: URLs under {site.url('/std/')}"]
        as_json = crawl(
            runner, tmp_path, site.url("/std/index.html"), "--allow-loopback", "--scope", "prefix", "--json"
        )
        result = json.loads(as_json.stdout)
        assert result["scope_prefix"] == site.url("/std/") and result["pages"] == len(inside)


def test_a_crawl_that_stops_at_its_seed_for_want_of_scope_warns(tmp_path: Path) -> None:
    routes = {"/robots.txt": robots, "/*": lambda r: reply(r, 200, html("/elsewhere/1", "/elsewhere/2"))}
    runner = CliRunner()
    with LocalServer(routes) as site:
        done = crawl(runner, tmp_path, site.url("/std/"), "--allow-loopback", "--scope", "prefix", "--json")
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["out_of_scope"] == 2
        assert done.stderr.strip().splitlines()[-1] == (
            f"warning: the crawl ended after its seed: its 2 links are outside the scope (URLs under"
            f" {site.url('/std/')}); widen it with --scope host, domain or allow --allow URL-PREFIX"
        )
        host = crawl(runner, tmp_path, site.url("/std/"), "--allow-loopback", "--json")
        assert json.loads(host.stdout)["pages"] == 3 and "warning" not in host.stderr


@pytest.mark.parametrize(
    ("seed", "prefix"),
    [
        ("http://h.test/std/index.html", "http://h.test/std/"),
        ("http://h.test/std/", "http://h.test/std/"),
        ("http://h.test/std", "http://h.test/"),
        ("http://h.test", "http://h.test/"),
        ("https://H.test:443/a/b/c.html?x=1#top", "https://h.test/a/b/"),
    ],
)
def test_the_prefix_of_a_seed_is_its_directory(seed: str, prefix: str) -> None:
    assert scope_prefix(seed) == prefix
    spec = CrawlSpec(id="c", seed=seed, scope="prefix")
    assert in_scope(prefix + "deeper/page", spec) and in_scope(prefix, spec)
    assert not in_scope(prefix.rstrip("/") + "-sibling/", spec) or prefix.endswith("//")


def test_a_tally_keeps_a_bounded_summary() -> None:
    tally = FailureTally()
    for i in range(GROUPS_KEPT + 10):
        for j in range(3):
            tally.add("error", f"reason {i}", f"http://h.test/{i}/{j}")
    groups = tally.groups()
    assert len(groups) == GROUPS_KEPT + 1 and len(tally) == 3 * (GROUPS_KEPT + 10)
    first_other = [f"http://h.test/{i}/{j}" for i in (GROUPS_KEPT, GROUPS_KEPT + 1) for j in range(3)]
    assert groups[0] == FailureGroup("error", OTHER, 30, tuple(first_other[:URLS_KEPT]))
    assert all(g.count == 3 for g in groups[1:])


def test_a_crawl_of_a_gone_seed_says_so(tmp_path: Path) -> None:
    gone = {"/robots.txt": robots, "/*": lambda r: reply(r, 404, "<p>gone</p>")}
    with LocalServer(gone) as site:
        done = crawl(CliRunner(), tmp_path, site.url("/"), "--allow-loopback")
    assert done.exit_code == 1
    assert done.stderr.strip().splitlines() == ["error: nothing was crawled: no page with text in 1 attempt"]
