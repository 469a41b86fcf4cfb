"""The browser fetcher: a real Chromium driven by Playwright.

It records the main document's response chain (each server redirect the
browser followed) and stores the rendered DOM, serialised after scripts have
run, as the final body. Every request the page makes, not only the document,
passes the address policy before it leaves the browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import re
import subprocess
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from playwright.async_api import Browser, Playwright, Request, async_playwright
from playwright.async_api import Error as PlaywrightError
from playwright.async_api import Response as PwResponse

from web_index.errors import InvalidURLError
from web_index.fetch._address import AddressPolicy
from web_index.fetch._attempt import Attempt, FetchLimits, Method, Stopwatch, join_headers, utc_now
from web_index.fetch._chromium import CHROMIUM_ARGS, DEFAULT_CHROMIUM
from web_index.fetch._classify import (
    classify_browser_error,
    classify_exception,
    classify_response,
    parse_retry_after,
)
from web_index.fetch._socks import SocksGuard
from web_index.models import AttemptState, Calibre, Response
from web_index.urls import url_key

__all__ = ["BrowserFetcher"]


class BrowserFetcher:
    """Fetch by loading the page in Chromium (calibre :attr:`Calibre.BROWSER`).

    The browser starts on the first fetch and is shared by later ones, each
    in a fresh context (no cookies or cache carried between attempts). HEAD
    is declined: a browser cannot make one, so :meth:`supports` says no and
    the escalation policy skips this fetcher for HEAD.
    """

    def __init__(
        self,
        *,
        executable_path: str | Path = DEFAULT_CHROMIUM,
        limits: FetchLimits | None = None,
        address_policy: AddressPolicy | None = None,
        user_agent: str | None = None,
        extra_args: Sequence[str] = (),
        settle_timeout: float = 2.0,
        max_pages: int = 4,
        ignore_https_errors: bool = False,
        name: str = "chromium",
        calibre: int = Calibre.BROWSER,
    ) -> None:
        self.executable_path = str(executable_path)
        self.limits = limits or FetchLimits()
        self.address_policy = address_policy or AddressPolicy()
        self.user_agent = user_agent
        self.extra_args = tuple(extra_args)
        self.settle_timeout = settle_timeout
        self.ignore_https_errors = ignore_https_errors
        self._name = name
        self._calibre = Calibre.check(calibre)
        self._pages = asyncio.Semaphore(max_pages)
        self._start_lock = asyncio.Lock()
        self._playwright: Playwright | None = None
        self._browser: Browser | None = None
        self._version: str | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        """What ``chromium --version`` reports, and the Playwright driving it."""
        if self._version is None:
            try:
                out = subprocess.run(
                    [self.executable_path, "--version"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                    check=False,
                ).stdout.strip()
            except (OSError, subprocess.SubprocessError):
                out = ""
            browser = out.splitlines()[0].split(" built on ")[0] if out else "chromium unknown"
            self._version = f"{browser}; playwright {importlib.metadata.version('playwright')}"
        return self._version

    @property
    def calibre(self) -> int:
        return self._calibre

    def supports(self, method: Method) -> bool:
        return method == "get"

    async def _get_browser(self) -> Browser:
        async with self._start_lock:
            if self._browser is not None and self._browser.is_connected():
                return self._browser
            if self._playwright is None:
                self._playwright = await async_playwright().start()
            self._browser = await self._playwright.chromium.launch(
                executable_path=self.executable_path,
                headless=True,
                args=[*CHROMIUM_ARGS, *self.extra_args],
            )
            if self.user_agent is None:
                # Headless Chromium names itself "HeadlessChrome", which bot
                # protection blocks on sight; the rest of its agent is honest.
                page = await self._browser.new_page()
                agent = await page.evaluate("navigator.userAgent")
                await page.close()
                self.user_agent = str(agent).replace("HeadlessChrome", "Chrome")
            return self._browser

    async def aclose(self) -> None:
        browser, self._browser = self._browser, None
        playwright, self._playwright = self._playwright, None
        if browser is not None:
            with contextlib.suppress(PlaywrightError):
                await browser.close()
        if playwright is not None:
            with contextlib.suppress(PlaywrightError):
                await playwright.stop()

    async def __aenter__(self) -> BrowserFetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def fetch(self, url: str, method: Method = "get", retry_attempt: int = 0) -> Attempt:
        attempt = Attempt.begin(self, url, method, retry_attempt)
        watch = Stopwatch()
        if method != "get":
            attempt.log("the browser fetcher does not make HEAD requests")
            attempt.run_time = watch.elapsed()
            return attempt
        try:
            url_key(url)
            async with self._pages:
                # Starting Chromium is not the page's fault: outside the time limit.
                browser = await self._get_browser()
                async with asyncio.timeout(self.limits.timeout + self.settle_timeout + 5):
                    await self._load(attempt, browser)
        except PlaywrightError as exc:
            verdict = classify_browser_error(str(exc))
            attempt.state = verdict.state
            attempt.log(verdict.reason)
            attempt.traceback = traceback.format_exc()
        except (InvalidURLError, OSError, TimeoutError) as exc:
            verdict = classify_exception(exc)
            attempt.state = verdict.state
            attempt.log(verdict.reason)
            attempt.traceback = traceback.format_exc()
        except Exception as exc:  # a fetcher reports, it does not crash the crawl
            attempt.state = AttemptState.ERROR
            attempt.log(f"{type(exc).__name__}: {exc}")
            attempt.traceback = traceback.format_exc()
        attempt.run_time = watch.elapsed()
        return attempt

    async def _load(self, attempt: Attempt, browser: Browser) -> None:
        host = urlsplit(attempt.url)
        port = host.port or (443 if host.scheme == "https" else 80)
        await self.address_policy.resolve(host.hostname or "", port)  # fail fast, and say why
        guard = SocksGuard(self.address_policy, self.limits.connect_timeout)
        await guard.start()
        context = await browser.new_context(
            user_agent=self.user_agent,
            ignore_https_errors=self.ignore_https_errors,
            service_workers="block",
            accept_downloads=False,
            # Chromium skips proxies for loopback unless told "<-loopback>".
            proxy={"server": guard.url, "bypass": "<-loopback>"},
        )
        try:
            page = await context.new_page()
            documents: list[PwResponse] = []

            def on_response(response: PwResponse) -> None:
                if response.request.is_navigation_request() and response.frame == page.main_frame:
                    documents.append(response)

            page.on("response", on_response)
            try:
                first = await page.goto(attempt.url, wait_until="load", timeout=self.limits.timeout * 1000)
            except PlaywrightError as exc:
                if guard.failures and re.search(r"ERR_(SOCKS|PROXY)", str(exc)):
                    # The browser only knows the proxy said no; the proxy knows why.
                    failed_host, verdict = guard.failures[-1]
                    attempt.state = verdict.state
                    attempt.log(verdict.reason)
                    attempt.traceback = traceback.format_exc()
                    return
                raise
            with contextlib.suppress(PlaywrightError):
                await page.wait_for_load_state("networkidle", timeout=self.settle_timeout * 1000)
            for failed_host, verdict in guard.failures:
                attempt.log(f"page resource not loaded ({failed_host}): {verdict.reason}")
            finals = [d for d in documents if not 300 <= d.status < 400] or documents
            final = finals[-1] if finals else first
            if final is None:
                attempt.log("the navigation produced no document response")
                return
            if first is not None and final.url != first.url:
                attempt.log(f"client-side navigation from {first.url} to {final.url}")
            rendered = (await page.content()).encode("utf-8")
            await self._finish(attempt, final, rendered)
        finally:
            with contextlib.suppress(PlaywrightError):
                await context.close()
            await guard.aclose()

    async def _finish(self, attempt: Attempt, final: PwResponse, rendered: bytes) -> None:
        # No server_addr() check here: through the guard proxy it is the proxy's
        # address, and the proxy has already checked the server's.
        if len(rendered) > self.limits.max_decoded_bytes:
            attempt.log(f"rendered page exceeds the limit of {self.limits.max_decoded_bytes} bytes")
            return
        chain = [final.request]
        while chain[0].redirected_from is not None:
            chain.insert(0, chain[0].redirected_from)
        hops: list[Response] = []
        for i, request in enumerate(chain):
            response = final if i == len(chain) - 1 else await request.response()
            if response is None:
                continue
            last = response is final
            hops.append(
                Response(
                    url=attempt.url,
                    request_url=request.url,
                    status_code=response.status,
                    headers=join_headers((h["name"], h["value"]) for h in await response.headers_array()),
                    timestamp=_response_time(request),
                    # The browser does not expose redirect bodies: hops get an empty one.
                    data=rendered if last else b"",
                    retry_attempt=attempt.retry_attempt,
                    is_final=last,
                    fetcher_name=attempt.fetcher_name,
                    fetcher_version=attempt.fetcher_version,
                    fetcher_calibre=attempt.fetcher_calibre,
                )
            )
        for hop in hops[:-1]:
            attempt.log(f"{hop.status_code} {hop.request_url}")
        verdict = classify_response(final.status, hops[-1].headers, rendered, method="get")
        attempt.state = verdict.state
        attempt.status_code = final.status
        attempt.retry_after = parse_retry_after(hops[-1].headers.get("retry-after"))
        attempt.log(f"{len(hops)} response(s); {verdict.reason}")
        if verdict.state.is_success:
            attempt.responses = hops


def _response_time(request: Request) -> datetime:
    timing = request.timing
    start = timing.get("startTime", -1)
    if start is None or start <= 0:
        return utc_now()
    offset = max(timing.get("responseStart", 0) or 0, 0)
    return datetime.fromtimestamp((start + offset) / 1000, UTC)
