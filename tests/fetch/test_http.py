"""The HTTP fetcher against local servers: chains, failures, limits, charsets."""

from __future__ import annotations

import ssl

import pytest
import trustme

from web_index.cli._sample_site import LocalServer
from web_index.fetch import AddressPolicy, Attempt, FetchLimits, decode_body
from web_index.models import AttemptState as S

from .conftest import LIMITS, http_fetcher, run


def fetch(url: str, method: str = "get", **kwargs: object) -> Attempt:
    async def go() -> Attempt:
        async with http_fetcher(**kwargs) as fetcher:
            return await fetcher.fetch(url, method)  # type: ignore[arg-type]

    return run(go())


def test_success_records_one_final_response(server: LocalServer) -> None:
    a = fetch(server.url("/ok"))
    assert a.state is S.SUCCESS
    assert len(a.responses) == 1
    r = a.responses[0]
    assert r.is_final and r.status_code == 200 and r.request_url == server.url("/ok")
    assert r.url == server.url("/ok")
    assert b"healthy page" in (r.data or b"")
    assert r.headers["content-type"].startswith("text/html")
    assert r.headers["set-cookie"] == "a=1; Path=/"
    assert (r.fetcher_name, r.fetcher_calibre) == ("httpx", 10)
    assert r.timestamp >= a.started
    assert a.run_time > 0 and a.traceback is None


def test_redirect_chain_records_every_hop(server: LocalServer) -> None:
    a = fetch(server.url("/redirect/3"))
    assert a.state is S.SUCCESS
    hops = [(r.request_url.removeprefix(server.base_url), r.status_code) for r in a.responses]
    assert hops == [("/redirect/3", 302), ("/redirect/2", 302), ("/redirect/1", 302), ("/ok", 200)]
    assert [r.is_final for r in a.responses] == [False, False, False, True]
    assert {r.url for r in a.responses} == {server.url("/redirect/3")}
    assert a.responses[0].data == b"moving"
    assert a.responses[0].headers["location"] == "/redirect/2"
    stamps = [r.timestamp for r in a.responses]
    assert stamps == sorted(stamps)


def test_head_follows_redirects_without_bodies(server: LocalServer) -> None:
    a = fetch(server.url("/redirect/2"), "head")
    assert a.state is S.SUCCESS and a.method == "head"
    assert [r.status_code for r in a.responses] == [302, 302, 200]
    assert all(r.data is None for r in a.responses)


def test_cookies_follow_the_chain_but_not_other_attempts(server: LocalServer) -> None:
    a = fetch(server.url("/set-cookie"))
    assert b"cookie=session=s3cr3t" in (a.responses[-1].data or b"")
    b = fetch(server.url("/echo-cookie"))
    assert b"cookie=None" in (b.responses[-1].data or b"")


def test_redirect_loop_is_an_error(server: LocalServer) -> None:
    a = fetch(server.url("/loop"))
    assert a.state is S.ERROR and a.responses == []
    assert "redirects" in "\n".join(a.logs)


def test_redirect_to_another_scheme_is_an_error(server: LocalServer) -> None:
    a = fetch(server.url("/to-ftp"))
    assert a.state is S.ERROR
    assert "non-http" in "\n".join(a.logs)


@pytest.mark.parametrize("path", ["/slow", "/drip"])
def test_time_outs(server: LocalServer, path: str) -> None:
    a = fetch(server.url(path))
    assert a.state is S.TIMEOUT
    assert a.responses == [] and a.traceback


def test_reset_connection_is_retryable(server: LocalServer) -> None:
    a = fetch(server.url("/reset"))
    assert a.state is S.RETRYABLE_ERROR
    assert a.traceback


def test_connection_refused_is_unreachable(closed_port: int) -> None:
    a = fetch(f"http://127.0.0.1:{closed_port}/")
    assert a.state is S.UNREACHABLE


def test_dns_failure_is_unreachable() -> None:
    a = fetch("http://no-such-host.invalid/")
    assert a.state is S.UNREACHABLE
    assert "DNS" in "\n".join(a.logs)


def test_self_signed_certificate_is_an_ssl_error(tls_server: LocalServer) -> None:
    a = fetch(tls_server.url("/"))
    assert a.state is S.SSL_ERROR
    assert "certificate" in (a.traceback or "").lower()


def test_trusted_private_ca_succeeds(tls_server: LocalServer, ca: trustme.CA) -> None:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    a = fetch(tls_server.url("/"), verify=context)
    assert a.state is S.SUCCESS
    assert a.responses[-1].request_url.startswith("https://")


