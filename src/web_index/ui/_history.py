"""A URL's history: its captures on a calendar (years, then the chosen year's
months and days, with counts) and every attempt, failures included, newest
first, each linking to its capture."""

from __future__ import annotations

import asyncio
import calendar
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from web_index.archive import parse_cdx_query
from web_index.errors import InvalidRecordError
from web_index.index import WebIndex
from web_index.models import AttemptMetadata, RecordType
from web_index.ui._captures import captures_of
from web_index.ui._render import UiError, capture_path, history_path, one_page, page, page_number, store_of
from web_index.ui._save import save_form
from web_index.urls import url_key

__all__ = ["Attempt", "attempts_of", "history"]

ATTEMPTS_A_PAGE = 100
COMPARE_CHOICES = 500  # captures of the year shown offered for comparing
# Stored attempts do not name the fetch they belong to: an attempt that began
# within this many seconds of the end of a failed one at the same URL is taken
# for its retry or escalation (the policy's longest backoff is 60 s).
CHAIN_GAP = 90.0


@dataclass(frozen=True, slots=True)
class Attempt:
    """One row of the attempts table: the attempt and, when it stored a
    response for this URL, the capture's status and address."""

    metadata: AttemptMetadata
    status: str | None
    capture: str | None
    chain: str | None = None  # "fetcher: state → ..." on the last attempt of a retried or escalated fetch


def attempts_of(index: WebIndex, url: str) -> list[AttemptMetadata]:
    """Every GET attempt at exactly ``url`` (failures included), newest first."""
    key = url_key(url)
    found = [
        m
        for m in index.scan(RecordType.GET_METADATA, url_prefix=url)
        if isinstance(m, AttemptMetadata) and url_key(m.url) == key
    ]
    found.sort(key=lambda m: (m.timestamp is not None, m.timestamp, m.request_id or ""), reverse=True)
    return found


def fetch_chains(newest_first: list[AttemptMetadata]) -> dict[int, str]:
    """The fetcher chain ("httpx: low-quality → chromium: success") of each
    fetch that took more than one attempt, by the position of its last attempt."""
    chains: dict[int, str] = {}
    run: list[int] = []
    for i in range(len(newest_first) - 1, -1, -1):  # oldest first
        m = newest_first[i]
        if run and not _follows(newest_first[run[-1]], m):
            _close(newest_first, run, chains)
            run = []
        run.append(i)
    _close(newest_first, run, chains)
    return chains


def _follows(before: AttemptMetadata, after: AttemptMetadata) -> bool:
    if before.state == "success" or before.timestamp is None or after.timestamp is None:
        return False
    gap = (after.timestamp - before.timestamp).total_seconds() - (before.run_time or 0.0)
    return gap <= CHAIN_GAP


def _close(newest_first: list[AttemptMetadata], run: list[int], chains: dict[int, str]) -> None:
    if len(run) > 1:
        chains[run[-1]] = " → ".join(f"{newest_first[i].fetcher_name}: {newest_first[i].state}" for i in run)


def _calendar(captures: list[dict[str, Any]], year: int) -> list[dict[str, object]]:
    days = Counter(fields["timestamp"][:8] for fields in captures if fields["timestamp"][:4] == f"{year}")
    months = []
    for month in range(1, 13):
        weeks = [
            [{"day": d, "count": days.get(f"{year:04d}{month:02d}{d:02d}", 0)} if d else None for d in week]
            for week in calendar.Calendar().monthdayscalendar(year, month)
        ]
        total = sum(n for key, n in days.items() if key[4:6] == f"{month:02d}")
        months.append({"name": calendar.month_name[month], "number": month, "weeks": weeks, "count": total})
    return months


def _year(request: Request, years: list[int]) -> int:
    raw = request.query_params.get("year")
    if raw is None:
        return years[-1] if years else datetime.now().year
    if not raw.isdigit() or not 1000 <= int(raw) <= 2999:
        raise UiError(400, f"year: {raw!r} is not a year")
    return int(raw)


async def history(request: Request) -> Response:
    name = request.path_params["coll"]
    coll, index = store_of(request, name)
    asked = request.query_params.get("url", "").strip()
    if not asked:
        raise UiError(400, "url: which URL's history? Give ?url=")
    try:
        url = parse_cdx_query({"url": [asked], "matchType": ["exact"]}).url
    except InvalidRecordError as exc:
        raise UiError(400, f"{asked!r} is not a URL: {exc.problem}") from None
    number = page_number(request)
    captures = await captures_of(coll, index, url)
    years = Counter(int(fields["timestamp"][:4]) for fields in captures)
    year = _year(request, sorted(years))
    metadata = await asyncio.to_thread(attempts_of, index, url) if index is not None else []
    by_request = {fields.get("request_id"): fields for fields in captures if fields.get("request_id")}
    shown, paging = one_page(request, number, metadata, ATTEMPTS_A_PAGE)
    chains = fetch_chains(metadata)
    rows = []
    for i, m in enumerate(shown, start=number * ATTEMPTS_A_PAGE):
        fields = by_request.get(m.request_id)
        rows.append(
            Attempt(
                metadata=m,
                status=fields.get("status") if fields else None,
                capture=capture_path(name, fields) if fields else None,
                chain=chains.get(i),
            )
        )
    states = Counter(str(m.state) for m in metadata)
    form = save_form(request, name)
    response = page(
        request,
        "history.html",
        title=f"{url} · history · web-index",
        coll=name,
        url=url,
        captures=len(captures),
        cut=captures.cut,
        years=[(y, years[y], history_path(name, url, year=y)) for y in sorted(years)],
        year=year,
        months=_calendar(captures, year),
        day_captures=_day_links(captures, name, year),
        stamps=[f["timestamp"] for f in captures if f["timestamp"][:4] == f"{year}"][-COMPARE_CHOICES:],
        attempts=rows,
        total_attempts=len(metadata),
        states=sorted(states.items(), key=lambda kv: -kv[1]),
        from_store=index is not None,
        pager=paging,
        save=form,
    )
    return form.remembered(request, response) if form is not None else response


def _day_links(captures: list[dict[str, Any]], coll: str, year: int) -> dict[str, str]:
    """Each day of ``year`` with captures, linked to its last capture."""
    links: dict[str, str] = {}
    for fields in captures:
        stamp = fields["timestamp"]
        if stamp[:4] == f"{year}":
            links[stamp[:8]] = capture_path(coll, fields)
    return links
