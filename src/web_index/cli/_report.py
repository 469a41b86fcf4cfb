"""Running a batch of fetches with a progress bar, and tabulating the outcome.

Shared by ``web-index fetch`` and ``web-index demo``.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from web_index.cli._app import new_table
from web_index.fetch import Attempt, Decision, FetchConfig, FetchOutcome, Method
from web_index.models import AttemptState

if TYPE_CHECKING:
    from web_index.index import WebIndex

__all__ = ["outcome_table", "run_fetch", "state_counts_table"]

_STYLE = {
    AttemptState.SUCCESS: "green",
    AttemptState.LOW_QUALITY: "yellow",
    AttemptState.BLOCKED: "red",
    AttemptState.UNAUTHORISED: "red",
    AttemptState.TIMEOUT: "magenta",
    AttemptState.UNREACHABLE: "magenta",
    AttemptState.SSL_ERROR: "magenta",
    AttemptState.RETRYABLE_ERROR: "magenta",
    AttemptState.ESCALATE: "yellow",
    AttemptState.ERROR: "red",
}


def _styled(state: AttemptState) -> str:
    return f"[{_STYLE.get(state, 'white')}]{state}[/]"


async def _run(
    index: WebIndex | None,
    urls: Sequence[str],
    config: FetchConfig,
    method: Method,
    progress: Progress | None,
) -> list[FetchOutcome]:
    fetchers = config.build_fetchers()
    if not fetchers:
        raise ValueError(
            f"no fetcher is available between calibres {config.policy.min_calibre} and "
            f"{config.policy.max_calibre} (is Chromium installed at {config.chromium}?)"
        )
    robots = config.robots_cache()
    task = None
    attempts = 0
    if progress is not None:
        task = progress.add_task("fetching", total=len(urls), attempts=0)

    def on_attempt(attempt: Attempt, decision: Decision) -> None:
        nonlocal attempts
        attempts += 1
        if progress is not None and task is not None:
            progress.update(task, attempts=attempts)

    runner = config.runner(fetchers, index, robots=robots, on_attempt=on_attempt)

    async def one(url: str) -> FetchOutcome:
        outcome = await runner.fetch(url, method)
        if progress is not None and task is not None:
            progress.advance(task)
        return outcome

    try:
        return list(await asyncio.gather(*(one(u) for u in urls)))
    finally:
        await runner.aclose()
        if robots is not None:
            await robots.aclose()


def run_fetch(
    index: WebIndex | None,
    urls: Sequence[str],
    config: FetchConfig,
    *,
    method: Method = "get",
    console: Console | None = None,
    show_progress: bool = True,
) -> list[FetchOutcome]:
    """Fetch ``urls`` with escalation, recording into ``index``; outcomes in input order."""
    if not show_progress:
        return asyncio.run(_run(index, urls, config, method, None))
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("urls, {task.fields[attempts]} attempts"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        return asyncio.run(_run(index, urls, config, method, progress))


def outcome_table(outcomes: Sequence[FetchOutcome], *, base: str = "") -> Table:
    """One row per URL: its final state, why, and the path its attempts took.

    ``base`` is stripped from the front of each URL to keep the table narrow.
    """
    table = new_table(
        "url", "state", "status", "calibre", "attempts (fetcher: state)", "why",
        title="Fetch outcomes", right=("status", "calibre"),
    )  # fmt: skip
    for outcome in outcomes:
        final = outcome.final
        path = " → ".join(f"{a.fetcher_name}: {a.state}" for a in outcome.attempts)
        status = "" if final.status_code is None else str(final.status_code)
        why = final.why or ""
        table.add_row(
            outcome.url.removeprefix(base) if base else outcome.url,
            _styled(final.state),
            status,
            str(final.fetcher_calibre),
            path,
            why,
        )
    return table


def state_counts_table(outcomes: Sequence[FetchOutcome]) -> Table:
    """How many URLs ended in each state, and how many attempts did."""
    finals = Counter(o.state for o in outcomes)
    every = Counter(a.state for o in outcomes for a in o.attempts)
    table = new_table("state", "urls (final)", "attempts", title="States", right=("urls (final)", "attempts"))
    for state in AttemptState:
        if every[state] or finals[state]:
            table.add_row(_styled(state), str(finals[state]), str(every[state]))
    table.add_row("[bold]total", str(len(outcomes)), str(sum(every.values())))
    return table
