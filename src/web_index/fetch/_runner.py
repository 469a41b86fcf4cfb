"""Many URLs through the fetchers: concurrency, politeness, escalation, recording.

A global semaphore bounds attempts in flight; each domain has its own bound
and a minimum delay between attempt starts (raised to robots.txt's
Crawl-delay). A URL's attempts follow the escalation policy, and every
attempt, failed or not, is inserted into the index before the next begins.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from web_index.fetch._attempt import Attempt, Fetcher, Method, Stopwatch, utc_now
from web_index.fetch._pacing import LocalPacer, Pacer
from web_index.fetch._policy import Action, Decision, EscalationPolicy, plan_fetchers
from web_index.fetch._robots import RobotsCache
from web_index.models import AttemptState, PageKey
from web_index.urls import domain_of

if TYPE_CHECKING:
    from web_index.index import WebIndex

__all__ = ["FetchOutcome", "FetchRunner", "Recorder"]

_MAX_CRAWL_DELAY = 30.0  # a robots.txt asking for more is not allowed to stall a run


@dataclass(slots=True)
class FetchOutcome:
    """Every attempt made for one URL, and the keys they were stored under."""

    url: str
    method: Method
    attempts: list[Attempt] = field(default_factory=list)
    keys: list[PageKey] = field(default_factory=list)

    @property
    def final(self) -> Attempt:
        return self.attempts[-1]

    @property
    def state(self) -> AttemptState:
        return self.final.state

    @property
    def key(self) -> PageKey | None:
        """The key of the last attempt (a data key when it succeeded)."""
        return self.keys[-1] if self.keys else None


class Recorder:
    """Inserts attempts into a :class:`WebIndex` off the event loop.

    One writer task drains a queue and inserts whatever has accumulated in a
    single ``insert_many`` call: under load, attempts are batched into one
    durable transaction; when idle, each is written at once.
    """

    def __init__(self, index: WebIndex, *, max_batch: int = 256) -> None:
        self.index = index
        self._max_batch = max_batch
        self._queue: asyncio.Queue[tuple[Attempt, asyncio.Future[PageKey]]] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    async def record(self, attempt: Attempt) -> PageKey:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._drain())
        future: asyncio.Future[PageKey] = asyncio.get_running_loop().create_future()
        await self._queue.put((attempt, future))
        return await future

    async def _drain(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            items = [(a.method, a.url, a.started, a.metadata(), a.responses) for a, _ in batch]
            try:
                keys = await asyncio.to_thread(self.index.insert_many, items)
            except Exception as exc:  # the callers decide; the writer keeps going
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, future), key in zip(batch, keys, strict=True):
                if not future.done():
                    future.set_result(key)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class _Domain:
    __slots__ = ("slots",)

    def __init__(self, concurrency: int) -> None:
        self.slots = asyncio.Semaphore(concurrency)


AttemptHook = Callable[[Attempt, Decision], None]


class FetchRunner:
    """Fetch URLs with escalation and record every attempt into ``index``.

    ``fetchers`` are ordered by calibre by the policy; ``index`` may be
    ``None`` to fetch without recording (attempts are still returned).
    ``robots`` is a :class:`RobotsCache`, or ``None`` to ignore robots.txt.
    ``on_attempt`` is called after each attempt with the policy's decision.
    ``pacer`` spaces the starts to a domain by ``domain_delay`` (or its
    Crawl-delay): its own :class:`LocalPacer` by default, or one shared with
    other processes. :meth:`aclose` closes the fetchers too, unless
    ``owns_fetchers`` is false.
    """

    def __init__(
        self,
        fetchers: Sequence[Fetcher],
        index: WebIndex | None = None,
        *,
        policy: EscalationPolicy | None = None,
        robots: RobotsCache | None = None,
        concurrency: int = 16,
        per_domain: int = 2,
        domain_delay: float = 0.0,
        on_attempt: AttemptHook | None = None,
        rng: random.Random | None = None,
        owns_fetchers: bool = True,
        pacer: Pacer | None = None,
    ) -> None:
        if concurrency < 1 or per_domain < 1 or domain_delay < 0:
            raise ValueError("concurrency and per_domain must be >= 1, domain_delay >= 0")
        self.fetchers = list(fetchers)
        self.policy = policy or EscalationPolicy()
        self.robots = robots
        self.concurrency = concurrency
        self.per_domain = per_domain
        self.domain_delay = domain_delay
        self.on_attempt = on_attempt
        self.owns_fetchers = owns_fetchers
        self.pacer: Pacer = pacer or LocalPacer()
        self._rng = rng or random.Random()
        self._recorder = Recorder(index) if index is not None else None
        self._global: asyncio.Semaphore | None = None
        self._domains: dict[str, _Domain] = {}
        self._crawl_delays: dict[str, float] = {}

    async def run(self, urls: Iterable[str], method: Method = "get") -> list[FetchOutcome]:
        """Fetch every URL; outcomes in input order."""
        return list(await asyncio.gather(*(self.fetch(url, method) for url in urls)))

    async def aclose(self) -> None:
        """Stop the recorder and close the fetchers (unless not ``owns_fetchers``)."""
        if self._recorder is not None:
            await self._recorder.aclose()
        if self.owns_fetchers:
            for fetcher in self.fetchers:
                await fetcher.aclose()

    async def __aenter__(self) -> FetchRunner:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def fetch(self, url: str, method: Method = "get") -> FetchOutcome:
        """Fetch one URL through the policy: retries, escalation, recording."""
        outcome = FetchOutcome(url, method)
        plan = plan_fetchers(self.fetchers, method, self.policy)
        if not plan:
            raise ValueError(
                f"no fetcher can {method.upper()} within calibres "
                f"{self.policy.min_calibre}..{self.policy.max_calibre}"
            )
        level = 0
        retries_here = 0
        while True:
            fetcher = plan[level]
            attempt = await self._attempt(fetcher, url, method, len(outcome.attempts))
            outcome.attempts.append(attempt)
            if self._recorder is not None:
                outcome.keys.append(await self._recorder.record(attempt))
            decision = self.policy.decide(
                attempt.state,
                retries_here=retries_here,
                attempts=len(outcome.attempts),
                can_escalate=level + 1 < len(plan),
                retry_after=attempt.retry_after,
                rng=self._rng,
            )
            if self.on_attempt is not None:
                self.on_attempt(attempt, decision)
            if decision.action is Action.STOP:
                return outcome
            if decision.action is Action.RETRY:
                retries_here += 1
            else:
                level += 1
                retries_here = 0
            if decision.delay > 0:
                await asyncio.sleep(decision.delay)

    async def _attempt(self, fetcher: Fetcher, url: str, method: Method, number: int) -> Attempt:
        if self._global is None:
            self._global = asyncio.Semaphore(self.concurrency)
        if self.robots is not None:
            watch = Stopwatch()
            started = utc_now()
            verdict = await self.robots.check(url)
            if not verdict.allowed:
                return Attempt(
                    url=url,
                    method=method,
                    state=verdict.state or AttemptState.ERROR,
                    started=started,
                    fetcher_name=fetcher.name,
                    fetcher_version=fetcher.version,
                    fetcher_calibre=fetcher.calibre,
                    run_time=watch.elapsed(),
                    retry_attempt=min(number, 255),
                    logs=[f"not fetched: {verdict.reason}"],
                )
            if verdict.crawl_delay is not None:
                self._crawl_delays[domain_of(url)] = min(verdict.crawl_delay, _MAX_CRAWL_DELAY)
        domain = domain_of(url)
        slot = self._domains.get(domain)
        if slot is None:
            slot = self._domains[domain] = _Domain(self.per_domain)
        async with slot.slots, self._global:
            delay = max(self.domain_delay, self._crawl_delays.get(domain, 0.0))
            if delay:
                await self.pacer.wait_turn(domain, delay)
            return await fetcher.fetch(url, method, min(number, 255))
