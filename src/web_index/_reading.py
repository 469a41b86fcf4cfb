"""The read half of :class:`~web_index.WebIndex`: queries, scans, capture lines and digests,
the methods a read-only handle offers (``index.py`` adds opening, writing and housekeeping)."""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime

from web_index.errors import InvalidRecordError
from web_index.models import (
    AttemptMetadata,
    Digest,
    DigestHit,
    Page,
    PageKey,
    Query,
    RecordType,
    Response,
    from_us,
    to_us,
)
from web_index.query import Plan, Result, run_plans, run_queries, time_bound
from web_index.storage import Store, capture_response, find_capture_lines, gc_paused, parse_capture_line
from web_index.urls import key_and_domain, surt_prefixes

__all__ = ["Reading"]


class Reading:
    """Every way a ``WebIndex`` answers: set up by ``WebIndex.__init__``."""

    location: str
    _store: Store
    _buffer_location: str | None  # what another process opens to share the buffer
    _reopenable: bool  # whether another process can open the store again

    def query(self, queries: Sequence[Query]) -> list[Result]:
        """Answer queries in input order: a :class:`Page` (``get``/``head``), an
        :class:`AttemptMetadata` (``*-metadata``) or ``None`` for each."""
        return self._run(queries, bodies=True)  # type: ignore[return-value]

    def iter_query(
        self, queries: Iterable[Query], *, batch_size: int = 20_000
    ) -> Iterator[tuple[Query, Result]]:
        """Answer a stream of queries ``batch_size`` at a time, yielding
        ``(query, result)`` in input order: memory depends on the batch, not on
        the number of queries or the size of the store."""
        it = iter(queries)
        while batch := list(itertools.islice(it, batch_size)):
            yield from zip(batch, self.query(batch), strict=True)

    def query_file(
        self,
        source: str | os.PathLike[str] | Iterable[Query],
        destination: str | os.PathLike[str],
        *,
        batch_size: int = 20_000,
        on_progress: Callable[[int], None] | None = None,
        scheduler: str | None = None,
        jobs: int = 1,
    ) -> int:
        """Answer every query of ``source`` (a Parquet file of queries, see
        :func:`~web_index.models.write_queries`, or any iterable of queries) into a
        Parquet file of results (:data:`~web_index.models.RESULT_SCHEMA`), one row
        per query in input order; return how many.

        Built for millions of queries: they are answered ``batch_size`` at a
        time in an order of the engine's choosing (grouped by partition, so that
        each file is read about once per million queries) and written back in
        input order; memory does not grow with the number of queries or the
        size of the store. The file appears complete or not at all.
        ``on_progress`` is called with the number answered so far.
        ``jobs`` > 1 answers the batches in that many worker processes, each
        opening this store by its location (a store with a ``Buffer`` object
        cannot be opened again: its batches are answered here); they start only
        for more than one batch. ``scheduler`` (``tcp://host:port``) answers the
        batches on that Dask cluster, whose workers open this store by its
        location (docs/scale.md).
        """
        if jobs < 1:
            raise ValueError("jobs must be at least 1")
        if scheduler is not None or (jobs > 1 and self._reopenable):
            from web_index._on_cluster import answer_file

            return answer_file(
                self.location,
                self._buffer_location,
                scheduler if scheduler is not None else jobs,
                self._answer_plans,
                source,
                destination,
                batch_size=batch_size,
                on_progress=on_progress,
            )
        from web_index.query import answer_to_file

        return answer_to_file(
            self._answer_plans, source, destination, batch_size=batch_size, on_progress=on_progress
        )

    def presence(self, queries: Sequence[Query]) -> list[bool]:
        """Whether each query matches anything, exactly as ``query(...) is not None``,
        without reading any body."""
        return self._run(queries, bodies=False)  # type: ignore[return-value]

    def scan(
        self,
        type: RecordType | str = RecordType.GET,
        *,
        domain: str | None = None,
        url_prefix: str | None = None,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
    ) -> Iterator[Page | AttemptMetadata]:
        """Every stored record of ``type``, buffered ones included: pages for
        ``get``/``head``, metadata records for the metadata types; months
        oldest first, then by partition domain, URL key, time and request id.

        ``domain`` keeps one registrable domain (all its hosts); ``url_prefix``
        the URLs whose normalised key starts with the prefix's; ``start`` and
        ``end`` (inclusive) the attempts that began within them. Memory stays
        bounded by a row group of each file of the partition being read.
        """
        from web_index.query import scan_records

        return scan_records(
            self._store, RecordType.parse(type), domain=domain, url_prefix=url_prefix, start=start, end=end
        )

    def captures(
        self,
        url: str,
        *,
        match: str = "exact",
        type: RecordType | str = RecordType.GET,
        start: datetime | str | None = None,
        end: datetime | str | None = None,
        reverse: bool = False,
    ) -> Iterator[str]:
        """Every capture (each response of a stored ``get`` or ``head`` chain)
        whose SURT key ``match``es ``url`` as a CDX query's ``matchType`` does
        (``exact``, ``prefix``, ``host``, ``domain``), taken from ``start`` to
        ``end`` (inclusive, whole seconds; the forms :meth:`scan` takes),
        buffered ones included: CDXJ lines by SURT key and time, lazily, from
        the capture indexes compaction writes (docs/format.md). ``reverse``: newest
        first (by key and second descending; the captures of one key in one
        second still in line order, as the CDX API's ``sort=reverse``), which
        for an exact match reads the months from the newest only as far as the
        caller reads."""
        kind = RecordType.parse(type)
        if kind.is_metadata:
            raise InvalidRecordError("type", f"{kind.value} records are not captures: get or head")
        if match not in ("exact", "prefix", "host", "domain"):
            raise InvalidRecordError("match", f"expected exact, prefix, host or domain, got {match!r}")
        prefixes = tuple(p.encode() for p in surt_prefixes(url, match))
        lines = find_capture_lines(
            self._store,
            kind,
            key_and_domain(url)[1],
            prefixes,
            start_us=None if start is None else to_us(time_bound(start, "start", end=False)),
            end_us=None if end is None else to_us(time_bound(end, "end", end=True)),
            reverse=reverse,
        )
        return (line.decode() for line in lines)

    def capture_response(
        self, line: str | bytes, *, type: RecordType | str = RecordType.GET
    ) -> Response | None:
        """The stored response a line of :meth:`captures` stands for, body
        included (``None`` only if no such record is stored).

        A line from a capture index holds the response and its body's place
        (docs/format.md): one positioned read of its data page, checked against
        the line's digest, and nothing looked up. Any other line (a buffered
        capture, one of a part file) and a place that no longer holds the body
        (the file compacted again) load the record by its page key, as
        :meth:`query` does."""
        kind = RecordType.parse(type)
        raw = line.encode() if isinstance(line, str) else line
        found = capture_response(self._store.backend, kind, raw)
        if found is not None:
            return found
        _key, _stamp, where = parse_capture_line(raw)
        key = PageKey(
            url=where.page, timestamp=from_us(where.attempt_us), request_id=where.request_id, type=kind
        )
        page = self.query([key])[0]
        if isinstance(page, Page) and where.position < len(page.responses):
            return page.responses[where.position]
        return None

    def lookup_digest(self, *digests: str | Digest) -> list[DigestHit]:
        """Every stored GET response whose body has one of these payload digests
        (``"sha1:<base32>"`` as WARC writes it, or ``"sha256:<hex or base32>"``),
        buffered or in files, ordered by attempt time: one hash, every location.

        A malformed digest is an :class:`~web_index.errors.InvalidRecordError`
        naming ``digest``.
        """
        from web_index.storage import find_payloads

        wanted = [d if isinstance(d, Digest) else Digest.parse(d) for d in digests]
        with gc_paused():
            return find_payloads(self._store, wanted)

    def _run(self, queries: Sequence[Query], *, bodies: bool) -> list[Result | bool]:
        with gc_paused():
            return run_queries(self._store, list(queries), bodies=bodies)

    def _answer_plans(self, plans: list[Plan]) -> list[Result]:
        """A bulk batch's answers, from its queries' plans (``query_file``)."""
        with gc_paused():
            return run_plans(self._store, plans, bodies=True)  # type: ignore[return-value]

    async def async_query(self, queries: Sequence[Query]) -> list[Result]:
        """:meth:`query` off the event loop."""
        return await asyncio.to_thread(self.query, queries)

    async def async_presence(self, queries: Sequence[Query]) -> list[bool]:
        """:meth:`presence` off the event loop."""
        return await asyncio.to_thread(self.presence, queries)
