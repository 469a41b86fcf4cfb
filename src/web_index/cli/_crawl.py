"""The crawl and site-search commands: ``crawl``, ``search`` and ``worker``."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape

from web_index.cli._app import (
    EXIT_FOUND_NOTHING,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    AllowLoopback,
    AllowPrivate,
    BufferOption,
    StoreOption,
    app,
    cli_errors,
    err,
    fail,
    new_table,
    open_index,
    out,
    plural,
    say,
    store_location,
)
from web_index.cli._crawl_report import CrawlDisplay, report_crawl
from web_index.cli._fetch import fetch_config, parse_calibre
from web_index.search import MAX_LIMIT, MAX_OFFSET

if TYPE_CHECKING:
    from web_index.fetch import FetchConfig
    from web_index.search import SearchPage

__all__ = ["crawl", "search", "worker"]

QueueOption = Annotated[
    str | None,
    typer.Option(
        "--queue",
        envvar="WEB_INDEX_QUEUE",
        help="Broker: sqlite:///PATH or redis://HOST:PORT/DB (default: a SQLite file beside the store).",
        show_default=False,
    ),
]
Calibre = Annotated[str, typer.Option(help="Calibre to start at: a number or http, browser, ...")]
MaxCalibre = Annotated[str, typer.Option(help="Highest calibre escalation may reach.")]
Concurrency = Annotated[int, typer.Option(min=1, help="Pages in flight at once.")]
PerDomain = Annotated[int, typer.Option(min=1, help="Attempts in flight per domain.")]
Delay = Annotated[float, typer.Option(min=0, help="Seconds between attempt starts on one domain.")]
IgnoreRobots = Annotated[bool, typer.Option(help="Do not obey robots.txt.")]


@app.command("crawl")
def crawl(
    url: Annotated[str, typer.Argument(help="The page to start from.", show_default=False)],
    store: StoreOption = "",
    buffer: BufferOption = None,
    queue: QueueOption = None,
    scope: Annotated[
        str,
        typer.Option(
            help="What to follow: host, domain (registrable), prefix (the seed's directory:"
            " http://h/docs/index.html follows http://h/docs/), allow."
        ),
    ] = "host",
    allow: Annotated[
        list[str] | None, typer.Option(help="With --scope allow: a host (and its subdomains) or URL prefix.")
    ] = None,
    max_pages: Annotated[int, typer.Option(min=1, help="Pages to visit at most.")] = 1000,
    max_depth: Annotated[int, typer.Option(min=0, help="Links away from URL at most.")] = 5,
    page_requisites: Annotated[
        bool,
        typer.Option(
            "--page-requisites",
            "-p",
            help="Also record what each page needs to render (stylesheets, scripts, images, fonts,"
            " frames; from any host allowed), so that a replay shows it as it was.",
        ),
    ] = False,
    max_requisites: Annotated[
        int, typer.Option(min=1, help="Requisites to fetch at most, apart from --max-pages.")
    ] = 10_000,
    settle: Annotated[
        float,
        typer.Option(
            min=0.1,
            help="Seconds without a new page before the site is packed, while other workers on the"
            " broker may still bring pages; with nothing left queued, it is packed at once.",
        ),
    ] = 10.0,
    calibre: Calibre = "http",
    max_calibre: MaxCalibre = "http",
    concurrency: Concurrency = 16,
    per_domain: PerDomain = 8,
    delay: Delay = 0.0,
    ignore_robots: IgnoreRobots = False,
    allow_loopback: AllowLoopback = False,
    allow_private: AllowPrivate = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as one JSON object.")] = False,
    timeout: Annotated[
        float | None,
        typer.Option(min=1, help="Give up (exit 5) if the site has not settled after this many seconds."),
    ] = None,
) -> None:
    """Crawl a site into the store and publish its search database.

    Every attempt is recorded in the store like any fetch; the text of each
    page is packed into a full-text database once the site has settled: at once
    when nothing is left to fetch, else after --settle seconds without a new page.
    Exits 0 when the database holds at
    least one page, 1 when it holds none, 5 when --timeout ran out first.
    """
    from web_index.crawl import MessageError, crawl_site
    from web_index.errors import InvalidRecordError

    if scope not in ("host", "domain", "prefix", "allow"):
        raise fail(EXIT_USAGE, f"--scope must be host, domain, prefix or allow, not {scope!r}")
    if scope == "allow" and not allow:
        raise fail(EXIT_USAGE, "--scope allow needs at least one --allow HOST or URL prefix")
    config = _fetching(
        calibre, max_calibre, allow_loopback, allow_private, ignore_robots, concurrency, per_domain, delay
    )
    location = store_location(store)
    display = CrawlDisplay(enabled=err.is_terminal and not as_json)
    with cli_errors(location), open_index(location, buffer, create=True) as index, display:
        try:
            result = asyncio.run(
                crawl_site(
                    index,
                    url,
                    scope=scope,  # type: ignore[arg-type]
                    allow=tuple(allow or ()),
                    max_pages=max_pages,
                    max_depth=max_depth,
                    settle=settle,
                    config=config,
                    broker=queue,
                    in_flight=8 * concurrency,
                    on_progress=display.update,
                    timeout=timeout,
                    requisites=page_requisites,
                    max_requisites=max_requisites,
                )
            )
        except (MessageError, InvalidRecordError, ValueError) as exc:  # the seed, the scope, the queue URL
            raise fail(EXIT_USAGE, str(exc)) from None
        except TimeoutError as exc:  # what was fetched stays recorded; the queue keeps the rest
            raise fail(
                EXIT_UNAVAILABLE, f"{exc}: what was fetched is recorded, the rest stays queued"
            ) from None
    report_crawl(result, as_json=as_json, requisites=page_requisites)
    raise typer.Exit(EXIT_OK if result.pages else EXIT_FOUND_NOTHING)


def _fetching(
    calibre: str,
    max_calibre: str,
    allow_loopback: bool,
    allow_private: bool,
    ignore_robots: bool,
    concurrency: int,
    per_domain: int,
    delay: float,
) -> FetchConfig:
    """The fetch settings ``crawl`` and ``worker`` share; a bad calibre exits 2."""
    try:
        low, high = parse_calibre(calibre), parse_calibre(max_calibre)
    except typer.BadParameter as exc:
        raise fail(EXIT_USAGE, str(exc)) from None
    return fetch_config(
        low,
        high,
        allow_loopback=allow_loopback,
        allow_private=allow_private,
        ignore_robots=ignore_robots,
        concurrency=concurrency,
        per_domain=per_domain,
        delay=delay,
    )


@app.command("search")
def search(
    site: Annotated[
        str,
        typer.Argument(
            help="The site: host[:port] as `crawl` printed it, or a URL of it.", show_default=False
        ),
    ],
    query: Annotated[
        str, typer.Argument(help='Words to find; "a phrase", pre*, a OR b.', show_default=False)
    ],
    store: StoreOption = "",
    limit: Annotated[
        int, typer.Option(min=1, max=MAX_LIMIT, help="Results per page, with or without --queue.")
    ] = 10,
    offset: Annotated[int, typer.Option(min=0, max=MAX_OFFSET, help="Results to skip.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per result.")] = False,
    queue: Annotated[
        str | None,
        typer.Option(
            help="Ask the searchers of this broker (routed by its orchestrator)"
            " instead of reading the published database here."
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds to wait for a routed answer.")] = 10.0,
) -> None:
    """Search a crawled site's published database: ranked url, title, snippet, score.

    Exits 0 with results, 1 with none, 2 for a site with no database, 5 when
    no searcher answered a routed search in time.
    """
    from web_index.crawl import MessageError, search_site, site_asked
    from web_index.errors import SearchError, SearchUnavailableError

    location = store_location(store)
    with cli_errors(location):
        try:
            site = site_asked(site)
            if queue is not None:
                page = _routed(queue, site, query, limit, offset, timeout)
            else:
                with open_index(location, None, read_only=True) as index:
                    page = search_site(index, site, query, limit=limit, offset=offset)
        except SearchUnavailableError as exc:
            raise fail(EXIT_UNAVAILABLE, str(exc)) from None
        except (SearchError, MessageError) as exc:  # no database for the site, a bad name, an empty query
            raise fail(EXIT_USAGE, str(exc)) from None
    if as_json:
        for hit in page.hits:
            score = float(f"{hit.score:.6g}")
            row = {"url": hit.url, "title": hit.title, "snippet": hit.snippet, "score": score}
            print(json.dumps(row), flush=True)
    else:
        table = new_table(
            "#", "url", "title", "snippet", "score", title=f"{_matching(page.total)}", right=("#", "score")
        )
        for n, hit in enumerate(page.hits, start=offset + 1):
            snippet = escape(hit.snippet).replace("<mark>", "[bold]").replace("</mark>", "[/bold]")
            table.add_row(str(n), hit.url, escape(hit.title), snippet, f"{hit.score:.3g}")
        out.print(table)
    if not page.hits:
        where = f" past the first {offset}" if offset else ""
        say("[bold red]error:[/]", f"no hit{where}: {_matching(page.total, f' of {site}')} {query!r}")
        raise typer.Exit(EXIT_FOUND_NOTHING)
    raise typer.Exit(EXIT_OK)


def _matching(total: int, of: str = "") -> str:
    return f"{plural(total, 'page')}{of} match{'es' if total == 1 else ''}"


def _routed(queue: str, site: str, query: str, limit: int, offset: int, timeout: float) -> SearchPage:
    from web_index.crawl import SearchRouter, open_broker

    try:
        broker = open_broker(queue)
    except ValueError as exc:
        raise fail(EXIT_USAGE, str(exc)) from None
    router = SearchRouter(broker, timeout=timeout)
    try:
        return router.search(site, query, limit=limit, offset=offset)
    finally:
        router.close()
        broker.close()


@app.command("worker")
def worker(
    role: Annotated[
        list[str],
        typer.Option(help="indexer, crawler, timer, packer, orchestrator or searcher; repeat for several."),
    ],
    store: StoreOption = "",
    buffer: BufferOption = None,
    queue: QueueOption = None,
    calibre: Calibre = "http",
    max_calibre: MaxCalibre = "http",
    concurrency: Concurrency = 16,
    per_domain: PerDomain = 8,
    delay: Delay = 0.0,
    ignore_robots: IgnoreRobots = False,
    allow_loopback: AllowLoopback = False,
    allow_private: AllowPrivate = False,
    workdir: Annotated[
        Path | None, typer.Option(help="Where packers build databases and searchers keep theirs.")
    ] = None,
    searcher_id: Annotated[
        str | None, typer.Option(help="A searcher's name on the queue (default: a new random one).")
    ] = None,
    capacity_mb: Annotated[
        int | None,
        typer.Option(min=0, help="MB a searcher may fill with databases (default: its disk's free space)."),
    ] = None,
    heartbeat: Annotated[
        float, typer.Option(min=0.1, help="Seconds between a searcher's heartbeats (silent for 3: gone).")
    ] = 5.0,
    log_level: Annotated[
        str, typer.Option(help="What the roles log to stderr: debug, info, warning or error.")
    ] = "warning",
    lease: Annotated[
        float | None,
        typer.Option(
            min=1, help="Seconds a message is held before another worker may take it (default: per role)."
        ),
    ] = None,
) -> None:
    """Run pipeline roles against a broker until SIGINT or SIGTERM."""
    from web_index.crawl import ROLES, build_roles, run_worker

    level = logging.getLevelName(log_level.upper())
    if log_level.lower() not in ("debug", "info", "warning", "error") or not isinstance(level, int):
        raise fail(EXIT_USAGE, f"--log-level {log_level!r}: give debug, info, warning or error")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    unknown = sorted(set(role) - set(ROLES))
    if unknown:
        raise fail(EXIT_USAGE, f"--role {unknown[0]!r}: give {', '.join(ROLES[:-1])} or {ROLES[-1]}")
    config = _fetching(
        calibre, max_calibre, allow_loopback, allow_private, ignore_robots, concurrency, per_domain, delay
    )
    location = store_location(store)
    with cli_errors(location), open_index(location, buffer, create=True) as index:

        async def main() -> None:
            broker, roles, stats = build_roles(
                index,
                role,
                broker=queue,
                config=config,
                workdir=workdir,
                searcher_id=searcher_id,
                capacity_mb=capacity_mb,
                heartbeat=heartbeat,
            )
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            say("", f"worker: {', '.join(role)} on {broker.url}")
            await run_worker(broker, roles, stop, in_flight=8 * concurrency, stats=stats, lease=lease)
            broker.close()

        try:
            asyncio.run(main())
        except ValueError as exc:
            raise fail(EXIT_USAGE, str(exc)) from None
    raise typer.Exit(EXIT_OK)
