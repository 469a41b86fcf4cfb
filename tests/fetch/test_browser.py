"""The browser fetcher on a real Chromium (``/usr/bin/chromium``).

Skipped when Chromium is missing, except under ``CI=true``, where a missing
browser fails the run. One browser serves the whole module.
"""

from __future__ import annotations

import ipaddress

import pytest

from web_index import WebIndex
from web_index.cli._sample_site import LocalServer, reply
from web_index.fetch import (
    AddressPolicy,
    Attempt,
    BrowserFetcher,
    EscalationPolicy,
    FetchConfig,
    FetchRunner,
    get_or_fetch,
)
from web_index.models import AttemptState as S
from web_index.models import Calibre, Page, SimplePageQuery

from .conftest import LIMITS, LOCAL, LoopThread, http_fetcher

pytestmark = pytest.mark.browser


def load(loop: LoopThread, browser: BrowserFetcher, url: str, method: str = "get") -> Attempt:
    return loop.run(browser.fetch(url, method))  # type: ignore[arg-type]


def test_version_is_what_chromium_reports(browser: BrowserFetcher) -> None:
    assert browser.version.startswith("Chromium ")
    assert "playwright" in browser.version
    assert browser.calibre == Calibre.BROWSER and not browser.supports("head")


def test_renders_a_javascript_only_page(
    server: LocalServer, browser: BrowserFetcher, browser_loop: LoopThread
) -> None:
    a = load(browser_loop, browser, server.url("/js-only"))
    assert a.state is S.SUCCESS, a.logs
    final = a.responses[-1]
    assert final.is_final and final.fetcher_name == "chromium" and final.fetcher_calibre == 60
    assert b"Content that only exists after scripts ran." in (final.data or b"")
    assert final.headers["content-type"].startswith("text/html")


def test_records_the_main_document_redirect_chain(
    server: LocalServer, browser: BrowserFetcher, browser_loop: LoopThread
) -> None:
    a = load(browser_loop, browser, server.url("/redirect/2"))
    assert a.state is S.SUCCESS, a.logs
    hops = [(r.request_url.removeprefix(server.base_url), r.status_code) for r in a.responses]
    assert hops == [("/redirect/2", 302), ("/redirect/1", 302), ("/ok", 200)]
    assert [r.is_final for r in a.responses] == [False, False, True]
    assert a.responses[0].headers["location"] == "/redirect/1"
    assert all(r.url == server.url("/redirect/2") for r in a.responses)


def test_head_is_declined(server: LocalServer, browser: BrowserFetcher, browser_loop: LoopThread) -> None:
    a = load(browser_loop, browser, server.url("/ok"), "head")
    assert a.state is S.ERROR and a.responses == []


@pytest.mark.parametrize(
    ("path", "state"),
    [
        ("/challenge/cloudflare", S.BLOCKED),
        ("/auth", S.UNAUTHORISED),
        ("/no-such-page", S.SUCCESS),
        ("/slow", S.TIMEOUT),
        ("/reset", S.RETRYABLE_ERROR),
    ],
)
def test_states(
    server: LocalServer, browser: BrowserFetcher, browser_loop: LoopThread, path: str, state: S
) -> None:
    a = load(browser_loop, browser, server.url(path))
    assert a.state is state, a.logs


def test_unreachable(browser: BrowserFetcher, browser_loop: LoopThread, closed_port: int) -> None:
    assert load(browser_loop, browser, f"http://127.0.0.1:{closed_port}/").state is S.UNREACHABLE
    assert load(browser_loop, browser, "http://no-such-host.invalid/").state is S.UNREACHABLE


def test_self_signed_certificate(
    tls_server: LocalServer, browser: BrowserFetcher, browser_loop: LoopThread
) -> None:
    a = load(browser_loop, browser, tls_server.url("/"))
    assert a.state is S.SSL_ERROR, a.logs


def test_redirect_to_metadata_is_refused(
    server: LocalServer, browser: BrowserFetcher, browser_loop: LoopThread
) -> None:
    a = load(browser_loop, browser, server.url("/to-metadata"))
    assert a.state is S.ERROR
    assert "169.254.169.254" in "\n".join(a.logs)


def test_every_browser_connection_passes_the_policy(chromium_path: str, browser_loop: LoopThread) -> None:
    """A redirect and a subresource to a denied loopback address never connect."""
    hits: list[str] = []

    def target(r: object) -> None:
        hits.append("target")
        reply(r, 200, "<p>secret</p>")  # type: ignore[arg-type]

    with LocalServer({"/": target}, host="127.0.0.2") as denied:
        routes = {
            "/jump": lambda r: reply(r, 302, "", {"Location": denied.url("/")}),
            "/embed": lambda r: reply(
                r,
                200,
                f'<p>{"text " * 60}</p><img src="{denied.url("/")}">'
                f'<script src="{denied.url("/")}"></script>',
            ),
        }
        with LocalServer(routes) as origin:
            policy = AddressPolicy(allow_loopback=True, deny=(ipaddress.ip_network("127.0.0.2/32"),))
            fetcher = BrowserFetcher(
                executable_path=chromium_path, address_policy=policy, limits=LIMITS, settle_timeout=0.3
            )
            try:
                jump = browser_loop.run(fetcher.fetch(origin.url("/jump")))
                embed = browser_loop.run(fetcher.fetch(origin.url("/embed")))
            finally:
                browser_loop.run(fetcher.aclose())
    assert jump.state is S.ERROR and "denied network" in "\n".join(jump.logs)
    assert embed.state is S.SUCCESS
    assert "127.0.0.2" in "\n".join(embed.logs)
    assert hits == []


