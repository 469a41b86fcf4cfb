"""The classifier as pure functions: rules, and properties that hold for any input."""

from __future__ import annotations

import socket
import ssl
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from web_index.fetch import (
    AddressRefusedError,
    classify_browser_error,
    classify_exception,
    classify_response,
    detect_low_quality,
    parse_retry_after,
)
from web_index.fetch._errors import BodyTooLargeError, DecompressionBombError
from web_index.models import AttemptState as S

from .conftest import CAPTCHA_WALL, CF_CHALLENGE, INCAPSULA, JS_ONLY, page

HTML = {"content-type": "text/html; charset=utf-8"}


def test_healthy_page_is_success() -> None:
    assert classify_response(200, HTML, page("x").encode()).state is S.SUCCESS


def test_tiny_page_without_scripts_is_still_success() -> None:
    assert classify_response(200, HTML, b"<html><body>Hello</body></html>").state is S.SUCCESS


@pytest.mark.parametrize(
    "body",
    [
        JS_ONLY,
        '<html><body><div id="__next"></div><script src="/main.js"></script></body></html>',
        '<html><body><app-root></app-root><script src="/main.js"></script></body></html>',
        "<html><body><script>render()</script></body></html>",
        "<html><body><p>This site requires JavaScript.</p></body></html>",
        "<html><body><noscript>You need to enable JavaScript to run this app.</noscript></body>",
    ],
)
def test_javascript_shells_are_low_quality(body: str) -> None:
    assert classify_response(200, HTML, body.encode()).state is S.LOW_QUALITY


def test_rich_page_with_noscript_nag_is_success() -> None:
    body = page("x") + "<noscript>Please enable JavaScript for the best experience</noscript>"
    assert classify_response(200, HTML, body.encode()).state is S.SUCCESS


def test_low_quality_only_judges_2xx_get_html() -> None:
    shell = JS_ONLY.encode()
    assert classify_response(404, HTML, shell).state is S.SUCCESS
    assert classify_response(200, {"content-type": "application/json"}, shell).state is S.SUCCESS
    assert classify_response(200, HTML, None, method="head").state is S.SUCCESS


@pytest.mark.parametrize(
    ("status", "headers", "body"),
    [
        (403, {"cf-mitigated": "challenge"}, ""),
        (200, {"cf-mitigated": "challenge"}, ""),
        (503, {"server": "cloudflare"}, CF_CHALLENGE),
        (403, {}, CF_CHALLENGE),
        (403, {}, INCAPSULA),
        (200, {}, INCAPSULA),
        (403, {"x-iinfo": "1-2-3"}, "denied"),
        (403, {"x-datadome": "protected"}, "denied"),
        (200, {}, CAPTCHA_WALL),
        (429, {}, '<div class="g-recaptcha" data-sitekey="x"></div>'),
        (405, {"x-amzn-waf-action": "captcha"}, ""),
    ],
)
def test_bot_protection_is_blocked(status: int, headers: dict[str, str], body: str) -> None:
    verdict = classify_response(status, {**HTML, **headers}, body.encode())
    assert verdict.state is S.BLOCKED, verdict


def test_article_about_captchas_is_not_blocked() -> None:
    body = page("x", "<p>" + "Are you a robot? Captchas ask this question. " * 60 + "</p>")
    assert classify_response(200, HTML, body.encode()).state is S.SUCCESS


def test_login_form_with_recaptcha_is_not_blocked() -> None:
    body = page("Sign in", '<form><div class="g-recaptcha"></div></form>' + "<p>text</p>" * 60)
    assert classify_response(200, HTML, body.encode()).state is S.SUCCESS


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (200, S.SUCCESS),
        (204, S.SUCCESS),
        (304, S.SUCCESS),
        (400, S.SUCCESS),
        (404, S.SUCCESS),
        (410, S.SUCCESS),
        (401, S.UNAUTHORISED),
        (407, S.UNAUTHORISED),
        (403, S.ESCALATE),
        (408, S.TIMEOUT),
        (429, S.RETRYABLE_ERROR),
        (500, S.RETRYABLE_ERROR),
        (502, S.RETRYABLE_ERROR),
        (503, S.RETRYABLE_ERROR),
        (504, S.RETRYABLE_ERROR),
        (501, S.ERROR),
        (505, S.ERROR),
    ],
)
def test_status_codes(status: int, state: S) -> None:
    assert classify_response(status, {"content-type": "text/plain"}, b"x").state is state


