"""Commands that reach the web: ``fetch`` and ``demo``.

The fetch machinery (Playwright, httpx) is imported inside the commands, so
that the store commands start as fast without it.
"""

from __future__ import annotations

import errno
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from web_index.cli._app import (
    EXIT_FOUND_NOTHING,
    EXIT_OK,
    EXIT_USAGE,
    BufferOption,
    DurableOption,
    StoreOption,
    app,
    cli_errors,
    err,
    fail,
    open_index,
    out,
    read_text_input,
    say,
    store_location,
)

if TYPE_CHECKING:
    from web_index.fetch import FetchConfig, FetchOutcome

__all__ = ["demo", "fetch", "fetch_config", "parse_calibre"]


# The sample site's port: fixed, so that a second run stores the same URLs.
DEMO_PORT = 8421

_CALIBRE_NAMES = {
    "http": 10,
    "http-browser-like": 30,
    "browser": 60,
    "browser-proxy": 80,
}


def parse_calibre(value: str) -> int:
    """A calibre from a name (``http``, ``browser``, ...) or a number 0-100."""
    name = value.strip().lower().replace("_", "-")
    if name in _CALIBRE_NAMES:
        return _CALIBRE_NAMES[name]
    if name.isascii() and name.isdigit() and 0 <= int(name) <= 100:
        return int(name)
    names = ", ".join(_CALIBRE_NAMES)
    raise typer.BadParameter(f"{value!r}: give a number 0-100 or one of {names}")


def _read_urls(urls: list[str], source: Path | None) -> list[str]:
    found = list(urls)
    if source is not None:
        for line in read_text_input(source, "--from").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                found.append(line)
    # The same URL twice in one run would only fetch it twice.
    return list(dict.fromkeys(found))