def test_a_page_s_webrtc_sends_nothing_past_the_policy(chromium_path: str, browser_loop: LoopThread) -> None:
    """WebRTC's UDP goes around the proxy every other connection passes through: a page's STUN
    and TURN requests to a denied address send it nothing (Chromium is told to use no UDP the
    proxy does not carry; without it, the canary below got 4 datagrams in an audit)."""
    import contextlib
    import socket
    import time

    canary = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    canary.bind(("127.0.0.2", 0))
    canary.settimeout(0.2)
    port = canary.getsockname()[1]
    servers = f'[{{urls: "stun:127.0.0.2:{port}"}}, {{urls: "turn:127.0.0.2:{port}?transport=udp",'
    servers += ' username: "u", credential: "p"}]'
    page = (
        f"<p>{'text ' * 60}</p><script>"
        f"const pc = new RTCPeerConnection({{iceServers: {servers}}});"
        'pc.createDataChannel("x");'
        "pc.createOffer().then(o => pc.setLocalDescription(o));"
        "</script>"
    )
    received: list[bytes] = []
    with LocalServer({"/": lambda r: reply(r, 200, page)}) as origin:
        policy = AddressPolicy(allow_loopback=True, deny=(ipaddress.ip_network("127.0.0.2/32"),))
        fetcher = BrowserFetcher(
            executable_path=chromium_path, address_policy=policy, limits=LIMITS, settle_timeout=1.0
        )
        try:
            got = browser_loop.run(fetcher.fetch(origin.url("/")))
            deadline = time.monotonic() + 1.5  # ICE gathering goes on after the page settles
            while time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    received.append(canary.recv(2048))
        finally:
            browser_loop.run(fetcher.aclose())
            canary.close()
    assert got.state is S.SUCCESS, got.logs
    assert received == []


def test_default_policy_with_one_exception(chromium_path: str, browser_loop: LoopThread) -> None:
    """Loopback refused except one allowed address: the proxy itself is no exception."""
    with LocalServer({"/": lambda r: reply(r, 200, "<p>hi</p>")}, host="127.0.0.3") as allowed:
        policy = AddressPolicy(allow=(ipaddress.ip_network("127.0.0.3/32"),))
        fetcher = BrowserFetcher(
            executable_path=chromium_path, address_policy=policy, limits=LIMITS, settle_timeout=0.3
        )
        try:
            ok = browser_loop.run(fetcher.fetch(allowed.url("/")))
            refused = browser_loop.run(fetcher.fetch(allowed.url("/").replace("127.0.0.3", "127.0.0.1")))
        finally:
            browser_loop.run(fetcher.aclose())
    assert ok.state is S.SUCCESS, ok.logs
    assert refused.state is S.ERROR and "loopback" in "\n".join(refused.logs)


def test_http_low_quality_escalates_to_the_browser(
    server: LocalServer, browser: BrowserFetcher, browser_loop: LoopThread, index: WebIndex
) -> None:
    async def go() -> list[Attempt]:
        fetchers = [http_fetcher(), browser]
        policy = EscalationPolicy(max_retries=0)
        async with FetchRunner(fetchers, index, policy=policy, owns_fetchers=False) as runner:
            outcome = await runner.fetch(server.url("/js-only"))
        await fetchers[0].aclose()
        return outcome.attempts

    attempts = browser_loop.run(go())
    assert [(a.fetcher_name, a.state) for a in attempts] == [
        ("httpx", S.LOW_QUALITY),
        ("chromium", S.SUCCESS),
    ]
    [stored] = index.query([SimplePageQuery(url=server.url("/js-only"))])
    assert isinstance(stored, Page) and stored.calibre == Calibre.BROWSER
    assert b"after scripts ran" in (stored.data or b"")


def test_get_or_fetch_escalates(server: LocalServer, index: WebIndex, chromium_path: str) -> None:
    config = FetchConfig(
        policy=EscalationPolicy(max_retries=0),
        address_policy=LOCAL,
        obey_robots=False,
        chromium=chromium_path,
        browser_settle=0.3,
    )
    [page] = get_or_fetch(index, [SimplePageQuery(url=server.url("/js-only?g"))], config=config)
    assert isinstance(page, Page) and page.calibre == Calibre.BROWSER
