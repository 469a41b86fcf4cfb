"""The saves a server runs: "save a page now" from the web pages and ``POST
/api/save``, both bounded here. A URL is checked before anything is fetched (an
http(s) URL, an address the policy allows); at most ``max_in_flight`` saves run
at once, each for at most ``timeout`` seconds; the fetchers are shared by the
saves and closed with the app. A save is a job with an id: the pages poll it
while it runs; the last ones stay known for a while after."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from web_index.crawl import SavedPage, SaveStep, normalise, save_page
from web_index.fetch import AddressRefusedError, FetchConfig, Fetcher, FetchOutcome
from web_index.index import WebIndex

__all__ = ["DEFAULT_MAX_SAVES", "DEFAULT_SAVE_TIMEOUT", "SaveJob", "SaveRefusedError", "Saves"]

DEFAULT_MAX_SAVES = 4
DEFAULT_SAVE_TIMEOUT = 90.0
_KEPT = 256  # finished saves whose status can still be asked for, the newest
_KEPT_FOR = 3600.0
_RESOLVE_TIMEOUT = 10.0


class SaveRefusedError(Exception):
    """A save that is not started: its HTTP status and one line saying why."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(slots=True)
class SaveJob:
    """One save: where it is (``step``), and once done what it recorded
    (``saved``), the capture it made, or why it could not finish (``problem``)."""

    id: str
    url: str
    started: datetime
    step: SaveStep | None = None
    saved: SavedPage | None = None
    capture: dict[str, str] | None = None  # "timestamp" and "url" of the page's capture
    problem: str | None = None
    finished: float | None = None  # time.monotonic() when it ended
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.finished is not None

    @property
    def page(self) -> FetchOutcome | None:
        return self.saved.page if self.saved is not None else None

    @property
    def state(self) -> str | None:
        """The page's last attempt's state (``None`` before it ended)."""
        return str(self.page.state) if self.page is not None else None

    @property
    def reason(self) -> str:
        """Why the save failed, in words: the last attempt's reason, else the save's own."""
        page = self.page
        if page is not None and not page.state.is_success:
            return page.final.why or str(page.state)
        return self.problem or ""

    @property
    def requisites_failed(self) -> int:
        got = self.saved.requisites if self.saved is not None else []
        return sum(1 for r in got if not r.state.is_success)


class Saves:
    """The saves of one app into ``index``, fetched as ``config`` says."""

    def __init__(
        self,
        index: WebIndex,
        config: FetchConfig,
        *,
        max_in_flight: int = DEFAULT_MAX_SAVES,
        timeout: float = DEFAULT_SAVE_TIMEOUT,
    ) -> None:
        if max_in_flight < 1 or timeout <= 0:
            raise ValueError(
                f"max_saves must be at least 1 and save_timeout above 0, got {max_in_flight}, {timeout}"
            )
        self.index = index
        self.config = config
        self.max_in_flight = max_in_flight
        self.timeout = timeout
        self._jobs: OrderedDict[str, SaveJob] = OrderedDict()
        self._running: set[str] = set()
        self._fetchers: list[Fetcher] | None = None

    async def check(self, raw: str) -> str:
        """The URL to save, normalised; refused (400, 403) when it is not one to fetch."""
        asked = raw.strip()
        if not asked:
            raise SaveRefusedError(400, "url: give the URL of the page to save")
        url = normalise(asked)
        if url is None:
            raise SaveRefusedError(400, f"url: {asked!r} is not an http(s) URL")
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            async with asyncio.timeout(_RESOLVE_TIMEOUT):
                await self.config.address_policy.resolve(parts.hostname or "", port)
        except AddressRefusedError as exc:
            raise SaveRefusedError(403, f"url: {exc}") from None
        except (OSError, TimeoutError):
            pass  # a name that does not resolve: the attempt records it (unreachable)
        return url

    def start(self, url: str) -> SaveJob:
        """A save of ``url`` (from :meth:`check`), started; a 429 when the server runs its most."""
        self._forget()
        if len(self._running) >= self.max_in_flight:
            raise SaveRefusedError(
                429,
                f"{self.max_in_flight} saves are running, the most this server runs at once:"
                " try again in a minute",
                {"retry-after": "30"},
            )
        job = SaveJob(id=secrets.token_urlsafe(16), url=url, started=datetime.now(UTC))
        self._jobs[job.id] = job
        self._running.add(job.id)
        job.task = asyncio.create_task(self._run(job))
        return job

    def job(self, job_id: str) -> SaveJob | None:
        return self._jobs.get(job_id)

    async def _run(self, job: SaveJob) -> None:
        began = time.monotonic()

        def noted(step: SaveStep) -> None:
            job.step = step

        try:
            # The requisites are given up a little before the limit, so that the page's
            # outcome is still known; a page whose own fetch outlasts it is cut there.
            async with asyncio.timeout(self.timeout):
                job.saved = await save_page(
                    self.index,
                    job.url,
                    config=self.config,
                    fetchers=self._shared(),
                    deadline=began + self.timeout * 0.9,
                    on_step=noted,
                )
            if job.page is not None and job.page.state.is_success:
                job.capture = await asyncio.to_thread(_capture_of, self.index, job.page)
        except TimeoutError:
            job.problem = (
                f"the save's time limit ({self.timeout:g} s) ran out while fetching"
                f" {job.step.url if job.step else job.url}; what was fetched by then is recorded"
            )
        except Exception as exc:  # the store could not be written, a fetcher broke: said, not a traceback
            job.problem = f"the save failed: {exc}"
        finally:
            job.finished = time.monotonic()
            self._running.discard(job.id)

    def _shared(self) -> list[Fetcher]:
        if self._fetchers is None:
            self._fetchers = self.config.build_fetchers()
        return self._fetchers

    def _forget(self) -> None:
        """Drop finished saves past their time, and the oldest past ``_KEPT``."""
        now = time.monotonic()
        done = [j for j in self._jobs.values() if j.finished is not None]
        for job in done:
            if now - (job.finished or now) > _KEPT_FOR or len(self._jobs) > _KEPT:
                del self._jobs[job.id]

    async def aclose(self) -> None:
        """Stop the saves still running (what they fetched is recorded) and close the fetchers."""
        tasks = [j.task for j in self._jobs.values() if j.task is not None and not j.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for fetcher in self._fetchers or []:
            await fetcher.aclose()
        self._fetchers = None


def _capture_of(index: WebIndex, page: FetchOutcome) -> dict[str, str] | None:
    """The capture the page's last attempt stored: its final response's, newest first."""
    key, final = page.key, page.final.final
    if key is None or final is None:
        return None
    for line in index.captures(final.request_url, match="exact", reverse=True):
        _surt, stamp, rest = line.split(" ", 2)
        fields: dict[str, Any] = json.loads(rest)
        if fields.get("request_id") == key.request_id:
            return {"timestamp": stamp, "url": str(fields["url"])}
    return None
