"""What ``web-index crawl`` shows: a live line while it runs, then the summary
(a table, or one JSON object) and, on stderr whatever the output, what went
wrong: the errors by state and reason, a crawl that fetched nothing, a scope
that stopped it at its seed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from web_index.cli._app import err, new_table, out, plural, say

if TYPE_CHECKING:
    from web_index.crawl import CrawlProgress, CrawlResult

__all__ = ["CrawlDisplay", "report_crawl"]


def report_crawl(result: CrawlResult, *, as_json: bool, requisites: bool) -> None:
    """The summary on stdout, then what went wrong on stderr."""
    if as_json:
        print(json.dumps(result.to_dict()), flush=True)
    else:
        numbers = ("generation", "pages", "fetched", "errors", "dead letters", "seconds", "pages/s")
        summary = new_table("site", *numbers, right=numbers)
        rate = result.fetched / result.seconds if result.seconds else 0.0
        summary.add_row(
            result.site,
            str(result.generation),
            str(result.pages),
            str(result.fetched),
            str(result.errors),
            str(result.dead_letters),
            f"{result.seconds:.1f}",
            f"{rate:.1f}",
        )
        out.print(summary)
        if requisites:
            say("", f"requisites: {result.requisites} fetched, {result.requisite_errors} failed")
    _say_what_went_wrong(result)


def _say_what_went_wrong(result: CrawlResult) -> None:
    """On stderr, whatever the output: the prefix a prefix crawl followed, why
    pages gave no text (by state and reason, the first URLs of each), and a
    crawl that stopped at its seed because nothing else was in scope."""
    if result.scope_prefix is not None:
        say("", f"scope: URLs under {result.scope_prefix}")
    groups = result.failures
    if not result.pages and groups:
        first = groups[0]
        say("[bold red]error:[/]", f"nothing was crawled: {first.urls[0]} ({first.state}): {first.reason}")
    elif not result.pages:  # no failure either: every page was gone (404, 410) or empty
        say(
            "[bold red]error:[/]",
            f"nothing was crawled: no page with text in {plural(result.fetched, 'attempt')}",
        )
    elif result.errors:
        say("[yellow]warning:[/]", f"{plural(result.errors, 'page')} gave no text:")
    if groups and (result.pages or len(groups) > 1 or first.count > 1):
        for group in groups:
            shown = ", ".join(group.urls) + (", ..." if group.count > len(group.urls) else "")
            say("", f"  {group.count} x {group.state}: {group.reason}: {shown}")
    if result.stopped_at_seed:
        say(
            "[yellow]warning:[/]",
            f"the crawl ended after its seed: its {plural(result.out_of_scope, 'link')}"
            f" {'is' if result.out_of_scope == 1 else 'are'} outside the scope"
            f"{f' (URLs under {result.scope_prefix})' if result.scope_prefix else ''};"
            " widen it with --scope host, domain or allow --allow URL-PREFIX",
        )


class CrawlDisplay:
    """One live line on stderr: queued, fetched, indexed, errors, pages/s."""

    def __init__(self, *, enabled: bool) -> None:
        from rich.live import Live

        self.enabled = enabled
        self._live = Live("", console=err, transient=False, refresh_per_second=4) if enabled else None

    def __enter__(self) -> CrawlDisplay:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def update(self, p: CrawlProgress) -> None:
        if self._live is not None:
            self._live.update(
                f"queued {p.queued}  fetched {p.fetched}  indexed {p.indexed}  errors {p.errors}"
                f"  pending {p.pending}  {p.pages_per_second:.1f} pages/s"
            )
