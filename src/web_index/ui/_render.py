"""What every page of the UI shares: its templates, its headers, its errors,
and the collection (and store) a path names.

Pages are rendered on the server from Jinja2 templates with autoescape on:
nothing archived is ever marked safe. Every page carries a Content-Security-
Policy that lets it load only this server's own stylesheet, script and frames;
archived content reaches a browser only through the replay route
(:mod:`web_index.ui._replay`), under a policy of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, TypeVar
from urllib.parse import urlencode

import jinja2
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from web_index.archive import Collection, url_for_path, url_in_path
from web_index.index import WebIndex

_T = TypeVar("_T")

__all__ = [
    "UI_PREFIX",
    "UiError",
    "capture_path",
    "compare_path",
    "counted",
    "domain_path",
    "history_path",
    "kept",
    "number",
    "one_page",
    "page",
    "page_error",
    "page_number",
    "pager",
    "readable",
    "served",
    "store_of",
    "target_url",
    "when",
]

UI_PREFIX = "/ui"
# The UI's own pages: its stylesheet, its frames of archived pages, and no script at all (the
# server serves archived scripts from its own origin: 'self' would let an injection run one).
PAGE_POLICY = (
    "default-src 'none'; style-src 'self'; script-src 'none'; img-src 'self' data:; "
    "frame-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'self'"
)


class UiError(Exception):
    """A page that cannot be shown: its status and one line saying why."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Served:
    """The collections the app serves, and which of them is its own store."""

    collections: Mapping[str, Collection]
    store: str
    index: WebIndex


@cache
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("web_index.ui", "templates"),
        autoescape=True,  # every archived string is text, whatever it holds
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["ui"] = UI_PREFIX
    env.globals["counted"] = counted
    env.filters["n"] = number
    env.filters["readable"] = readable
    env.filters["when"] = when
    return env


def number(n: int) -> str:
    """A count as ``web-index stats`` prints one: thousands separated (``8,955``)."""
    return f"{n:,}"


def counted(n: int, one: str, many: str | None = None, *, word_only: bool = False) -> str:
    """``n`` and the word for ``n`` of a thing (``1 page``, ``8,955 bytes``, ``2 pages``);
    ``many`` where it is not ``one`` + s; ``word_only``: the word alone (``1 page matches``)."""
    word = one if n == 1 else (many or f"{one}s")
    return word if word_only else f"{number(n)} {word}"


def readable(stamp: str) -> str:
    """A capture's 14-digit timestamp as people read a date (``2024-03-01
    12:00:00 UTC``); anything else as it is."""
    try:
        at = datetime.strptime(stamp, "%Y%m%d%H%M%S") if len(stamp) == 14 and stamp.isdigit() else None
    except ValueError:
        at = None
    return stamp if at is None else f"{at:%Y-%m-%d %H:%M:%S} UTC"


def when(stamp: str) -> Markup:
    """A CDX timestamp as a readable ``<time>``, its 14 digits in its title and
    ``datetime`` kept for machines (and for reading off an address)."""
    shown = readable(stamp)
    if shown == stamp:
        return Markup("{}").format(stamp)
    iso = shown.removesuffix(" UTC").replace(" ", "T") + "Z"
    return Markup('<time datetime="{}" title="{}">{}</time>').format(iso, stamp, shown)


FRESH_FOR = 60.0  # seconds a store's counts are kept before the store is read again


async def kept(request: Request, key: str, compute: Callable[[], _T]) -> _T:
    """``compute()`` (run off the event loop), or what it gave for ``key`` less
    than :data:`FRESH_FOR` seconds ago: the pages' counts of a whole store."""
    cache: dict[str, tuple[float, Any]] = request.app.state.__dict__.setdefault("ui_kept", {})
    hit = cache.get(key)
    if hit is not None and time.monotonic() - hit[0] < FRESH_FOR:
        return hit[1]  # type: ignore[no-any-return]
    value = await asyncio.to_thread(compute)
    cache[key] = (time.monotonic(), value)
    return value


def served(request: Request) -> Served:
    state = request.app.state
    return Served(state.collections, state.store_collection, state.index)


def store_of(request: Request, name: str) -> tuple[Collection, WebIndex | None]:
    """The collection ``name`` and, when it is a store (this server's own, or
    one of ``collections.yaml``'s), its index; a 404 for a name the server does
    not serve."""
    got = served(request)
    coll = got.collections.get(name)
    if coll is None:
        raise UiError(404, f"no collection {name!r}: this server has {', '.join(sorted(got.collections))}")
    return coll, coll.store


def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    """``template`` rendered with ``context`` (and the collections), as an HTML page."""
    got = served(request)
    html = (
        _templates()
        .get_template(template)
        .render(
            collections=sorted(got.collections),
            store=got.store,
            stores={name for name, coll in got.collections.items() if coll.store is not None},
            path=request.url.path,
            saving=request.app.state.saves is not None,
            **({"looked_up": request.query_params.get("url", ""), "save": None} | context),
        )
    )
    return HTMLResponse(html, status_code=status, headers=_page_headers())


def _page_headers() -> dict[str, str]:
    return {
        "content-security-policy": PAGE_POLICY,
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
    }


async def page_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, UiError)
    return page(
        request, "error.html", status=exc.status, title="Nothing to show · web-index", message=exc.message
    )


def target_url(request: Request, prefix: str) -> str:
    """The URL after ``prefix`` in the raw path, with the request's own query
    (as the archive's paths carry it: ``/ui/store/2024/https://example.com/?a=1``)."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    query = request.scope.get("query_string", b"").decode("latin-1")
    return url_in_path(raw.decode("latin-1")[len(prefix) :], query)


def capture_path(coll: str, fields: Mapping[str, Any]) -> str:
    """A capture's page: its timestamp and URL in the path, as the Wayback Machine's."""
    return f"{UI_PREFIX}/{coll}/{fields['timestamp']}/{url_for_path(fields['url'])}"


def compare_path(coll: str, url: str, a: str, b: str) -> str:
    return f"{UI_PREFIX}/{coll}/compare?{urlencode({'url': url, 'a': a, 'b': b})}"


def domain_path(coll: str, domain: str) -> str:
    """A registrable domain's page: its attempts' states and its failures."""
    return f"{UI_PREFIX}/{coll}/domain?{urlencode({'d': domain})}"


def history_path(coll: str, url: str, **more: object) -> str:
    """Where a URL's history is: its own parameters (``page``, ``year``) beside
    the URL, never mixed into the URL's own query."""
    return f"{UI_PREFIX}/{coll}/history?{urlencode({'url': url, **more})}"


def page_number(request: Request) -> int:
    raw = request.query_params.get("page", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise UiError(400, f"page: {raw!r} is not a page number (1, 2, ...)")
    return int(raw) - 1


def one_page(
    request: Request, number: int, items: Sequence[_T], size: int
) -> tuple[Sequence[_T], dict[str, Any]]:
    """Page ``number`` (from 0) of ``items`` in pages of ``size``, and its :func:`pager`."""
    return items[number * size : (number + 1) * size], pager(request, number, len(items), size)


def pager(request: Request, number: int, total: int, size: int) -> dict[str, Any]:
    """Links to the previous and next pages of a list of ``total`` in pages of ``size``."""
    last = max(0, (total - 1) // size)
    if number > last:
        raise UiError(404, f"page {number + 1}: there are {last + 1}")

    def link(n: int) -> str:
        return str(request.url.include_query_params(page=n + 1))

    return {
        "number": number + 1,
        "pages": last + 1,
        "previous": link(number - 1) if number > 0 else None,
        "next": link(number + 1) if number < last else None,
    }
