"""A collection at work: its steps looked up in turn, each step's sources at
once, their captures merged, and a capture loaded from wherever its row says.

Lookup (the Index API): the first step whose sources find anything answers;
within a step every source is asked at once and given the step's
``index_timeout``: one that fails or is late is skipped (logged), the others'
captures merged in the query's order. Loading (the Resource API, mementos):
each capture in that order is tried until one loads: a store's from the
store, a ``live_url`` by fetching it (when the step has the ``$live``
loader), a WARC row from the step's WARC loaders, then from next to the CDXJ
index that listed it. A live capture is fetched through the fetchers, under
the address policy; when the collection has a web-index store, what was
fetched is recorded there first and served from it (cache-on-write: the next
lookup finds it in the store).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx

from web_index.archive._bounded import get_bounded
from web_index.archive._cdx import Capture, Memento, ordered
from web_index.archive._cdx_query import CdxQuery
from web_index.archive._collection_config import CollectionSpec, LoaderSpec, SourceSpec
from web_index.archive._http import HOP_BY_HOP
from web_index.archive._index_sources import CdxjIndex, IndexSource, LiveIndex, StoreIndex
from web_index.archive._loaders import MAX_RECORD_BYTES, LoadError, WarcLoader, record_response
from web_index.archive._remote_sources import CdxApiIndex, MementoIndex
from web_index.archive._warc_write import capture_ident
from web_index.errors import InvalidRecordError, WebIndexError
from web_index.fetch import (
    AddressPolicy,
    FetchConfig,
    HttpFetcher,
    aget_or_fetch,
    guarded_client,
    join_headers,
)
from web_index.index import WebIndex
from web_index.models import Page, RecordType, Response, SimplePageQuery

__all__ = ["Collection", "Loaded", "SourceUnavailableError", "open_collections"]

_log = logging.getLogger("web_index.archive")
_CANDIDATES = 25  # captures tried, closest first, before a load gives up
# A remote archive's own fields on its mementos, and the hop-by-hop ones: not the page's.
_NOT_ARCHIVED = HOP_BY_HOP | {"memento-datetime", "link"}


class SourceUnavailableError(WebIndexError):
    """A remote source (an archive, the live web) did not answer, or answered nonsense."""


@dataclass(frozen=True)
class Loaded:
    """A capture and its response; ``record`` is the WARC record as its file
    holds it, when it came from one (else it is built from the response, and
    ``ident`` names it: the export's name for a store's capture)."""

    capture: Capture
    response: Response
    record: bytes | None = None
    ident: str = ""
    sha1: bytes | None = None  # the body's, as its store keeps it (its record needs no hashing again)

    @classmethod
    def of(cls, memento: Memento) -> Loaded:
        ident = capture_ident(memento.request_id, memento.position)
        return cls(memento.capture, memento.response, None, ident, memento.sha1)


class _Step:
    def __init__(
        self,
        sources: Sequence[IndexSource],
        timeout: float | None,
        loaders: Sequence[LoaderSpec],
        owner: Collection,
    ) -> None:
        self.sources = {s.name: s for s in sources}
        self.timeout, self.owner = timeout, owner
        self.live = any(spec.kind == "live" for spec in loaders)
        self.warcs = [WarcLoader(spec, owner.client) for spec in loaders if spec.kind != "live"]

    async def find(self, query: CdxQuery) -> list[Capture]:
        """The sources' captures, merged; a source that fails or is late is
        skipped (logged), unless every one did: then the step fails."""
        if len(self.sources) == 1:  # as below, without a task group's tasks (a lookup's fifth of CPU)
            (only,) = self.sources.values()
            answer = await self._ask(only, query)
            if isinstance(answer, Exception):
                raise answer
            return answer
        try:
            async with asyncio.TaskGroup() as group:  # a question's own fault cancels the rest
                tasks = [group.create_task(self._ask(s, query)) for s in self.sources.values()]
        except BaseExceptionGroup as raised:  # only _ask's InvalidRecordError gets here: the asker's
            raise raised.exceptions[0] from None
        answers = [t.result() for t in tasks]
        found = [a for a in answers if not isinstance(a, Exception)]
        if not found:
            failure = answers[0]
            assert isinstance(failure, Exception)
            raise failure
        if len(found) == 1:
            return found[0]
        return await asyncio.to_thread(ordered, [c for each in found for c in each], query)

    async def _ask(self, source: IndexSource, query: CdxQuery) -> list[Capture] | Exception:
        try:
            if source.answers_inline(query):  # no timeout could interrupt it: none set (4 us)
                return await source.find(query)
            async with asyncio.timeout(self.timeout):
                return await source.find(query)
        except TimeoutError:
            problem = f"no answer in {self.timeout} s"
        except InvalidRecordError:
            raise  # the question's fault (a filter, a URL), not the source's: the asker hears of it
        except WebIndexError as exc:  # the store's own fault: said as it is
            _log.warning("%s: source %s skipped: %s", self.owner.name, source.name, _one_line(exc))
            return exc
        except Exception as exc:  # a source down or malformed must not sink the others
            problem = _one_line(exc)
        _log.warning("%s: source %s skipped: %s", self.owner.name, source.name, problem)
        return SourceUnavailableError(f"{self.owner.name}: source {source.name}: {problem}")

    async def load(self, query: CdxQuery, live: bool) -> Loaded | None:
        if len(self.sources) == 1:
            (only,) = self.sources.values()
            if isinstance(only, StoreIndex):  # find and load in one pass
                found = await only.closest(query)
                return None if found is None else Loaded.of(found)
        for capture in await self.find(replace(query, limit=min(query.limit, _CANDIDATES))):
            try:
                loaded = await self._load(capture, query, live)
            except Exception as exc:  # as pywb: the next capture is tried
                _log.warning("%s: %s not loaded: %s", self.owner.name, capture[0].get("url"), _one_line(exc))
                continue
            if loaded is not None:
                return loaded
        return None

    async def _load(self, capture: Capture, query: CdxQuery, live: bool) -> Loaded | None:
        fields = capture[0]
        if fields.get("live_url") and not live:
            return None
        source = self.sources.get(fields.get("source", ""))
        if source is not None:
            found = await source.memento(capture, query)
            if found is not None:
                return Loaded.of(found)
        if fields.get("live_url") and self.live:
            if isinstance(source, LiveIndex):
                return await self.owner.fetch_live(capture, query.type)
            ident = f"{fields.get('source')}/{fields['timestamp']}/{fields['url']}"
            return Loaded(capture, await self.owner.fetch_replay(capture), None, ident)
        if "filename" in fields:
            places = list(self.warcs)
            if isinstance(source, CdxjIndex):
                places.append(self.owner.warcs_beside(source))
            for place in places:  # each in turn, as pywb: one failing is not the end
                try:
                    record = await place.load(capture)
                except Exception as exc:
                    _log.warning("%s: %s: %s", self.owner.name, place.spec.location, _one_line(exc))
                    continue
                if record is not None:
                    response = await asyncio.to_thread(record_response, record, capture)
                    return Loaded(capture, response, record)
        return None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class Collection:
    """A named collection: the steps of its declaration, open."""

    def __init__(
        self,
        name: str,
        *,
        address_policy: AddressPolicy | None = None,
        remote_timeout: float = 10.0,
        record_into: WebIndex | None = None,
    ) -> None:
        self.name = name
        self.address_policy = address_policy or AddressPolicy()
        # Only the codings the store keeps decoded: the body is stored decoded, its
        # Content-Encoding kept, and an export restores no other (see _http).
        self.client = guarded_client(
            self.address_policy, timeout=remote_timeout, headers={"accept-encoding": "gzip, deflate"}
        )
        # A person asking for a page, not a crawl: no robots.txt; HTTP only (no browser).
        self.fetch_config = FetchConfig(address_policy=self.address_policy, obey_robots=False)
        self._fetcher: HttpFetcher | None = None
        self.record_into = record_into
        self.steps: list[_Step] = []
        self._beside: dict[str, WarcLoader] = {}

    @classmethod
    def of_store(cls, name: str, index: WebIndex) -> Collection:
        """One web-index store, served as it is (never written to)."""
        collection = cls(name)
        collection.add_step([StoreIndex(name, index)], None, ())
        return collection

    @property
    def store(self) -> WebIndex | None:
        """The web-index store this collection is, when it is one alone (a
        single step of a single store source): what its every attempt, failures
        included, can be read from. ``None`` for any other collection."""
        if len(self.steps) == 1 and len(self.steps[0].sources) == 1:
            (only,) = self.steps[0].sources.values()
            if isinstance(only, StoreIndex):
                return only.index
        return None

    def add_step(
        self, sources: Sequence[IndexSource], timeout: float | None, loaders: Sequence[LoaderSpec]
    ) -> None:
        self.steps.append(_Step(sources, timeout, loaders, self))

    async def find(self, query: CdxQuery) -> list[Capture]:
        """The captures ``query`` asks for: the first step's that finds any. A
        step that fails is passed over; if nothing was found and one failed,
        its error is raised (:class:`SourceUnavailableError` for a remote one):
        "not archived" is not said of an archive that did not answer."""
        failed: Exception | None = None
        for step in self.steps:
            try:
                found = await step.find(query)
            except InvalidRecordError:
                raise
            except Exception as exc:
                failed = exc
                continue
            if found:
                return found
        if failed is not None:
            raise failed
        return []

    async def find_cut(self, query: CdxQuery) -> tuple[list[Capture], bool]:
        """At most ``query.limit`` of the captures :meth:`find` gives, and whether
        there were more: one past the limit is asked for, to tell a cut answer
        from a complete one."""
        found = await self.find(replace(query, limit=query.limit + 1))
        cut = len(found) > query.limit
        del found[query.limit :]
        return found, cut

    async def load(self, query: CdxQuery, *, live: bool = True) -> Loaded | None:
        """The first capture, in the query's order (closest to now without
        ``closest``: the latest), that loads; ``None`` if none does. With
        ``live=False`` nothing is fetched from the live web (nor recorded): a
        ``$live`` source's capture and a remote archive's live fallback are
        passed over, as the web pages ask."""
        if query.closest is None:
            query = replace(query, closest=datetime.now(UTC).replace(microsecond=0))
        failed: Exception | None = None
        for step in self.steps:
            try:
                loaded = await step.load(query, live)
            except InvalidRecordError:
                raise
            except Exception as exc:
                failed = exc
                continue
            if loaded is not None:
                return loaded
        if failed is not None:
            raise failed
        return None

    async def fetch_live(self, capture: Capture, type: RecordType) -> Loaded:
        """The capture's URL fetched now; recorded into the collection's store
        first, when it has one (and then named as the export names it)."""
        url = capture[0]["url"]
        if self.record_into is not None:
            (result,) = await aget_or_fetch(
                self.record_into,
                [SimplePageQuery(url=url, type=type)],
                max_age=timedelta(0),
                config=self.fetch_config,
                fetchers=[self._live_fetcher()],
                stale_if_error=False,
            )
            if not isinstance(result, Page):
                raise LoadError(f"{url}: the live fetch failed")
            return Loaded(capture, result.responses[0], None, capture_ident(result.request_id, 0))
        attempt = await self._live_fetcher().fetch(url, "head" if type is RecordType.HEAD else "get")
        if not attempt.responses:
            raise LoadError(f"{url}: {attempt.state.value}: {'; '.join(attempt.logs[-1:])}")
        stamp = attempt.responses[0].timestamp.strftime("%Y%m%d%H%M%S%f")
        return Loaded(capture, attempt.responses[0], None, f"live/{stamp}/{url}")

    def _live_fetcher(self) -> HttpFetcher:
        if self._fetcher is None:
            self._fetcher = self.fetch_config.http_fetcher()
        return self._fetcher

    async def fetch_replay(self, capture: Capture) -> Response:
        """A remote archive's raw memento of ``capture``, as it was archived."""
        fields, moment = capture
        answer, body = await get_bounded(self.client, fields["live_url"], cap=MAX_RECORD_BYTES)
        if answer.status_code >= 400 and "memento-datetime" not in answer.headers:
            raise LoadError(f"{fields['live_url']}: {answer.status_code}")
        headers = join_headers(
            (k, v) for k, v in answer.headers.multi_items() if k.lower() not in _NOT_ARCHIVED
        )
        return Response(
            url=fields["url"],
            request_url=fields["url"],
            status_code=answer.status_code,
            headers=headers,
            timestamp=moment,
            data=body,
            is_final=not 300 <= answer.status_code < 400,
            fetcher_name=fields.get("source", "remote"),
            fetcher_version="-",
            fetcher_calibre=10,
        )

    def warcs_beside(self, source: CdxjIndex) -> WarcLoader:
        """The WARC files next to a CDXJ index, as our export writes them."""
        folder = str(source.folder) + "/"
        if folder not in self._beside:
            self._beside[folder] = WarcLoader(LoaderSpec("warc-prefix", folder), self.client)
        return self._beside[folder]

    async def aclose(self) -> None:
        """Close every source, loader and client, each whatever the others did."""
        closers = [s.aclose for step in self.steps for s in step.sources.values()]
        closers += [w.aclose for step in self.steps for w in step.warcs]
        closers += [w.aclose for w in self._beside.values()]
        closers.append(self.client.aclose)
        if self._fetcher is not None:
            closers.append(self._fetcher.aclose)
        for close in closers:
            try:
                await close()
            except Exception as exc:  # the others still close
                _log.warning("%s: closing: %s", self.name, _one_line(exc))


