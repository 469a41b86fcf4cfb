"""``web-index demo``: fetch the bundled sample site into a store, then query it.

Everything runs on 127.0.0.1: the site is served from a thread, the address
policy is opened to loopback for it, and nothing leaves the machine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from web_index.cli._app import new_table, plural
from web_index.cli._report import outcome_table, run_fetch, state_counts_table
from web_index.cli._sample_site import LocalServer, sample_routes, sample_urls
from web_index.fetch import (
    DEFAULT_CHROMIUM,
    AddressPolicy,
    EscalationPolicy,
    FetchConfig,
    FetchLimits,
    chromium_available,
)
from web_index.models import Calibre, Page, RecordType, SimplePageQuery

__all__ = ["run_demo"]


def _title(body: bytes | None) -> str:
    if not body:
        return ""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(body.decode("utf-8", "replace"))
    node = tree.css_first("h1") or tree.css_first("title")
    return node.text(strip=True)[:40] if node is not None else ""


def _answer(url: str, page: object, meta: object) -> dict[str, Any]:
    """What the store says of one URL: its latest attempt's state and its page, if any."""
    row: dict[str, Any] = {"url": url, "state": str(getattr(meta, "state", "-")), "page": False}
    row.update(status_code=None, calibre=None, hops=None, title=None)
    if isinstance(page, Page):
        row.update(page=True, status_code=page.status_code, calibre=page.calibre)
        row.update(hops=len(page.responses), title=_title(page.data))
    return row


def run_demo(
    store_path: str | os.PathLike[str],
    *,
    chromium: str | Path = DEFAULT_CHROMIUM,
    console: Console | None = None,
    slow_seconds: float = 3.0,
    timeout: float = 1.5,
    port: int = 0,
    as_json: bool = False,
) -> int:
    """Serve the sample site, fetch it into ``store_path`` with escalation,
    print the state table, answer queries from the store, then compact it and
    show what is on disk (with ``as_json``, one JSON object per URL on stdout
    instead of the tables). Returns an exit code. ``port`` 0 picks a free port
    (the command uses a fixed one, so that a second run stores the same URLs)."""
    from web_index.index import WebIndex

    console = console or Console()
    has_browser = chromium_available(chromium)
    top = Calibre.BROWSER if has_browser else Calibre.HTTP
    config = FetchConfig(
        policy=EscalationPolicy(max_retries=1, backoff_base=0.2, max_calibre=top),
        limits=FetchLimits(timeout=timeout, connect_timeout=timeout, read_timeout=timeout),
        address_policy=AddressPolicy(allow_loopback=True),
        chromium=chromium,
        browser_settle=0.5,
    )
    with LocalServer(sample_routes(slow_seconds=slow_seconds), port=port) as site:
        urls = sample_urls(site.base_url)
        console.print(f"[bold]Sample site[/] at {site.base_url}/ -> store [bold]{store_path}[/]")
        if not has_browser:
            console.print(f"[yellow]No Chromium at {chromium}: fetching with httpx only.[/]")
        with WebIndex(store_path) as index:
            outcomes = run_fetch(index, urls, config, console=console)
            if not as_json:
                console.print(outcome_table(outcomes, base=site.base_url))
                console.print(state_counts_table(outcomes))
            pages = index.query([SimplePageQuery(url=u, type=RecordType.GET) for u in urls])
            metas = index.query([SimplePageQuery(url=u, type=RecordType.GET_METADATA) for u in urls])
            # Leave a store to look at: the buffer written out and compacted.
            index.flush()
            index.compact()
            stats = index.stats()
    rows = [_answer(url, page, meta) for url, page, meta in zip(urls, pages, metas, strict=True)]
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
    else:
        table = new_table(
            "url",
            "latest attempt",
            "page",
            "status",
            "calibre",
            "hops",
            "title",
            title="Answered from the store",
        )
        for row in rows:
            cells = [row["url"].removeprefix(site.base_url), row["state"], "yes" if row["page"] else "no"]
            more = (row["status_code"], row["calibre"], row["hops"], row["title"])
            table.add_row(*cells, *("" if v is None else str(v) for v in more))
        console.print(table)
    root = Path(store_path)
    names = (str(f.relative_to(root)) for f in root.rglob("*.parquet"))
    files = sorted(n for n in names if not n.startswith("_"))  # _index/...: derived, private
    console.print(
        f"[bold]The store[/] {root}: {plural(stats.records, 'record')} in "
        f"{plural(stats.files, 'Parquet file')}, "
        f"laid out type/year/month/domain.parquet:",
        soft_wrap=True,
    )
    for name in files:
        console.print(f"  {name}", soft_wrap=True, highlight=False)
    console.print(
        f"Ask it again: [bold]web-index query --store {store_path} --type get-metadata {urls[3]}[/]\n"
        f"Look at it:   [bold]web-index stats --store {store_path}[/]\n"
        f"In a browser: [bold]web-index serve --store {store_path}[/], then open http://127.0.0.1:8080/"
        " (every attempt, failures included, and the captures replayed from the store)",
        soft_wrap=True,
    )
    return 0