@pytest.mark.parametrize(
    ("path", "state"),
    [
        ("/js-only", S.LOW_QUALITY),
        ("/challenge/cloudflare", S.BLOCKED),
        ("/challenge/cloudflare-503", S.BLOCKED),
        ("/challenge/incapsula", S.BLOCKED),
        ("/challenge/captcha-wall", S.BLOCKED),
        ("/forbidden", S.ESCALATE),
        ("/auth", S.UNAUTHORISED),
        ("/proxy-auth", S.UNAUTHORISED),
        ("/server-error", S.RETRYABLE_ERROR),
        ("/unavailable", S.RETRYABLE_ERROR),
        ("/not-implemented", S.ERROR),
        ("/always-429", S.RETRYABLE_ERROR),
        ("/gone", S.SUCCESS),
        ("/no-such-page", S.SUCCESS),
    ],
)
def test_states_of_responses(server: LocalServer, path: str, state: S) -> None:
    a = fetch(server.url(path))
    assert a.state is state, a.logs
    assert bool(a.responses) == (state is S.SUCCESS)
    assert a.status_code is not None


def test_404_is_a_successful_fetch_of_a_404_page(server: LocalServer) -> None:
    a = fetch(server.url("/no-such-page"))
    assert a.state is S.SUCCESS
    assert a.responses[-1].status_code == 404
    assert b"Nothing lives" in (a.responses[-1].data or b"")


def test_retry_after_is_reported(server: LocalServer) -> None:
    a = fetch(server.url("/always-429"))
    assert a.retry_after == 1.0


def test_gzip_is_decoded(server: LocalServer) -> None:
    a = fetch(server.url("/gzipped"))
    assert a.state is S.SUCCESS
    assert (a.responses[-1].data or b"").startswith(b"<!doctype html>")
    assert a.responses[-1].headers["content-encoding"] == "gzip"


def test_gzip_bomb_is_an_error_not_an_out_of_memory(server: LocalServer) -> None:
    a = fetch(server.url("/bomb"))
    assert a.state is S.ERROR
    assert "decoded body" in "\n".join(a.logs)


def test_ratio_limit_catches_a_bomb_under_the_size_limit(server: LocalServer) -> None:
    limits = FetchLimits(max_body_bytes=10**7, max_decoded_bytes=10**9, max_ratio=50)
    a = fetch(server.url("/bomb"), limits=limits)
    assert a.state is S.ERROR
    assert "times its compressed size" in "\n".join(a.logs)


@pytest.mark.parametrize("path", ["/huge", "/huge-undeclared"])
def test_huge_body_is_an_error(server: LocalServer, path: str) -> None:
    a = fetch(server.url(path))
    assert a.state is S.ERROR
    assert "exceeds the limit" in "\n".join(a.logs)


def test_huge_body_within_a_raised_limit_succeeds(server: LocalServer) -> None:
    limits = FetchLimits(max_body_bytes=4_000_000, max_decoded_bytes=4_000_000)
    a = fetch(server.url("/huge"), limits=limits)
    assert a.state is S.SUCCESS and len(a.responses[-1].data or b"") == 3_000_000


@pytest.mark.parametrize(
    ("path", "codec"),
    [
        ("/charset/unknown-label", "cp1252"),
        ("/charset/invalid-utf8", "utf-8"),
        ("/charset/meta-latin1", "cp1252"),
    ],
)
def test_broken_charsets_keep_raw_bytes(server: LocalServer, path: str, codec: str) -> None:
    a = fetch(server.url(path))
    assert a.state is S.SUCCESS, a.logs
    final = a.responses[-1]
    text, used = decode_body(final.data or b"", final.headers.get("content-type"))
    assert used == codec
    if "latin1" in path or "unknown" in path:
        assert "Café crème" in text


def test_address_policy_refuses_loopback_by_default(server: LocalServer) -> None:
    a = fetch(server.url("/ok"), address_policy=AddressPolicy())
    assert a.state is S.ERROR
    assert "loopback" in "\n".join(a.logs)


def test_address_policy_refuses_redirect_to_metadata(server: LocalServer) -> None:
    a = fetch(server.url("/to-metadata"))
    assert a.state is S.ERROR and a.responses == []
    assert "169.254.169.254" in "\n".join(a.logs)


def test_address_policy_refuses_redirect_to_private_range(server: LocalServer) -> None:
    a = fetch(server.url("/to-private"))
    assert a.state is S.ERROR
    assert "private range" in "\n".join(a.logs)


def test_address_policy_refuses_metadata_by_literal_address() -> None:
    a = fetch("http://169.254.169.254/latest/meta-data/", address_policy=AddressPolicy.permissive_local())
    assert a.state is S.ERROR
    a = fetch("http://[fd00:ec2::254]/latest/meta-data/", address_policy=AddressPolicy.permissive_local())
    assert a.state is S.ERROR


def test_invalid_url_is_an_error() -> None:
    a = fetch("ftp://example.com/")
    assert a.state is S.ERROR


def test_version_and_limits_are_reported() -> None:
    fetcher = http_fetcher()
    assert fetcher.version.startswith("httpx ")
    assert fetcher.supports("head") and fetcher.supports("get")
    assert LIMITS.timeout < 5


def test_allowed_exception_inside_a_refused_range(server: LocalServer) -> None:
    import ipaddress

    policy = AddressPolicy(allow=(ipaddress.ip_network("127.0.0.1/32"),))
    assert fetch(server.url("/ok"), address_policy=policy).state is S.SUCCESS
    assert fetch(server.url("/to-metadata"), address_policy=policy).state is S.ERROR