@app.command("fetch")
def fetch(
    urls: Annotated[list[str] | None, typer.Argument(help="URLs to fetch.", show_default=False)] = None,
    source: Annotated[
        Path | None, typer.Option("--from", help="A file of URLs, one a line ('-': stdin).")
    ] = None,
    store: StoreOption = "",
    buffer: BufferOption = None,
    durable: DurableOption = True,
    method: Annotated[str, typer.Option(help="get or head.")] = "get",
    calibre: Annotated[
        str, typer.Option(help="Calibre to start at: a number or http, browser, ...")
    ] = "http",
    max_calibre: Annotated[str, typer.Option(help="Highest calibre escalation may reach.")] = "browser",
    concurrency: Annotated[int, typer.Option(min=1, help="Attempts in flight at once.")] = 16,
    per_domain: Annotated[int, typer.Option(min=1, help="Attempts in flight per domain.")] = 2,
    delay: Annotated[float, typer.Option(min=0, help="Seconds between attempt starts on one domain.")] = 0.0,
    max_retries: Annotated[int, typer.Option(min=0, help="Retries per calibre.")] = 2,
    max_attempts: Annotated[int, typer.Option(min=1, help="Attempts per URL in all.")] = 8,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds per attempt.")] = 30.0,
    max_body: Annotated[int, typer.Option(min=1, help="Largest body in bytes.")] = 16 * 2**20,
    ignore_robots: Annotated[bool, typer.Option(help="Do not obey robots.txt.")] = False,
    allow_loopback: Annotated[bool, typer.Option(help="Allow 127.0.0.0/8 and ::1.")] = False,
    allow_private: Annotated[
        bool, typer.Option(help="Allow private ranges (10/8, 172.16/12, 192.168/16, fc00::/7).")
    ] = False,
    chromium: Annotated[Path, typer.Option(help="The Chromium executable.")] = Path("/usr/bin/chromium"),
    user_agent: Annotated[str | None, typer.Option(help="User-Agent of the HTTP fetcher.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per URL instead of tables.")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Fetch URLs with escalation and record every attempt into the store.

    Each URL starts at --calibre; retryable failures are retried with backoff,
    escalatable ones move up to the next fetcher, up to --max-calibre. Exits
    0 when at least one URL was fetched (every attempt is recorded, whatever
    its state), 1 when none was.
    """
    from web_index.cli._report import outcome_table, run_fetch, state_counts_table
    from web_index.errors import WebIndexError
    from web_index.urls import url_key

    if method not in ("get", "head"):
        raise fail(EXIT_USAGE, f"--method must be get or head, not {method!r}")
    try:
        low, high = parse_calibre(calibre), parse_calibre(max_calibre)
    except typer.BadParameter as exc:
        raise fail(EXIT_USAGE, str(exc)) from None
    todo = _read_urls(urls or [], source)
    if not todo:
        raise fail(EXIT_USAGE, "no URLs: give URLs or --from FILE")
    if low > high:
        raise fail(EXIT_USAGE, f"--calibre {low} is above --max-calibre {high}")
    for url in todo:
        try:
            url_key(url)
        except WebIndexError as exc:
            raise fail(EXIT_USAGE, str(exc)) from None
    config = fetch_config(
        low,
        high,
        max_retries=max_retries,
        max_attempts=max_attempts,
        timeout=timeout,
        max_body=max_body,
        allow_loopback=allow_loopback,
        allow_private=allow_private,
        ignore_robots=ignore_robots,
        chromium=chromium,
        user_agent=user_agent,
        concurrency=concurrency,
        per_domain=per_domain,
        delay=delay,
    )
    location = store_location(store)
    try:
        with cli_errors(location), open_index(location, buffer, create=True, durable=durable) as index:
            outcomes = run_fetch(
                index,
                todo,
                config,
                method="head" if method == "head" else "get",
                console=err,
                show_progress=progress and err.is_terminal,
            )
    except ValueError as exc:
        raise fail(EXIT_USAGE, str(exc)) from None
    if as_json:
        for outcome in outcomes:
            final = outcome.final
            key = outcome.key
            row = {
                "url": outcome.url,
                "state": str(final.state),
                "status_code": final.status_code,
                "calibre": final.fetcher_calibre,
                "fetcher": final.fetcher_name,
                "why": final.why,
                "attempts": [
                    {"fetcher": a.fetcher_name, "state": str(a.state), "run_time": a.run_time}
                    for a in outcome.attempts
                ],
                "key": None if key is None else key.to_dict(),
            }
            print(json.dumps(row), flush=True)
    else:
        if len(outcomes) <= 200:
            out.print(outcome_table(outcomes))
        out.print(state_counts_table(outcomes))
    if not any(o.state.is_success for o in outcomes):
        say("[bold red]error:[/]", f"nothing was fetched: {_first_reason(outcomes)}")
        raise typer.Exit(EXIT_FOUND_NOTHING)
    raise typer.Exit(EXIT_OK)


def fetch_config(
    low: int,
    high: int,
    *,
    max_retries: int = 2,
    max_attempts: int = 8,
    timeout: float = 30.0,
    max_body: int = 16 * 2**20,
    allow_loopback: bool = False,
    allow_private: bool = False,
    ignore_robots: bool = False,
    chromium: Path = Path("/usr/bin/chromium"),
    user_agent: str | None = None,
    concurrency: int = 16,
    per_domain: int = 2,
    delay: float = 0.0,
) -> FetchConfig:
    """The fetch settings of the commands that fetch (``fetch``, ``crawl``, ``worker``)."""
    from web_index.fetch import DEFAULT_USER_AGENT, AddressPolicy, EscalationPolicy, FetchConfig, FetchLimits

    return FetchConfig(
        policy=EscalationPolicy(
            max_retries=max_retries, max_attempts=max_attempts, min_calibre=low, max_calibre=high
        ),
        limits=FetchLimits(
            timeout=timeout,
            connect_timeout=min(timeout, 10.0),
            read_timeout=min(timeout, 20.0),
            max_body_bytes=max_body,
            max_decoded_bytes=max(max_body, 2 * max_body),
        ),
        address_policy=AddressPolicy(allow_loopback=allow_loopback, allow_private=allow_private),
        obey_robots=not ignore_robots,
        chromium=chromium,
        user_agent=user_agent or DEFAULT_USER_AGENT,
        concurrency=concurrency,
        per_domain=per_domain,
        domain_delay=delay,
    )


def _first_reason(outcomes: Sequence[FetchOutcome]) -> str:
    final = outcomes[0].final
    return final.why or str(final.state)


@app.command("demo")
def demo(
    store: Annotated[
        str | None,
        typer.Option(
            "--store",
            "-s",
            envvar="WEB_INDEX_STORE",
            help="Store to fetch into (default: a new temporary folder).",
        ),
    ] = None,
    chromium: Annotated[Path, typer.Option(help="The Chromium executable.")] = Path("/usr/bin/chromium"),
    slow_seconds: Annotated[float, typer.Option(help="How long the slow page takes.")] = 3.0,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port of the sample site on 127.0.0.1 (0: any free one).")
    ] = DEMO_PORT,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per URL (stdout) instead of tables.")
    ] = False,
) -> None:
    """Fetch a bundled sample site into a store, then query and compact it.

    The site is served on 127.0.0.1:8421, so that every run stores the same
    URLs; if that port is taken, the demo stops and says so (give --port).
    """
    from web_index.cli._demo import run_demo

    location = store or tempfile.mkdtemp(prefix="web-index-demo-")
    with cli_errors(location):
        try:
            code = run_demo(
                location,
                chromium=chromium,
                console=err if as_json else out,
                slow_seconds=slow_seconds,
                port=port,
                as_json=as_json,
            )
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise fail(
                EXIT_USAGE, f"port {port} of 127.0.0.1 is taken (another demo?); give --port N"
            ) from None
    raise typer.Exit(code)
