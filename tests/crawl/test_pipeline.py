"""The whole pipeline in one process on the embedded broker, against loopback sites."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, crawl_site_routes, reply
from web_index.crawl import crawl_site, default_broker, search_site, site_files
from web_index.errors import InvalidURLError
from web_index.fetch import FetchConfig
from web_index.models import RecordType, SimplePageQuery
from web_index.search import decompress_pack


def crawl(index: WebIndex, seed: str, config: FetchConfig, **kw: object):  # type: ignore[no-untyped-def]
    kw.setdefault("settle", 0.5)
    kw.setdefault("timeout", 120)
    return asyncio.run(crawl_site(index, seed, config=config, **kw))  # type: ignore[arg-type]


def packed_urls(index: WebIndex, site: str, tmp: Path) -> list[str]:
    import sqlite3

    files = site_files(index)
    gen = files.latest(site)
    assert gen is not None
    files.download(site, gen, tmp / "p.zst")
    decompress_pack(tmp / "p.zst", tmp / "p.sqlite")
    with sqlite3.connect(tmp / "p.sqlite") as db:
        return [u for (u,) in db.execute("SELECT url FROM pages")]


def test_a_site_is_crawled_packed_and_searchable(
    store: WebIndex, crawl_config: FetchConfig, tmp_path: Path
) -> None:
    hits: dict[str, int] = {}
    with LocalServer(crawl_site_routes(120, hits=hits)) as site:
        result = crawl(store, site.url("/p/0"), crawl_config, max_depth=200)
        urls = packed_urls(store, result.site, tmp_path)
        # every page once, nothing else: not the robots-disallowed pages, not the other host
        assert sorted(urls) == sorted(site.url(f"/p/{i}") for i in range(120))
        assert result.pages == 120 and result.generation >= 1 and result.dead_letters == 0
        assert not [p for p in hits if p.startswith("/private/")]
        assert all(n == 1 for p, n in hits.items() if p.startswith("/p/"))
        # every attempt is in the store, like any fetch
        found = store.query(
            [SimplePageQuery(url=site.url(f"/p/{i}"), type=RecordType.GET) for i in range(120)]
        )
        assert all(page is not None for page in found)
        page = search_site(store, result.site, "token77x")
        assert page.total == 1 and page.hits[0].url == site.url("/p/77")
        assert "<mark>token77x</mark>" in page.hits[0].snippet


def test_max_pages_and_max_depth_bound_the_crawl(
    store: WebIndex, crawl_config: FetchConfig, tmp_path: Path
) -> None:
    hits: dict[str, int] = {}
    with LocalServer(crawl_site_routes(500, hits=hits)) as site:
        result = crawl(store, site.url("/p/0"), crawl_config, max_pages=40, max_depth=100)
        assert result.pages == 40
        assert sum(n for p, n in hits.items() if p.startswith("/p/")) == 40
    with LocalServer(crawl_site_routes(500, links=1)) as site:  # a chain: page i links only to i + 1
        result = crawl(store, site.url("/p/0"), crawl_config, max_depth=3)
        assert result.site == f"127.0.0.1:{site.port}"
        (tmp_path / "chain").mkdir()
        urls = packed_urls(store, result.site, tmp_path / "chain")
        assert sorted(urls) == sorted(site.url(f"/p/{i}") for i in range(4))


def _routes(extra: dict) -> dict:  # type: ignore[type-arg]
    def robots(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, "User-agent: *\nDisallow:\n", content_type="text/plain")

    return {"/robots.txt": robots, **extra}


def test_a_site_of_errors_ends_with_an_empty_database(store: WebIndex, crawl_config: FetchConfig) -> None:
    def broken(r: BaseHTTPRequestHandler) -> None:
        reply(r, 500 if "500" in r.path else 404, "<html><body>no</body></html>")

    with LocalServer(_routes({"/*": broken})) as site:
        result = crawl(store, site.url("/500"), crawl_config)
        assert (result.pages, result.dead_letters) == (0, 0)
        assert result.errors == 1 and result.fetched >= 2  # retried, then recorded as a failure


def test_a_redirect_out_of_scope_is_recorded_not_followed(store: WebIndex, crawl_config: FetchConfig) -> None:
    requested: Counter[str] = Counter()
    with LocalServer(_routes({})) as other:

        def away(r: BaseHTTPRequestHandler) -> None:
            requested[r.path] += 1
            reply(r, 302, "", {"Location": other.url("/landing")})

        def landing(r: BaseHTTPRequestHandler) -> None:
            requested["other:" + r.path] += 1
            reply(r, 200, "<html><body>elsewhere</body></html>")

        other_routes = {"/landing": landing}
        with LocalServer(_routes({"/": away, **other_routes})) as site:
            # ``other`` runs on another port of 127.0.0.1: the same host; use prefix scope to exclude it
            result = crawl(store, site.url("/"), crawl_config, scope="prefix")
            assert requested == Counter({"/": 1})
            assert result.pages == 0
            (meta,) = store.query([SimplePageQuery(url=site.url("/"), type=RecordType.GET_METADATA)])
            assert meta is not None and "not followed: outside the crawl's scope" in meta.logs


def test_hostile_pages_do_not_stop_the_crawl(store: WebIndex, crawl_config: FetchConfig) -> None:
    many = "".join(f'<a href="/x/{i}">{i}</a>' for i in range(100_000))
    nested = "<div>" * 50_000 + "deep words here" + "</div>" * 50_000

    def root(r: BaseHTTPRequestHandler) -> None:
        links = '<a href="/many">m</a><a href="/bin">b</a><a href="/deep">d</a>'
        reply(r, 200, f"<html><body><p>root</p>{links}</body></html>")

    def many_links(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, f"<html><body>{many}</body></html>")

    def binary(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, bytes(range(256)) * 200)

    def deep(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, f"<html><body>{nested}</body></html>")

    def leaf(r: BaseHTTPRequestHandler) -> None:
        reply(r, 200, "<html><body>leaf</body></html>")

    routes = _routes({"/": root, "/many": many_links, "/bin": binary, "/deep": deep, "/x/*": leaf})
    with LocalServer(routes) as site:
        result = crawl(store, site.url("/"), crawl_config, max_pages=50)
        assert result.dead_letters == 0
        assert result.pages <= 50 and result.pages >= 3  # /, /many, /deep and some of the leaves
        assert search_site(store, result.site, "deep words").hits[0].url == site.url("/deep")
        broker = default_broker(store)
        assert broker.counts("index").pending == 0  # the 100,000 links did not flood the queue
        broker.close()


def test_a_seed_that_is_not_http_is_refused(store: WebIndex, crawl_config: FetchConfig) -> None:
    with pytest.raises(InvalidURLError, match="seed"):
        crawl(store, "ftp://example.com/", crawl_config)
    with pytest.raises(InvalidURLError):
        crawl(store, "not a url", crawl_config)


def test_a_page_that_is_gone_leaves_the_database(store: WebIndex, crawl_config: FetchConfig) -> None:
    gone: set[str] = set()
    routes = crawl_site_routes(20)
    serve_page = routes["/p/*"]

    def page(r: BaseHTTPRequestHandler) -> None:
        if r.path in gone:
            reply(r, 404, "<html><body>gone</body></html>")
        else:
            serve_page(r)

    with LocalServer({**routes, "/p/*": page}) as site:
        first = crawl(store, site.url("/p/0"), crawl_config, max_depth=50)
        assert search_site(store, first.site, "token5x").total == 1
        gone.add("/p/5")
        second = crawl(store, site.url("/p/0"), crawl_config, max_depth=50)
        assert second.pages == 19 and second.dead_letters == 0
        assert search_site(store, second.site, "token5x").total == 0


def test_crawl_and_search_commands_exit_codes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from web_index.cli import app

    runner = CliRunner()
    store = str(tmp_path / "cli-store")
    with LocalServer(crawl_site_routes(10)) as site:
        args = ["crawl", site.url("/p/0"), "--store", store, "--allow-loopback", "--settle", "0.5", "--json"]
        done = runner.invoke(app, args)
        assert done.exit_code == 0, done.output
        name = f"127.0.0.1:{site.port}"
        found = runner.invoke(app, ["search", name, "token3x", "--store", store, "--json"])
        assert found.exit_code == 0 and site.url("/p/3") in found.output
        assert runner.invoke(app, ["search", name, "nosuchword", "--store", store]).exit_code == 1
    assert runner.invoke(app, ["search", "no.such.site", "x", "--store", store]).exit_code == 2
    assert runner.invoke(app, ["search", "Bad Site", "x", "--store", store]).exit_code == 2
    assert runner.invoke(app, ["search", name, "...", "--store", store]).exit_code == 2
    assert runner.invoke(app, ["crawl", "ftp://example.com/", "--store", store]).exit_code == 2
    queue = f"sqlite:///{tmp_path / 'nobody.sqlite'}"
    unanswered = runner.invoke(app, ["search", name, "token3x", "--queue", queue, "--timeout", "0.5"])
    assert unanswered.exit_code == 5
    assert unanswered.stderr.strip().splitlines() == [
        f"error: no searcher answered for '{name}' within 0.5s: are an orchestrator and a searcher running?"
    ]
    bad_role = runner.invoke(app, ["worker", "--role", "seacher", "--store", store])
    assert bad_role.exit_code == 2 and "--role 'seacher'" in bad_role.stderr

    def slowly(handler: Callable[[BaseHTTPRequestHandler], None]) -> Callable[[BaseHTTPRequestHandler], None]:
        def slow(request: BaseHTTPRequestHandler) -> None:
            time.sleep(3)  # past --timeout: a crawl with nothing queued no longer waits out --settle
            handler(request)

        return slow

    routes = {path: slowly(h) if path.startswith("/p/") else h for path, h in crawl_site_routes(10).items()}
    with LocalServer(routes) as site:
        args = ["crawl", site.url("/p/0"), "--store", store, "--allow-loopback", "--timeout", "2"]
        late = runner.invoke(app, args)
    assert late.exit_code == 5
    assert late.stderr.strip().splitlines()[-1] == (
        f"error: the crawl of 127.0.0.1:{site.port} had not settled after 2s:"
        " what was fetched is recorded, the rest stays queued"
    )


@pytest.mark.parametrize(
    ("seed", "scope", "site"),
    [
        ("http://www.example.co.uk/a", "host", "www.example.co.uk"),
        ("http://www.example.co.uk/a", "domain", "example.co.uk"),
        ("http://127.0.0.1:8421/", "host", "127.0.0.1:8421"),
        ("http://[::1]:8080/a", "host", "[::1]:8080"),
        ("http://[2001:db8::1]/", "prefix", "[2001:db8::1]"),
        ("http://my_host.example/", "host", "my_host.example"),
    ],
)
def test_the_site_a_crawl_is_packed_under(seed: str, scope: str, site: str) -> None:
    from web_index.crawl import check_site
    from web_index.crawl._pipeline import site_for

    assert site_for(seed, scope) == site  # type: ignore[arg-type]
    assert check_site(site) == site


@pytest.mark.parametrize("bad", ["../x", "[::1]/../x", "[::1", "a/b", "..", "A.example", "x" * 300])
def test_a_site_name_that_could_leave_its_folder_is_refused(bad: str) -> None:
    from web_index.crawl import MessageError, check_site

    with pytest.raises(MessageError, match="is not a lower-case host name"):
        check_site(bad)