@given(
    status=st.integers(100, 999),
    headers=st.dictionaries(
        st.sampled_from(["content-type", "server", "cf-mitigated", "x-cdn", "retry-after"]),
        st.text(max_size=30),
    ),
    body=st.one_of(st.none(), st.binary(max_size=2000), st.text(max_size=2000).map(str.encode)),
    method=st.sampled_from(["get", "head"]),
)
def test_classify_response_is_total(
    status: int, headers: dict[str, str], body: bytes | None, method: str
) -> None:
    verdict = classify_response(status, headers, body, method=method)
    assert isinstance(verdict.state, S) and verdict.reason
    if status in (401, 407) and headers.get("cf-mitigated", "").strip().lower() != "challenge":
        assert verdict.state in (S.UNAUTHORISED, S.BLOCKED)


@given(st.text(max_size=3000))
def test_low_quality_never_raises(text: str) -> None:
    result = detect_low_quality(text)
    assert result is None or isinstance(result, str)


def _wrapped(inner: BaseException, outer: type[Exception] = httpx.ConnectError) -> Exception:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer("wrapped") from exc
    except Exception as exc:
        return exc


@pytest.mark.parametrize(
    ("exc", "state"),
    [
        (httpx.ConnectTimeout("t"), S.TIMEOUT),
        (httpx.ReadTimeout("t"), S.TIMEOUT),
        (TimeoutError(), S.TIMEOUT),
        (httpx.ConnectError("refused"), S.UNREACHABLE),
        (_wrapped(socket.gaierror(-2, "Name or service not known")), S.UNREACHABLE),
        (_wrapped(ssl.SSLCertVerificationError("bad cert")), S.SSL_ERROR),
        (_wrapped(AddressRefusedError("h", ["169.254.169.254 is link-local"])), S.ERROR),
        (httpx.ReadError("reset"), S.RETRYABLE_ERROR),
        (httpx.RemoteProtocolError("Server disconnected"), S.RETRYABLE_ERROR),
        (ConnectionResetError(), S.RETRYABLE_ERROR),
        (BodyTooLargeError(10), S.ERROR),
        (DecompressionBombError("x"), S.ERROR),
        (httpx.DecodingError("x"), S.ERROR),
        (ValueError("bug"), S.ERROR),
    ],
)
def test_exceptions(exc: BaseException, state: S) -> None:
    assert classify_exception(exc).state is state


@pytest.mark.parametrize(
    ("message", "state"),
    [
        ("Page.goto: net::ERR_NAME_NOT_RESOLVED at http://x/", S.UNREACHABLE),
        ("Page.goto: net::ERR_CONNECTION_REFUSED at http://x/", S.UNREACHABLE),
        ("Page.goto: net::ERR_CERT_AUTHORITY_INVALID at https://x/", S.SSL_ERROR),
        ("Page.goto: net::ERR_SSL_PROTOCOL_ERROR at https://x/", S.SSL_ERROR),
        ("Page.goto: Timeout 2000ms exceeded.", S.TIMEOUT),
        ("Page.goto: net::ERR_CONNECTION_RESET at http://x/", S.RETRYABLE_ERROR),
        ("Page.goto: net::ERR_EMPTY_RESPONSE at http://x/", S.RETRYABLE_ERROR),
        ("Page.goto: net::ERR_TOO_MANY_REDIRECTS at http://x/", S.ERROR),
        ("Page.goto: net::ERR_INVALID_AUTH_CREDENTIALS at http://x/", S.UNAUTHORISED),
        ("Page.goto: Download is starting", S.ERROR),
        ("something new", S.ERROR),
    ],
)
def test_browser_errors(message: str, state: S) -> None:
    assert classify_browser_error(message).state is state


def test_retry_after_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


@given(st.text(max_size=40))
def test_retry_after_never_raises(value: str) -> None:
    result = parse_retry_after(value)
    assert result is None or result >= 0
