"""The HTTP fetcher: httpx, with every hop recorded and every address checked.

Redirects are followed here rather than by httpx so that each hop lands in
the response chain. Connections go through a network backend that resolves
the host itself, applies the address policy to every address, and connects to
an address that passed: a second, unchecked lookup (DNS rebinding) never
happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import importlib.util
import socket
import ssl
import sys
import traceback
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from urllib.parse import urljoin, urlsplit

import anyio
import httpcore
import httpx
import msgspec

from web_index._version import __version__
from web_index.errors import InvalidURLError
from web_index.fetch._address import AddressPolicy, AddressRefusedError
from web_index.fetch._attempt import Attempt, FetchLimits, Method, Stopwatch, join_headers, utc_now
from web_index.fetch._classify import classify_exception, classify_response, parse_retry_after
from web_index.fetch._decode import BoundedDecoder, supported_encodings
from web_index.fetch._errors import BadRedirectError, BodyTooLargeError, TooManyRedirectsError
from web_index.models import Calibre, Response
from web_index.urls import url_key

__all__ = ["DEFAULT_USER_AGENT", "HttpFetcher"]

if importlib.util.find_spec("sniffio") is None:
    # httpcore tries "import sniffio" on every request; without the package,
    # each failed import rescans sys.path, which costs more than the request.
    # A None entry makes the failure instant; behaviour is unchanged.
    sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

DEFAULT_USER_AGENT = f"web-index/{__version__} (+https://github.com/thema-ai/web-index)"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

RedirectFilter = Callable[[str], Awaitable[str | None]]
_redirect_filter: ContextVar[RedirectFilter | None] = ContextVar("redirect_filter", default=None)


@contextlib.contextmanager
def redirect_filter(check: RedirectFilter) -> Iterator[None]:
    """Within this block (this task and those it starts), the HTTP fetcher asks
    ``check(target)`` before following a redirect: ``None`` follows it, a reason
    stops there, the redirect response then being the attempt's last. A crawl
    uses it so that a redirect out of its scope (or into robots.txt's
    disallowed paths) is recorded, never requested."""
    token = _redirect_filter.set(check)
    try:
        yield
    finally:
        _redirect_filter.reset(token)


_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"


class _GuardedBackend(httpcore.AsyncNetworkBackend):
    """A network backend that connects only to addresses the policy allows."""

    def __init__(self, policy: AddressPolicy) -> None:
        self._policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await self._policy.resolve(host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        except socket.gaierror as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        except AddressRefusedError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport with the guarded backend under its pool.

    httpx offers no hook for the network backend, so the pool it builds is
    replaced by an identical one that has it.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        verify: ssl.SSLContext | str | bool,
        http2: bool,
        limits: httpx.Limits,
    ) -> None:
        super().__init__(verify=verify, http2=http2, limits=limits, trust_env=False)
        ssl_context = httpx.create_ssl_context(verify=verify, trust_env=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=http2,
            network_backend=_GuardedBackend(policy),
        )


def _no_cookies() -> httpx.Cookies:
    # The shared client keeps no cookies: one site's cookies must not reach
    # another attempt. Each attempt keeps its own jar across its redirects.
    jar = http.cookiejar.CookieJar(policy=http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
    return httpx.Cookies(jar)


def guarded_client(
    policy: AddressPolicy,
    *,
    timeout: httpx.Timeout | float,
    headers: Mapping[str, str] | None = None,
    limits: httpx.Limits | None = None,
    verify: ssl.SSLContext | str | bool = True,
    http2: bool = False,
    follow_redirects: bool = False,
) -> httpx.AsyncClient:
    """An httpx client whose every connection, redirects' too, passes ``policy``
    (the fetchers' and every other outgoing call's), with no cookies kept and
    no proxy settings taken from the environment."""
    limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
    return httpx.AsyncClient(
        transport=_GuardedTransport(policy, verify=verify, http2=http2, limits=limits),
        headers=headers,
        cookies=_no_cookies(),
        follow_redirects=follow_redirects,
        trust_env=False,
        timeout=timeout,
    )


class HttpFetcher:
    """Fetch with httpx (calibre :attr:`Calibre.HTTP` unless told otherwise).

    ``verify`` is passed to httpx (a CA bundle path or an
    :class:`ssl.SSLContext` for private CAs). One client, and its connection
    pool, is shared by all attempts of this fetcher; close it with
    :meth:`aclose`.
    """

    def __init__(
        self,
        *,
        limits: FetchLimits | None = None,
        address_policy: AddressPolicy | None = None,
        user_agent: str = DEFAULT_USER_AGENT,
        headers: Mapping[str, str] | None = None,
        verify: ssl.SSLContext | str | bool = True,
        http2: bool = True,
        max_connections: int = 100,
        name: str = "httpx",
        calibre: int = Calibre.HTTP,
    ) -> None:
        self._name = name
        self._calibre = Calibre.check(calibre)
        self.limits = limits or FetchLimits()
        self.address_policy = address_policy or AddressPolicy()
        self.user_agent = user_agent
        self._headers = {
            "user-agent": user_agent,
            "accept": _ACCEPT,
            "accept-language": "en;q=0.9, *;q=0.5",
            "accept-encoding": supported_encodings(),
            **{k.lower(): v for k, v in (headers or {}).items()},
        }
        self._verify = verify
        self._http2 = http2
        self._max_connections = max_connections
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return f"httpx {httpx.__version__}; web-index {__version__}"

    @property
    def calibre(self) -> int:
        return self._calibre

    def supports(self, method: Method) -> bool:
        return method in ("get", "head")

    def _get_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is not None and self._loop is not loop:
            # A pool's connections belong to the loop that opened them; a new
            # loop (a second asyncio.run) needs a new client.
            self._client = None
        self._loop = loop
        if self._client is None:
            pool = httpx.Limits(
                max_connections=self._max_connections,
                max_keepalive_connections=min(self._max_connections, 20),
            )
            self._client = guarded_client(
                self.address_policy,
                timeout=httpx.Timeout(
                    self.limits.timeout,
                    connect=self.limits.connect_timeout,
                    read=self.limits.read_timeout,
                ),
                headers=self._headers,
                limits=pool,
                verify=self._verify,
                http2=self._http2,
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    async def __aenter__(self) -> HttpFetcher:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def fetch(self, url: str, method: Method = "get", retry_attempt: int = 0) -> Attempt:
        """Fetch ``url`` once, following redirects; never raises for network trouble."""
        attempt = Attempt.begin(self, url, method, retry_attempt)
        watch = Stopwatch()
        hops: list[Response] = []
        try:
            url_key(url)
            async with asyncio.timeout(self.limits.timeout):
                await self._follow(attempt, hops)
        except Exception as exc:  # every failure becomes a state, not a crash
            verdict = classify_exception(exc)
            attempt.state = verdict.state
            attempt.log(verdict.reason)
            attempt.traceback = traceback.format_exc()
            if isinstance(exc, TimeoutError) and not isinstance(exc, httpx.TimeoutException):
                attempt.log(f"the attempt exceeded its limit of {self.limits.timeout:g}s")
        else:
            final = hops[-1]
            verdict = classify_response(final.status_code, final.headers, final.data, method=method)
            attempt.state = verdict.state
            attempt.status_code = final.status_code
            attempt.log(f"{len(hops)} response(s); {verdict.reason}")
            attempt.retry_after = parse_retry_after(final.headers.get("retry-after"))
            if verdict.state.is_success:
                hops[-1] = msgspec.structs.replace(final, is_final=True)
                attempt.responses = hops
        attempt.run_time = watch.elapsed()
        return attempt

    async def _follow(self, attempt: Attempt, hops: list[Response]) -> None:
        client = self._get_client()
        cookies = httpx.Cookies()
        current = attempt.url
        for _hop in range(self.limits.max_redirects + 1):
            request = client.build_request(attempt.method.upper(), current)
            cookies.set_cookie_header(request)
            response = await client.send(request, stream=True)
            try:
                received = utc_now()
                cookies.extract_cookies(response)
                body = await self._read(response, attempt) if attempt.method == "get" else None
            finally:
                await response.aclose()
            hops.append(
                Response(
                    url=attempt.url,
                    request_url=current,
                    status_code=response.status_code,
                    headers=join_headers(response.headers.multi_items()),
                    timestamp=received,
                    data=body,
                    retry_attempt=attempt.retry_attempt,
                    is_final=False,
                    fetcher_name=attempt.fetcher_name,
                    fetcher_version=attempt.fetcher_version,
                    fetcher_calibre=attempt.fetcher_calibre,
                )
            )
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or not location:
                return
            target = self._next_hop(current, location)
            check = _redirect_filter.get()
            refused = await check(target) if check is not None else None
            if refused is not None:
                attempt.log(f"{response.status_code} -> {target} not followed: {refused}")
                return
            current = target
            attempt.log(f"{response.status_code} -> {current}")
        raise TooManyRedirectsError(self.limits.max_redirects)

    @staticmethod
    def _next_hop(current: str, location: str) -> str:
        target = urljoin(current, location.strip())
        target = target.split("#", 1)[0]
        if urlsplit(target).scheme not in ("http", "https"):
            raise BadRedirectError(f"redirect to a non-http(s) location {location!r}")
        try:
            url_key(target)
        except InvalidURLError as exc:
            raise BadRedirectError(f"redirect to an invalid URL {location!r}: {exc}") from exc
        return target

    async def _read(self, response: httpx.Response, attempt: Attempt) -> bytes:
        limits = self.limits
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.strip().isdigit() and int(declared) > limits.max_body_bytes:
            raise BodyTooLargeError(limits.max_body_bytes, f"declared body ({declared} bytes)")
        decoder = BoundedDecoder(
            response.headers.get("content-encoding"), limits.max_decoded_bytes, limits.max_ratio
        )
        if decoder.undecoded:
            attempt.log(f"content-encoding {decoder.undecoded!r} left undecoded")
        out = bytearray()
        async for chunk in response.aiter_raw():
            if decoder.consumed + len(chunk) > limits.max_body_bytes:
                raise BodyTooLargeError(limits.max_body_bytes)
            out += decoder.feed(chunk)
        return bytes(out)