def load_index(spec: SourceSpec, client: httpx.AsyncClient, *, writable: bool = False) -> IndexSource:
    """The index source ``spec`` declares; remote ones make their calls with
    ``client`` (which passes the address policy); a store opened for writing
    when ``writable`` (a ``$live`` source records into it)."""
    if spec.kind == "web-index":
        index = WebIndex(spec.location, read_only=not writable, create=False)
        return StoreIndex(spec.name, index, owned=True)
    if spec.kind == "file":
        return CdxjIndex(spec.name, Path(spec.location))
    if spec.kind == "cdx":
        return CdxApiIndex(spec.name, spec.location, spec.replay, client)
    if spec.kind == "memento":
        return MementoIndex(spec.name, spec.timemap, spec.replay, client)
    return LiveIndex(spec.name)


def open_collections(
    specs: Mapping[str, CollectionSpec],
    *,
    address_policy: AddressPolicy | None = None,
    remote_timeout: float = 10.0,
) -> dict[str, Collection]:
    """The declared collections, open: their stores, CDXJ files and clients.
    A collection with both a ``$live`` source and a store records into the
    first store it names."""
    out: dict[str, Collection] = {}
    opened: list[StoreIndex] = []
    try:
        for name, spec in specs.items():
            live = any(s.kind == "live" for s in spec.sources)
            collection = Collection(name, address_policy=address_policy, remote_timeout=remote_timeout)
            for step in spec.steps:
                sources = []
                for source_spec in step.sources:
                    writable = live and collection.record_into is None and source_spec.kind == "web-index"
                    source = load_index(source_spec, collection.client, writable=writable)
                    if isinstance(source, StoreIndex):
                        opened.append(source)
                        if writable:
                            collection.record_into = source.index
                    sources.append(source)
                collection.add_step(sources, step.timeout, step.loaders)
            out[name] = collection
    except BaseException:
        for store in opened:  # the ones before the failure: never left open
            store.index.close()
        raise
    return out
