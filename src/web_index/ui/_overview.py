"""A store at a glance, ``/ui/{coll}/``: records, bytes and files by type and
month; attempt states by month; the calibre and fetcher mix; the domains with
most failures, each linking to its page (``/ui/{coll}/domain?d=``: its states
by month and its failing URLs). Charts as SVG, the numbers in tables beside."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from starlette.requests import Request
from starlette.responses import Response

from web_index.index import WebIndex
from web_index.models import AttemptMetadata, RecordType
from web_index.ui._charts import STATE_COLOURS, bars, stacks
from web_index.ui._render import (
    UiError,
    domain_path,
    history_path,
    kept,
    one_page,
    page,
    page_number,
    store_of,
)
from web_index.urls import domain_of

__all__ = ["domain", "overview"]

FAILING_DOMAINS = 20
URLS_A_PAGE = 100
_TYPES = (RecordType.GET_METADATA, RecordType.HEAD_METADATA)


@dataclass
class Tally:
    """What the metadata records say, counted in one pass."""

    by_month: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    calibres: Counter[str] = field(default_factory=Counter)
    fetchers: Counter[str] = field(default_factory=Counter)
    failing: Counter[str] = field(default_factory=Counter)
    attempts: int = 0

    def count(self, month: str, state: str, calibre: str, fetcher: str, domain: str, n: int = 1) -> None:
        self.by_month[month][state] += n
        self.calibres[calibre] += n
        self.fetchers[fetcher] += n
        if state != "success":
            self.failing[domain] += n
        self.attempts += n


def _store_tally(index: WebIndex) -> Tally:
    tally = Tally()
    for c in index.attempt_counts():
        month = f"{c.year:04d}-{c.month:02d}"
        tally.count(month, c.state, str(c.calibre), c.fetcher, c.domain, c.attempts)
    return tally


def _store_of(request: Request) -> tuple[str, WebIndex]:
    name = request.path_params["coll"]
    _, index = store_of(request, name)
    if index is None:
        raise UiError(404, f"{name!r} is not a store: its overview is its archive's own")
    return name, index


def _months_chart(tally: Tally) -> dict[str, object]:
    months = sorted(tally.by_month)
    columns, step, scale = stacks([(m, tally.by_month[m]) for m in months])
    states = sorted({s for c in tally.by_month.values() for s in c}, key=lambda s: (s != "success", s))
    return {
        "columns": columns,
        "step": step,
        "ticks": scale,
        "states": states,
        "colours": STATE_COLOURS,
        "rows": [
            (m, [tally.by_month[m].get(s, 0) for s in states], sum(tally.by_month[m].values()))
            for m in months
        ],
    }


async def overview(request: Request) -> Response:
    name, index = _store_of(request)
    stats = await asyncio.to_thread(index.stats)
    months: dict[tuple[str, int, int], list[int]] = {}
    for p in stats.partitions:
        row = months.setdefault((p.type, p.year, p.month), [0, 0, 0, 0])
        row[0] += p.records
        row[1] += p.bytes
        row[2] += p.part_files + (1 if p.compacted else 0)
        row[3] += 1
    files = [
        {"type": t, "month": f"{y:04d}-{m:02d}", "records": r, "bytes": b, "files": f, "domains": d}
        for (t, y, m), (r, b, f, d) in sorted(months.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0]))
    ]
    tally = await kept(request, f"tally {name}", lambda: _store_tally(index))
    failing = [
        (d, n, domain_path(name, d))
        for d, n in sorted(tally.failing.items(), key=lambda kv: (-kv[1], kv[0]))[:FAILING_DOMAINS]
    ]
    return page(
        request,
        "overview.html",
        title=f"{name} · web-index",
        coll=name,
        files=files,
        records=stats.records,
        bytes=stats.bytes,
        file_count=stats.files,
        buffered=stats.buffered_attempts,
        attempts=tally.attempts,
        months=_months_chart(tally),
        calibres=bars(tally.calibres),
        fetchers=bars(tally.fetchers),
        failing=failing,
    )


def _domain_tally(index: WebIndex, domain: str) -> tuple[Tally, list[AttemptMetadata]]:
    """A domain's attempts counted, and its failed ones, newest first: one scan."""
    tally, failed = Tally(), []
    for kind in _TYPES:
        for m in index.scan(kind, domain=domain):
            if isinstance(m, AttemptMetadata):
                month = f"{m.timestamp:%Y-%m}" if m.timestamp is not None else "unknown"
                state = str(m.state)
                tally.count(month, state, str(m.fetcher_calibre), m.fetcher_name, domain)
                if state != "success":
                    failed.append(m)
    failed.sort(key=lambda m: (m.timestamp is not None, m.timestamp), reverse=True)
    return tally, failed


async def domain(request: Request) -> Response:
    """One registrable domain: its attempt states by month and its failing URLs, newest first."""
    name, index = _store_of(request)
    asked = request.query_params.get("d", "").strip().lower()
    if not asked:
        raise UiError(400, "d: which domain? Give ?d=example.com")
    try:
        registrable = domain_of(f"http://{asked}/")
    except Exception:
        raise UiError(400, f"d: {asked!r} is not a domain") from None
    number = page_number(request)
    tally, failures = await asyncio.to_thread(_domain_tally, index, registrable)
    shown, paging = one_page(request, number, failures, URLS_A_PAGE)
    return page(
        request,
        "domain.html",
        title=f"{registrable} · web-index",
        coll=name,
        domain=registrable,
        looked_up=f"*.{registrable}",
        attempts=tally.attempts,
        months=_months_chart(tally),
        failures=[(m, history_path(name, m.url)) for m in shown],
        total=len(failures),
        pager=paging,
    )
