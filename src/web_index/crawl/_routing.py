"""Asking the pipeline's searchers: a ``search`` to the orchestrator, the answer
on a reply queue of the asker's own.

One :class:`SearchRouter` per process: a thread reads its reply queue and
hands each ``results`` message to the search waiting for it, so any number
of searches (threads, or tasks through :meth:`SearchRouter.asearch`) share
the one queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

from web_index.crawl._messages import MessageError, Results, Search, decode, encode
from web_index.crawl._site_files import check_site
from web_index.crawl.queues import Broker
from web_index.errors import SearchError, SearchQueryError, SearchUnavailableError, SiteNotFoundError
from web_index.search import SearchPage, check_page

__all__ = ["SearchRouter"]

log = logging.getLogger("web_index.crawl")

_ERRORS: dict[str, type[SearchError]] = {
    "not_found": SiteNotFoundError,
    "query": SearchQueryError,
    "unavailable": SearchUnavailableError,
}


class SearchRouter:
    """Searches routed by the orchestrator on ``broker``; each waits up to ``timeout`` s."""

    def __init__(self, broker: Broker, *, timeout: float = 10.0) -> None:
        self.broker = broker
        self.timeout = timeout
        self.reply_to = f"reply.{uuid.uuid4().hex}"
        self._waiting: dict[str, tuple[Future[Results], float, str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, name="wi-search-replies", daemon=True)
        self._reader.start()

    def search(self, site: str, query: str, *, limit: int = 10, offset: int = 0) -> SearchPage:
        """Rank ``site``'s pages for ``query``; :class:`SearchError` saying why not."""
        try:
            answer = self._ask(site, query, limit, offset).result(timeout=self.timeout + 1)
        except FutureTimeout:
            raise self._late(site) from None
        return self._page(answer, site)

    async def asearch(self, site: str, query: str, *, limit: int = 10, offset: int = 0) -> SearchPage:
        waiting = self._ask(site, query, limit, offset)
        try:
            answer = await asyncio.wait_for(asyncio.wrap_future(waiting), self.timeout + 1)
        except TimeoutError:
            raise self._late(site) from None
        return self._page(answer, site)

    def _ask(self, site: str, query: str, limit: int, offset: int) -> Future[Results]:
        site = check_site(site)
        check_page(limit, offset)  # the message would be refused on arrival, unanswered
        ask = Search(
            id=uuid.uuid4().hex,
            site=site,
            query=query,
            limit=limit,
            offset=offset,
            reply_to=self.reply_to,
            deadline=time.time() + self.timeout,
        )
        waiting: Future[Results] = Future()
        with self._lock:
            self._waiting[ask.id] = (waiting, ask.deadline, site)
        try:
            self.broker.send("orch", [encode(ask)])
        except Exception:
            with self._lock:
                self._waiting.pop(ask.id, None)
            raise
        return waiting

    def _page(self, answer: Results, site: str) -> SearchPage:
        if answer.page is not None:
            return answer.page
        error = _ERRORS.get(answer.kind or "failed", SearchError)
        raise error(answer.error or f"no answer for {site!r}")

    def _late(self, site: str) -> SearchUnavailableError:
        return SearchUnavailableError(
            f"no searcher answered for {site!r} within {self.timeout:g}s:"
            " are an orchestrator and a searcher running?"
        )

    def _expire(self) -> None:
        now = time.time()
        with self._lock:
            late = [(k, v) for k, v in self._waiting.items() if v[1] < now]
            for key, _ in late:
                del self._waiting[key]
        for _, (waiting, _, site) in late:
            if not waiting.done():
                waiting.set_exception(self._late(site))

    def _read(self) -> None:
        while not self._stop.is_set():
            self._expire()
            try:
                got = self.broker.receive(self.reply_to, limit=64, lease=30.0, wait=0.25)
            except Exception:
                log.exception("reading search replies failed")
                self._stop.wait(1.0)
                continue
            for delivery in got:
                try:
                    answer = decode(delivery.body)
                except MessageError:
                    answer = None
                with contextlib.suppress(Exception):
                    self.broker.ack(delivery)
                if not isinstance(answer, Results):
                    continue
                with self._lock:
                    entry = self._waiting.pop(answer.id, None)
                if entry is not None and not entry[0].done():
                    entry[0].set_result(answer)

    def close(self) -> None:
        """Stop reading, fail the searches still waiting, and delete the reply queue."""
        self._stop.set()
        self._reader.join(timeout=5)
        with contextlib.suppress(Exception):
            self.broker.forget(self.reply_to)
        with self._lock:
            left, self._waiting = list(self._waiting.values()), {}
        for waiting, _, _ in left:
            if not waiting.done():
                waiting.set_exception(SearchUnavailableError("the search router was closed"))
