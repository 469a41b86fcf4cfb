"""Building the usual set of fetchers from a few settings."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from web_index._extras import import_extra
from web_index.fetch._address import AddressPolicy
from web_index.fetch._attempt import Fetcher, FetchLimits
from web_index.fetch._chromium import DEFAULT_CHROMIUM, chromium_available
from web_index.fetch._http import DEFAULT_USER_AGENT, HttpFetcher
from web_index.fetch._policy import EscalationPolicy
from web_index.fetch._robots import RobotsCache
from web_index.fetch._runner import FetchRunner
from web_index.models import Calibre

if TYPE_CHECKING:
    from web_index.index import WebIndex

__all__ = ["FetchConfig"]


@dataclass(frozen=True, slots=True)
class FetchConfig:
    """Everything needed to set up fetchers, robots.txt and the policy.

    The browser fetcher is included when ``policy.max_calibre`` reaches
    :attr:`Calibre.BROWSER` and Chromium exists at ``chromium``.
    """

    policy: EscalationPolicy = field(default_factory=EscalationPolicy)
    limits: FetchLimits = field(default_factory=FetchLimits)
    address_policy: AddressPolicy = field(default_factory=AddressPolicy)
    obey_robots: bool = True
    chromium: str | Path = DEFAULT_CHROMIUM
    user_agent: str = DEFAULT_USER_AGENT
    verify: ssl.SSLContext | str | bool = True
    concurrency: int = 16
    per_domain: int = 2
    domain_delay: float = 0.0
    browser_settle: float = 2.0

    def http_fetcher(self) -> HttpFetcher:
        return HttpFetcher(
            limits=self.limits,
            address_policy=self.address_policy,
            user_agent=self.user_agent,
            verify=self.verify,
            max_connections=max(self.concurrency, 10),
        )

    def build_fetchers(self) -> list[Fetcher]:
        fetchers: list[Fetcher] = []
        if self.policy.min_calibre <= Calibre.HTTP <= self.policy.max_calibre:
            fetchers.append(self.http_fetcher())
        wants_browser = self.policy.min_calibre <= Calibre.BROWSER <= self.policy.max_calibre
        if wants_browser and chromium_available(self.chromium):
            browser = import_extra("web_index.fetch._browser", "browser")
            fetchers.append(
                browser.BrowserFetcher(
                    executable_path=self.chromium,
                    limits=self.limits,
                    address_policy=self.address_policy,
                    settle_timeout=self.browser_settle,
                    ignore_https_errors=self.verify is False,
                )
            )
        return fetchers

    def runner(
        self,
        fetchers: Sequence[Fetcher],
        index: WebIndex | None,
        *,
        robots: RobotsCache | None,
        policy: EscalationPolicy | None = None,
        **options: Any,
    ) -> FetchRunner:
        """A runner of ``fetchers`` with this configuration's concurrency, per-domain
        limit and delay, and its policy unless ``policy`` is given; ``options``:
        the rest of :class:`FetchRunner`'s (``owns_fetchers``, ``on_attempt``, ``pacer``)."""
        return FetchRunner(
            fetchers,
            index,
            policy=self.policy if policy is None else policy,
            robots=robots,
            concurrency=self.concurrency,
            per_domain=self.per_domain,
            domain_delay=self.domain_delay,
            **options,
        )

    def robots_cache(self) -> RobotsCache | None:
        return RobotsCache(self.http_fetcher(), owns_fetcher=True) if self.obey_robots else None
