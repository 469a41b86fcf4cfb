"""How an attempt's outcome maps to the standard's states.

Pure functions of status, headers, body and exceptions, so that every rule can
be tested without a network. The order of the checks matters: bot protection
is recognised before status codes (a challenge often comes as 403 or 503),
status codes before content, and content is judged only on 2xx HTML.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
from selectolax.lexbor import LexborHTMLParser as HTMLParser

from web_index.fetch._address import AddressRefusedError
from web_index.fetch._charset import decode_body
from web_index.fetch._errors import (
    BadRedirectError,
    BodyTooLargeError,
    DecompressionBombError,
    TooManyRedirectsError,
)
from web_index.models import AttemptState

__all__ = [
    "Verdict",
    "classify_browser_error",
    "classify_exception",
    "classify_response",
    "detect_block",
    "detect_low_quality",
    "parse_retry_after",
    "visible_text",
]

S = AttemptState

# A page with less visible text than this is "thin": judged on its markup.
THIN_TEXT = 200
# Only the head of a body is inspected: markers sit near the top, and judging
# must stay cheap on a 16 MiB page.
_INSPECT_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Verdict:
    state: AttemptState
    reason: str


# Markup found on challenge and captcha pages, whatever their status. Each is
# specific to bot protection, not to ordinary pages that merely use a captcha.
# Plain lower-case substrings: a regex alternation over every page costs more
# than the rest of the fetch.
_CHALLENGE_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "cloudflare challenge",
        ("/cdn-cgi/challenge-platform/", "cf_chl_", "cf-browser-verification"),
    ),
    ("cloudflare interstitial", ("<title>just a moment...", "attention required! | cloudflare")),
    ("incapsula challenge", ("_incapsula_resource", "incapsula incident id")),
    ("datadome captcha", ("captcha-delivery.com",)),
    ("perimeterx captcha", ("px-captcha", "_pxcaptcha", "access to this page has been denied")),
    ("aws waf challenge", ("awswaf", "aws-waf-token")),
    (
        "captcha wall",
        (
            "verify you are human",
            "verify that you are human",
            "verify you are a human",
            "are you a robot",
            "unusual traffic from your computer",
            "complete the security check",
            "checking if the site connection is secure",
            "checking your browser",
        ),
    ),
)
# Weaker markup: a captcha widget or a CDN block page. Counts as bot
# protection only on a refusal status (403/429/503) or on a thin page.
_WEAK_MARKERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "captcha widget",
        ("g-recaptcha", "h-captcha", "hcaptcha.com", "cf-turnstile", "recaptcha/api.js"),
    ),
    ("cloudflare block page", ("cf-error-details", "cf-wrapper", "cloudflare ray id")),
    ("akamai block page", ("errors.edgesuite.net", "reference&#32;&#35;")),
)
_REFUSAL_STATUSES = frozenset({403, 429, 503})

_JS_REQUIRED = re.compile(
    r"(enable|turn on|activate|allow)\s+javascript"
    r"|javascript\s+(is\s+)?(required|disabled|must be enabled|needs to be enabled|is not enabled)"
    r"|requires?\s+javascript|without\s+javascript|javascript\s+to\s+(run|view|use|continue)",
    re.I,
)
_APP_ROOTS = (
    "#root",
    "#app",
    "#__next",
    "#__nuxt",
    "#svelte",
    "app-root",
    "[data-reactroot]",
    "#main-app",
)
_INVISIBLE = ("script", "style", "noscript", "template", "svg", "head")


def _header(headers: Mapping[str, str], name: str) -> str:
    return headers.get(name, "") or headers.get(name.title(), "")


def _is_html(headers: Mapping[str, str], body: bytes) -> bool:
    content_type = _header(headers, "content-type").lower()
    if content_type:
        return "html" in content_type
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body"))


def visible_text(html: str) -> str:
    """The text a reader would see: no scripts, styles or ``noscript``."""
    tree = HTMLParser(html)
    tree.strip_tags(list(_INVISIBLE))
    root = tree.body or tree.root
    if root is None:
        return ""
    return " ".join(root.text(separator=" ").split())


def detect_block(status: int, headers: Mapping[str, str], text: str) -> str | None:
    """Why this response is bot protection rather than the page, or ``None``."""
    if _header(headers, "cf-mitigated").strip().lower() == "challenge":
        return "cf-mitigated: challenge"
    waf = _header(headers, "x-amzn-waf-action").strip().lower()
    if waf in ("captcha", "challenge"):
        return f"x-amzn-waf-action: {waf}"
    head = text[:_INSPECT_BYTES]
    lowered = " ".join(head.lower().split())  # one space everywhere: markers match across newlines
    refusal = status in _REFUSAL_STATUSES
    shown: int | None = None

    def is_thin(limit: int) -> bool:
        nonlocal shown
        if shown is None:  # parsing is the expensive part: at most once
            shown = len(visible_text(head))
        return shown < limit

    for label, needles in _CHALLENGE_MARKERS:
        # Strong markup blocks on refusal statuses and on thin pages; a rich
        # 200 page that happens to mention it (an article about captchas) does not.
        if any(n in lowered for n in needles) and (refusal or is_thin(THIN_TEXT * 5)):
            return label
    if refusal:
        if _header(headers, "x-datadome") or "datadome" in _header(headers, "server").lower():
            return "datadome header"
        if _header(headers, "x-iinfo") or "incapsula" in _header(headers, "x-cdn").lower():
            return "incapsula header"
    for label, needles in _WEAK_MARKERS:
        if any(n in lowered for n in needles) and (refusal or is_thin(THIN_TEXT)):
            return label
    return None


def detect_low_quality(text: str) -> str | None:
    """Why this HTML is not the page (a JavaScript shell), or ``None``."""
    head = text[:_INSPECT_BYTES]
    tree = HTMLParser(head)
    has_scripts = tree.css_first("script") is not None
    shown = visible_text(head)
    if len(shown) >= THIN_TEXT:
        return None
    if _JS_REQUIRED.search(head):
        return "asks for JavaScript and shows almost no text"
    for selector in _APP_ROOTS:
        node = tree.css_first(selector)
        if node is not None and not " ".join(node.text(separator=" ").split()) and has_scripts:
            return f"empty application root {selector} filled by scripts"
    if not shown and has_scripts:
        return "no visible text, only scripts"
    return None


def classify_response(
    status: int, headers: Mapping[str, str], body: bytes | None, *, method: str = "get"
) -> Verdict:
    """The state of an attempt whose final response is ``status``/``headers``/``body``.

    ``headers`` uses lower-case names. A 404 or 410 from a healthy server is
    a successful fetch of that page: the index records what the web said.
    """
    content = body or b""
    is_html = bool(content) and _is_html(headers, content)
    text = ""
    if is_html:
        text = decode_body(content[:_INSPECT_BYTES], _header(headers, "content-type"))[0]
    blocked = detect_block(status, headers, text)
    if blocked is not None:
        return Verdict(S.BLOCKED, f"bot protection ({blocked}), HTTP {status}")
    if status in (401, 407):
        return Verdict(S.UNAUTHORISED, f"HTTP {status}: authentication required")
    if status == 408:
        return Verdict(S.TIMEOUT, "HTTP 408: the server timed out waiting for the request")
    if status == 429:
        return Verdict(S.RETRYABLE_ERROR, "HTTP 429: too many requests")
    if status == 403:
        # Without markers a 403 may still be aimed at our client rather than
        # at everyone: a fetcher of higher calibre may be let in.
        return Verdict(S.ESCALATE, "HTTP 403 without bot-protection markers")
    if status in (501, 505):
        return Verdict(S.ERROR, f"HTTP {status}: the server does not support this request")
    if status >= 500:
        return Verdict(S.RETRYABLE_ERROR, f"HTTP {status}: server error")
    if 200 <= status < 300 and method == "get" and is_html:
        thin = detect_low_quality(text)
        if thin is not None:
            return Verdict(S.LOW_QUALITY, thin)
    return Verdict(S.SUCCESS, f"HTTP {status}")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend((current.__cause__, current.__context__))
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)


def classify_exception(exc: BaseException) -> Verdict:
    """The state of an attempt that ended in ``exc`` (raised by httpx or by us).

    The whole cause chain is inspected: httpx wraps the socket error that
    says whether the failure was DNS, TLS, or the policy.
    """
    chain = list(_chain(exc))
    for error in chain:
        if isinstance(error, AddressRefusedError):
            return Verdict(S.ERROR, str(error))
        if isinstance(error, BodyTooLargeError | DecompressionBombError):
            return Verdict(S.ERROR, str(error))
        if isinstance(error, TooManyRedirectsError | BadRedirectError | httpx.TooManyRedirects):
            return Verdict(S.ERROR, str(error))
    for error in chain:
        if isinstance(error, ssl.SSLError | ssl.CertificateError):
            return Verdict(S.SSL_ERROR, f"TLS failed: {error}")
    for error in chain:
        if isinstance(error, socket.gaierror):
            return Verdict(S.UNREACHABLE, f"DNS lookup failed: {error}")
    if any(isinstance(e, httpx.TimeoutException | TimeoutError) for e in chain):
        kind = type(exc).__name__
        return Verdict(S.TIMEOUT, f"timed out ({kind})")
    if isinstance(exc, httpx.ConnectError):
        return Verdict(S.UNREACHABLE, f"could not connect: {exc}")
    if isinstance(exc, httpx.ReadError | httpx.WriteError | httpx.RemoteProtocolError):
        # The server was reached and then dropped us: transient more often than not.
        return Verdict(S.RETRYABLE_ERROR, f"connection broken: {type(exc).__name__}: {exc}")
    if isinstance(exc, httpx.DecodingError):
        return Verdict(S.ERROR, f"undecodable body: {exc}")
    if isinstance(exc, ConnectionError):
        return Verdict(S.RETRYABLE_ERROR, f"connection broken: {exc}")
    return Verdict(S.ERROR, f"{type(exc).__name__}: {exc}")


_BROWSER_ERRORS = (
    (re.compile(r"ERR_BLOCKED_BY_CLIENT"), S.ERROR, "refused by the address policy"),
    (re.compile(r"ERR_(CERT_|SSL_|BAD_SSL)"), S.SSL_ERROR, "TLS failed"),
    (
        re.compile(r"ERR_(INVALID_AUTH_CREDENTIALS|MISSING_AUTH_CREDENTIALS|PROXY_AUTH)"),
        S.UNAUTHORISED,
        "authentication required",
    ),
    (
        re.compile(
            r"ERR_(NAME_NOT_RESOLVED|NAME_RESOLUTION_FAILED|CONNECTION_REFUSED|ADDRESS_UNREACHABLE"
            r"|INTERNET_DISCONNECTED|CONNECTION_FAILED|NETWORK_UNREACHABLE|ADDRESS_INVALID)"
        ),
        S.UNREACHABLE,
        "could not connect",
    ),
    (
        re.compile(r"ERR_(TIMED_OUT|CONNECTION_TIMED_OUT)|Timeout \d+ms exceeded|TimeoutError"),
        S.TIMEOUT,
        "timed out",
    ),
    (
        re.compile(
            r"ERR_(CONNECTION_RESET|CONNECTION_CLOSED|CONNECTION_ABORTED|EMPTY_RESPONSE"
            r"|HTTP2_PROTOCOL_ERROR|INCOMPLETE_CHUNKED_ENCODING|NETWORK_CHANGED|SPDY_)"
        ),
        S.RETRYABLE_ERROR,
        "connection broken",
    ),
    (
        re.compile(r"ERR_(TOO_MANY_REDIRECTS|UNSAFE_REDIRECT|INVALID_REDIRECT)"),
        S.ERROR,
        "bad redirect",
    ),
    (
        re.compile(r"Download is starting|ERR_ABORTED"),
        S.ERROR,
        "not a document the browser renders",
    ),
)


def classify_browser_error(message: str) -> Verdict:
    """The state of a browser navigation that failed with ``message``."""
    first = message.strip().splitlines()[0] if message.strip() else message
    for pattern, state, label in _BROWSER_ERRORS:
        if pattern.search(message):
            return Verdict(state, f"{label}: {first}")
    return Verdict(S.ERROR, f"navigation failed: {first}")


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value (delay or HTTP date).

    Returns ``None`` for a missing or unparseable value; a date in the past
    means no wait.
    """
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value))
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0.0, (when - now).total_seconds())
