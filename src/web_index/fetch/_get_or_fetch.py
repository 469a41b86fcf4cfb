"""The index as a read-through cache of the web.

Queries are answered from the index; those that find nothing, or find
something older than ``max_age``, are fetched (with escalation), every
attempt is stored, and the queries are answered again, so that what comes
back is exactly what the index now holds for them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from web_index.fetch._attempt import Fetcher, Method
from web_index.fetch._config import FetchConfig
from web_index.fetch._runner import FetchOutcome, FetchRunner
from web_index.models import AttemptMetadata, Page, PageKey, Query, TimeAwarePageQuery

if TYPE_CHECKING:
    from web_index.index import WebIndex

__all__ = ["aget_or_fetch", "get_or_fetch"]

Result = Page | AttemptMetadata | None


def _age_ok(result: Result, oldest: datetime | None) -> bool:
    if result is None:
        return False
    if oldest is None:
        return True
    stamp = result.timestamp
    return stamp is not None and stamp >= oldest


def _fetchable(query: Query, now: datetime) -> bool:
    if isinstance(query, PageKey):
        return False  # a deterministic query names one past attempt: fetching cannot change it
    if isinstance(query, TimeAwarePageQuery):
        # A fresh fetch is stamped "now": only worth making if the window admits now.
        after_start = query.not_before is None or query.not_before <= now
        before_end = query.not_after is None or query.not_after >= now
        return after_start and before_end
    return True


def _calibres(query: Query, config: FetchConfig) -> tuple[int, int]:
    low, high = config.policy.min_calibre, config.policy.max_calibre
    calibre = getattr(query, "calibre", None)
    if calibre is not None:
        low = max(low, int(calibre))
        if getattr(query, "calibre_strict", False):
            high = min(high, int(calibre))
    return low, high


async def aget_or_fetch(
    index: WebIndex,
    queries: Sequence[Query],
    *,
    max_age: timedelta | None = None,
    config: FetchConfig | None = None,
    fetchers: Sequence[Fetcher] | None = None,
    stale_if_error: bool = True,
    now: datetime | None = None,
) -> list[Result]:
    """:func:`get_or_fetch` for callers already inside an event loop."""
    config = config or FetchConfig()
    now = now or datetime.now(UTC)
    oldest = None if max_age is None else now - max_age
    results: list[Result] = list(await asyncio.to_thread(index.query, list(queries)))
    # Queries that share a URL, method and calibre range share one fetch.
    wanted: dict[tuple[str, Method, int, int], list[int]] = {}
    for i, (query, result) in enumerate(zip(queries, results, strict=True)):
        if _age_ok(result, oldest) or not _fetchable(query, now):
            continue
        method: Method = "head" if query.type.method.value == "head" else "get"
        low, high = _calibres(query, config)
        if low > high:
            continue
        wanted.setdefault((query.url, method, low, high), []).append(i)
    if not wanted:
        return results

    async def fetch_group(key: tuple[str, Method, int, int]) -> FetchOutcome | None:
        url, method, low, high = key
        policy = replace(config.policy, min_calibre=low, max_calibre=high)
        runner = runners.get((low, high))
        if runner is None:
            runner = runners[(low, high)] = config.runner(
                owned if fetchers is None else list(fetchers),
                index,
                robots=robots,
                policy=policy,
                owns_fetchers=False,
            )
        try:
            return await runner.fetch(url, method)
        except ValueError:
            return None  # no fetcher within the query's calibres: nothing to do

    owned = config.build_fetchers() if fetchers is None else []
    robots = config.robots_cache()
    runners: dict[tuple[int, int], FetchRunner] = {}
    try:
        await asyncio.gather(*(fetch_group(key) for key in wanted))
    finally:
        for fetcher in owned:
            await fetcher.aclose()
        if robots is not None:
            await robots.aclose()
        for runner in runners.values():
            await runner.aclose()
    indices = [i for group in wanted.values() for i in group]
    again = await asyncio.to_thread(index.query, [queries[i] for i in indices])
    for i, result in zip(indices, again, strict=True):
        if stale_if_error or _age_ok(result, oldest):
            results[i] = result
        else:
            results[i] = None
    return results


def get_or_fetch(
    index: WebIndex,
    queries: Sequence[Query],
    *,
    max_age: timedelta | None = None,
    config: FetchConfig | None = None,
    fetchers: Sequence[Fetcher] | None = None,
    stale_if_error: bool = True,
    now: datetime | None = None,
) -> list[Result]:
    """Answer ``queries`` from ``index``, fetching what is missing or stale.

    A query is fetched when it matches nothing, or when ``max_age`` is given
    and its match began more than ``max_age`` ago. :class:`PageKey` queries
    are never fetched, nor time-aware queries whose window excludes now. A
    query's ``calibre`` is where escalation starts (and, with
    ``calibre_strict``, also where it ends). Every attempt is stored; then the
    fetched queries are run again. When a refetch fails, the stale match is
    returned if ``stale_if_error`` (the failure is in the metadata), else
    ``None``.

    ``config`` sets up fetchers, policy, robots.txt and the address policy;
    ``fetchers`` replaces the fetchers it would build (the caller closes them;
    a browser fetcher lives in one event loop, so reuse one across calls only
    through :func:`aget_or_fetch` in a single loop).
    Works from synchronous code and from inside a running event loop.
    """
    coro = aget_or_fetch(
        index,
        queries,
        max_age=max_age,
        config=config,
        fetchers=fetchers,
        stale_if_error=stale_if_error,
        now=now,
    )
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    # Called from async code: run on a private loop rather than deadlock this one.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
