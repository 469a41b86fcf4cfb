"""Fetchers with calibre, failure states, escalation and recording into the index.

An :class:`HttpFetcher` (httpx, calibre 10) and a :class:`BrowserFetcher`
(Chromium through Playwright, calibre 60) each turn a URL into an
:class:`Attempt` in one of the standard's states, with the whole response
chain. A :class:`FetchRunner` drives many URLs through them under an
:class:`EscalationPolicy`, obeying robots.txt and an :class:`AddressPolicy`,
and records every attempt into a :class:`~web_index.WebIndex`.
:func:`get_or_fetch` makes the index a read-through cache of the web.

``BrowserFetcher`` needs the ``browser`` extra (Playwright) and is imported on
first use.
"""

from typing import TYPE_CHECKING

from web_index._extras import lazy_names
from web_index.fetch._address import AddressPolicy, AddressRefusedError
from web_index.fetch._attempt import Attempt, Fetcher, FetchLimits, Method, join_headers
from web_index.fetch._charset import decode_body
from web_index.fetch._chromium import CHROMIUM_ARGS, DEFAULT_CHROMIUM, chromium_available
from web_index.fetch._classify import (
    Verdict,
    classify_browser_error,
    classify_exception,
    classify_response,
    detect_block,
    detect_low_quality,
    parse_retry_after,
)
from web_index.fetch._config import FetchConfig
from web_index.fetch._decode import BoundedDecoder as BoundedDecoder
from web_index.fetch._errors import DecompressionBombError as DecompressionBombError
from web_index.fetch._get_or_fetch import aget_or_fetch, get_or_fetch
from web_index.fetch._http import DEFAULT_USER_AGENT, HttpFetcher, RedirectFilter, redirect_filter
from web_index.fetch._http import guarded_client as guarded_client
from web_index.fetch._pacing import LocalPacer, Pacer
from web_index.fetch._policy import Action, Decision, EscalationPolicy, plan_fetchers
from web_index.fetch._robots import ROBOTS_USER_AGENT, RobotsCache, RobotsDecision
from web_index.fetch._runner import FetchOutcome, FetchRunner, Recorder

if TYPE_CHECKING:
    from web_index.fetch._browser import BrowserFetcher

__all__ = [
    "CHROMIUM_ARGS",
    "DEFAULT_CHROMIUM",
    "DEFAULT_USER_AGENT",
    "ROBOTS_USER_AGENT",
    "Action",
    "AddressPolicy",
    "AddressRefusedError",
    "Attempt",
    "BrowserFetcher",
    "Decision",
    "EscalationPolicy",
    "FetchConfig",
    "FetchLimits",
    "FetchOutcome",
    "FetchRunner",
    "Fetcher",
    "HttpFetcher",
    "LocalPacer",
    "Method",
    "Pacer",
    "Recorder",
    "RedirectFilter",
    "RobotsCache",
    "RobotsDecision",
    "Verdict",
    "aget_or_fetch",
    "chromium_available",
    "classify_browser_error",
    "classify_exception",
    "classify_response",
    "decode_body",
    "detect_block",
    "detect_low_quality",
    "get_or_fetch",
    "join_headers",
    "parse_retry_after",
    "plan_fetchers",
    "redirect_filter",
]

__getattr__ = lazy_names(__name__, {"BrowserFetcher": ("web_index.fetch._browser", "browser")})
