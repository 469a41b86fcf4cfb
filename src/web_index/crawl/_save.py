"""One page recorded now, with what it needs to render: the fetch behind "save a
page now". The page goes through the fetchers with escalation; when it is HTML,
its requisites (and a stylesheet's own ``url()``\\ s and ``@import``\\ s) are
fetched as ``crawl --page-requisites`` fetches them: each once, those robots.txt
allows, from any host the address policy allows. Every attempt is recorded."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from web_index.crawl._pages import is_html, normalise
from web_index.crawl._requisites import requisites_of, stylesheet_requisites
from web_index.errors import InvalidURLError
from web_index.fetch import (
    FetchConfig,
    Fetcher,
    FetchOutcome,
    FetchRunner,
    RobotsCache,
    redirect_filter,
)

if TYPE_CHECKING:
    from web_index.index import WebIndex

__all__ = ["SaveStep", "SavedPage", "save_page"]

# A save fetches the requisites of one page, not a site's: a page of 100,000
# images is recorded with the first of them.
DEFAULT_MAX_REQUISITES = 200


@dataclass(frozen=True, slots=True)
class SaveStep:
    """Where a save is: fetching the ``page``, then its ``requisites`` (``done``
    of ``total`` known so far, ``url`` the latest started)."""

    phase: str
    url: str
    done: int = 0
    total: int = 0


@dataclass(slots=True)
class SavedPage:
    """The page's fetch (every attempt of it), its requisites' fetches, and how
    many requisites were left unfetched: over the limit, or out of time."""

    page: FetchOutcome
    requisites: list[FetchOutcome] = field(default_factory=list)
    skipped: int = 0


async def save_page(
    index: WebIndex,
    url: str,
    *,
    config: FetchConfig | None = None,
    fetchers: Sequence[Fetcher] | None = None,
    requisites: bool = True,
    max_requisites: int = DEFAULT_MAX_REQUISITES,
    deadline: float | None = None,
    on_step: Callable[[SaveStep], None] | None = None,
) -> SavedPage:
    """Fetch ``url`` into ``index`` now, with its requisites unless not ``requisites``.

    ``config`` sets the fetchers, policy, robots.txt and address policy;
    ``fetchers`` replaces the fetchers it would build (the caller closes them).
    The requisites still being fetched at ``deadline`` (a :func:`time.monotonic`
    moment) are given up and counted as ``skipped``, as are those past
    ``max_requisites``; the page itself is the caller's to bound. ``on_step``
    hears each step. ``InvalidURLError`` for a URL that is not http(s).
    """
    start = normalise(url)
    if start is None:
        raise InvalidURLError(url, "only an http(s) URL can be saved", field="url")
    config = config or FetchConfig()
    owned = config.build_fetchers() if fetchers is None else []
    robots = config.robots_cache()
    runner = config.runner(owned or list(fetchers or ()), index, robots=robots, owns_fetchers=False)

    async def follow(target: str) -> str | None:
        if robots is not None and not (await robots.check(target)).allowed:
            return "disallowed by robots.txt"
        return None

    def step(phase: str, at: str, done: int = 0, total: int = 0) -> None:
        if on_step is not None:
            on_step(SaveStep(phase, at, done, total))

    try:
        step("page", start)
        with redirect_filter(follow):
            saved = SavedPage(await runner.fetch(start))
            if requisites:
                await _requisites(saved, runner, robots, max_requisites, deadline, step)
    finally:
        await runner.aclose()
        for fetcher in owned:
            await fetcher.aclose()
        if robots is not None:
            await robots.aclose()
    return saved


async def _requisites(
    saved: SavedPage,
    runner: FetchRunner,
    robots: RobotsCache | None,
    limit: int,
    deadline: float | None,
    step: Callable[[str, str, int, int], None],
) -> None:
    """The page's requisites, then the stylesheets' own, a round at a time."""
    final = saved.page.final.final
    if not saved.page.state.is_success or final is None:
        return
    ctype = final.headers.get("content-type")
    body = final.data or b""
    if not is_html(ctype, body):
        return
    seen = {final.request_url, saved.page.url}
    wanted = await asyncio.to_thread(requisites_of, body, ctype, final.request_url)
    while wanted:
        wanted = [u for u in dict.fromkeys(wanted) if u not in seen]
        seen.update(wanted)
        if robots is not None and wanted:
            verdicts = await asyncio.gather(*(robots.check(u) for u in wanted))
            wanted = [u for u, verdict in zip(wanted, verdicts, strict=True) if verdict.allowed]
        room = max(0, limit - len(saved.requisites))
        saved.skipped += max(0, len(wanted) - room)
        round_ = wanted[:room]
        total = len(saved.requisites) + len(round_)

        async def one(target: str, total: int) -> FetchOutcome:
            step("requisites", target, len(saved.requisites), total)
            got = await runner.fetch(target)
            saved.requisites.append(got)
            step("requisites", target, len(saved.requisites), total)
            return got

        left = None if deadline is None else deadline - time.monotonic()
        try:
            async with asyncio.timeout(left):
                done = await asyncio.gather(*(one(u, total) for u in round_))
        except TimeoutError:  # those cut short are not recorded: no attempt ended
            saved.skipped += total - len(saved.requisites)
            return
        wanted = [u for got in done for u in _stylesheet_needs(got)]


def _stylesheet_needs(outcome: FetchOutcome) -> list[str]:
    """What a stylesheet fetched whole loads in turn."""
    final = outcome.final.final
    if not outcome.state.is_success or final is None:
        return []
    return stylesheet_requisites(final)
