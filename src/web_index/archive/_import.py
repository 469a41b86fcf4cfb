"""WARC records into the store: what each record type becomes.

* ``response`` (an HTTP response): a ``get`` attempt (``head`` if its
  ``request`` record says HEAD), timestamp ``WARC-Date``, one response with
  the status and header fields as sent and the body as the fetchers store
  it: de-chunked, and gzip/deflate content codings decoded (``_http``); the
  fields an export renamed (``x-web-index-original-*``) are restored.
* ``revisit``: the same, with the body of the capture it refers to
  (``WARC-Refers-To``, else ``-Target-URI``, ``-Date`` and its payload
  digest: ``_revisits``), found in the store (the
  batch waiting is stored first; in a bulk load, the revisits wait until the
  load has committed); one that cannot be resolved is counted.
* ``resource`` (a file without HTTP: a screenshot, a PDF from a crawler):
  a ``get`` attempt with a 200 response whose only header is its
  ``Content-Type``.
* a record whose target is not an ``http(s)`` URL (``dns:`` lookups that
  crawlers archive): counted, not stored;
* ``request``: gives its response's method; ``warcinfo``: the fetcher's
  name and version (``software``) for the records after it; ``metadata``,
  ``conversion`` and ``continuation``: counted, not stored.

Every attempt's ``request_id`` is derived from its ``WARC-Record-ID`` (a
UUIDv7 whose time is the capture's), so importing a file again finds each
record stored already and stores nothing twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from web_index.archive._arc_read import read_arc
from web_index.archive._http import parse_http_response, restore_headers, store_body
from web_index.archive._revisits import resolve_revisits
from web_index.archive._sources import ArchiveFile, archive_files
from web_index.archive._warc_fields import (
    RevisitTarget,
    record_request_id,
    revisit_target,
    warcinfo_software,
)
from web_index.archive._warc_read import WarcRecord, read_warc
from web_index.errors import InvalidRecordError, WarcError
from web_index.fetch import join_headers
from web_index.index import WebIndex
from web_index.ingest import validate_attempt
from web_index.models import (
    AttemptMetadata,
    AttemptState,
    PageKey,
    RecordType,
    Response,
)

if TYPE_CHECKING:
    from web_index._bulk_load import BulkLoad

__all__ = ["ImportReport", "import_warcs"]

_DEFAULT_FETCHER = ("warc-import", "unknown")
_RESOLVED_AT_ONCE = 2048  # revisits of a bulk import resolved together (their bodies held meanwhile)
_METHODS_KEPT = 1 << 16  # request records waiting for their response (it is mostly the next record)


@dataclass
class ImportReport:
    """What an import did, record by record."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    stored: int = 0
    already_stored: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # record type or reason -> count
    problems: list[WarcError] = field(default_factory=list)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


@dataclass
class _Capture:
    """A record to store. Its HTTP message is parsed and its body decoded only once the
    store says it does not hold it (``read``): importing a file again costs its reading."""

    record: WarcRecord
    url: str
    fetcher: tuple[str, str]
    method: RecordType = RecordType.GET
    refers: RevisitTarget | None = None  # what a revisit refers to
    status: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    note: str | None = None  # for the attempt's logs


def import_warcs(
    index: WebIndex,
    paths: Iterable[str | os.PathLike[str] | ArchiveFile],
    *,
    calibre: int = 10,
    skip_invalid: bool = False,
    batch: int = 500,
    on_progress: Callable[[ImportReport], None] | None = None,
    bulk: bool = True,
    jobs: int = 1,
) -> ImportReport:
    """Import every record of the WARC (and ARC) files ``paths`` into ``index``:
    files, folders, ``s3://`` prefixes (see :func:`archive_files`).

    Without ``skip_invalid`` the first problem (a record cut short, no
    ``WARC-Date``, a response that is not HTTP, a truncated file) raises it as
    a :class:`WarcError` after storing every record before it; with it, each
    problem is reported in the result and the import goes on.

    With ``bulk`` (the default) the records go into compacted Parquet through a
    :meth:`WebIndex.bulk_load`, visible once it commits (at the end, or every
    few GiB); without it, into the insert buffer, each batch visible at once
    and left to ``flush()`` and ``compact()``. ``jobs``: the bulk load's processes
    (:meth:`WebIndex.bulk_load`).
    """
    report = ImportReport()
    run = _Run(index, calibre, batch, report, jobs, skip_invalid)
    files: list[ArchiveFile] = []
    for p in paths:
        files += [p] if isinstance(p, ArchiveFile) else archive_files([p])
    if not bulk:
        _import_files(run, files, skip_invalid, on_progress)
        return report
    run.deferred = []  # revisits wait until what they refer to is written
    try:
        with index.bulk_load(jobs=jobs) as run.load:
            _import_files(run, files, skip_invalid, on_progress)
    except WarcError:
        run.store_deferred()  # every record before the problem is stored
        raise
    run.store_deferred()
    return report


def _import_files(
    run: _Run,
    files: list[ArchiveFile],
    skip_invalid: bool,
    on_progress: Callable[[ImportReport], None] | None,
) -> None:
    report = run.report
    finished = 0  # bytes of the files done
    for file in files:
        report.files += 1
        with file.local() if file.is_arc else file.open() as source:
            _import_file(run, file, source, finished, on_progress)
        run.store()
        finished += file.size
        report.bytes = finished
        if on_progress is not None:
            on_progress(report)


def _import_file(
    run: _Run,
    file: ArchiveFile,
    source: Path | IO[bytes],
    finished: int,
    on_progress: Callable[[ImportReport], None] | None,
) -> None:
    report = run.report
    fetcher = _DEFAULT_FETCHER
    records = read_arc(source, file.name) if isinstance(source, Path) else read_warc(source, file.name)
    for item in records:
        report.records += 1
        if isinstance(item, WarcError):
            run.fail(item)
            continue
        if item.type == "warcinfo":
            fetcher = warcinfo_software(item.block) or fetcher
            report.skip("warcinfo")
        elif item.type == "request":
            run.request(item)
        elif item.type in ("response", "revisit", "resource"):
            run.capture(item, fetcher)
        else:
            report.skip(item.type)
        if on_progress is not None and report.records % 256 == 0:
            report.bytes = finished + item.offset
            on_progress(report)


class _Run:
    def __init__(
        self, index: WebIndex, calibre: int, batch: int, report: ImportReport, jobs: int, skip_invalid: bool
    ) -> None:
        self.index = index
        self.skip_invalid = skip_invalid
        self.jobs = jobs
        self.calibre = calibre
        self.batch = batch
        self.report = report
        self.pending: list[_Capture] = []
        self.methods: dict[str, RecordType] = {}  # record id -> the method its request used
        # A bulk load's records are readable only once it commits. Till then, the request ids it
        # took (a record given twice is already stored) and the revisits held back (a revisit
        # mostly refers to a capture just before it).
        self.load: BulkLoad | None = None
        self.taken: set[str] = set()
        self.deferred: list[tuple[_Capture, str]] | None = None

    def fail(self, problem: WarcError) -> None:
        self.store()  # the records before it first, and their own problems
        if not self.skip_invalid:
            raise problem
        self.report.problems.append(problem)

    def request(self, record: WarcRecord) -> None:
        method = RecordType.HEAD if record.block[:5].upper() == b"HEAD " else RecordType.GET
        for rid in (record.header("WARC-Record-ID"), record.header("WARC-Concurrent-To")):
            if rid:
                self.methods[rid.strip()] = method
        while len(self.methods) > _METHODS_KEPT:  # a request whose response never came
            del self.methods[next(iter(self.methods))]

    def _method(self, c: _Capture, rid: str) -> RecordType:
        """The method of ``c``'s request: its record names the response, or the response it."""
        named = self.methods.pop(rid, None)
        other = (c.record.header("WARC-Concurrent-To") or "").strip()
        naming = self.methods.pop(other, None) if other else None
        return named if named is not None else naming if naming is not None else c.method

    def capture(self, record: WarcRecord, fetcher: tuple[str, str]) -> None:
        url = (record.header("WARC-Target-URI") or "").strip().strip("<>")
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if scheme not in ("http", "https"):
            # Crawlers archive their DNS lookups (dns:), FTP and more: not web pages.
            self.report.skip(f"{scheme or 'no'} URL")
            return
        refers = None
        if record.type == "revisit":
            refers = revisit_target(record)
            if refers is None:
                self.report.skip("revisit not resolved")
                return
        self.pending.append(_Capture(record, url, fetcher, refers=refers))
        if len(self.pending) > self.batch:
            self.store(keep=1)  # the last one's request record may come next

    def _read(self, c: _Capture) -> WarcError | None:
        """Parse ``c``'s HTTP message and decode its body, and check the attempt it makes;
        the problem, if any, refused alone (a status out of range), not with its batch."""
        record = c.record
        try:
            if record.type == "resource":
                content_type = record.header("Content-Type") or "application/octet-stream"
                c.status, c.headers, c.body = 200, [("Content-Type", content_type)], record.block
            else:
                c.status, wire, body = parse_http_response(record.block)
                c.headers = restore_headers(wire)
                if c.refers is None:  # decoded as the fields on the wire say, stored under the original ones
                    c.body, c.note = store_body(wire, body, self.index.limits.max_body_bytes)
                # else the body it refers to, found when the batch is stored
            validate_attempt(*self._attempt(c), limits=self.index.limits)
        except InvalidRecordError as exc:
            return WarcError(record.path, record.offset, f"{exc.field}: {exc.problem}")
        return None

    def store(self, keep: int = 0) -> None:
        todo, self.pending = (
            self.pending[: len(self.pending) - keep],
            self.pending[len(self.pending) - keep :],
        )
        if not todo:
            return
        ids: list[str] = []
        keys: list[PageKey | None] = []
        for c in todo:
            rid = (c.record.header("WARC-Record-ID") or "").strip()
            c.method = self._method(c, rid)
            ids.append(record_request_id(rid, c.record.date))
            at, kind = c.record.date, c.method.metadata
            try:
                keys.append(PageKey(url=c.url, timestamp=at, request_id=ids[-1], type=kind))
            except InvalidRecordError:
                keys.append(None)  # not stored, then: its problem is found when it is read
        asked = [k for k in keys if k is not None]
        there = iter(self.index.presence(asked))
        taken = self.taken
        new: list[tuple[_Capture, str]] = []
        problem = None
        for c, rid, key in zip(todo, ids, keys, strict=True):
            if key is not None and (next(there) or rid in taken):
                self.report.already_stored += 1
            elif (problem := self._read(c)) is None:
                new.append((c, rid))
            elif self.skip_invalid:
                self.report.problems.append(problem)
            else:
                self.pending.clear()  # read after the problem: not stored
                break
        # Revisits last: the captures they refer to may be in this batch.
        self._insert([(c, rid) for c, rid in new if c.refers is None or c.method is RecordType.HEAD])
        waiting = [(c, rid) for c, rid in new if c.refers is not None and c.method is RecordType.GET]
        if self.deferred is not None:
            for c, _ in waiting:  # held till the load commits: what it stores, not the record
                c.record = dataclasses.replace(c.record, headers={}, block=b"")
            self.deferred += waiting
        else:
            self._resolve_all(waiting, bulk=False)
        if problem is not None and not self.skip_invalid:
            raise problem

    def store_deferred(self) -> None:
        """The revisits held back, once the bulk load that took the rest has committed."""
        deferred, self.deferred = self.deferred or [], None
        self.taken.clear()  # the load that took them has committed
        first: dict[str, tuple[_Capture, str]] = {}
        for c, rid in deferred:
            first.setdefault(rid, (c, rid))
        unresolved = self._resolve_all(list(first.values()), bulk=True)
        # A revisit given twice (a file named twice) is stored once, then already stored, as
        # through the buffer; or not resolved, twice.
        for rid, n in Counter(rid for _, rid in deferred).items():
            for _ in range(n - 1):
                if rid in unresolved:
                    self.report.skip("revisit not resolved")
                else:
                    self.report.already_stored += 1

    def _resolve_all(self, waiting: list[tuple[_Capture, str]], *, bulk: bool) -> set[str]:
        """Store every revisit whose capture is found, round after round (a revisit may refer to
        one stored the round before; with ``bulk``, each round that finds any a bulk load of its
        own); return the request ids of those not resolved, each counted."""
        while waiting:
            found, waiting = self._resolve_and_insert(waiting, bulk=bulk)
            if not found:
                for _ in waiting:
                    self.report.skip("revisit not resolved")
                return {rid for _, rid in waiting}
        return set()

    def _resolve_and_insert(
        self, waiting: list[tuple[_Capture, str]], *, bulk: bool
    ) -> tuple[int, list[tuple[_Capture, str]]]:
        """Store the revisits of ``waiting`` whose captures are found; return how many, and
        the others. With ``bulk``, into a load of their own, opened once one is found, and
        resolved a slice at a time (none of them readable before that load commits, as if
        at once), so that their bodies are not all held together."""
        stored, rest = 0, []
        at_once = _RESOLVED_AT_ONCE if bulk else len(waiting)
        with contextlib.ExitStack() as load:
            for at in range(0, len(waiting), at_once):
                found, left = self._resolve_round(waiting[at : at + at_once])
                if found and bulk and not stored:
                    self.load = load.enter_context(self.index.bulk_load(jobs=self.jobs))
                self._insert(found)
                for c, _ in found:
                    c.body = b""  # handed on: not held until every revisit is resolved
                stored += len(found)
                rest += left
        if bulk and stored:
            self.taken.clear()
        return stored, rest

    def _resolve_round(
        self, waiting: list[tuple[_Capture, str]]
    ) -> tuple[list[tuple[_Capture, str]], list[tuple[_Capture, str]]]:
        """The revisits whose captures are found, each given its capture's body, and the others."""
        bodies = resolve_revisits(self.index, [c.refers for c, _ in waiting if c.refers is not None])
        found, rest = [], []
        for (c, rid), body in zip(waiting, bodies, strict=True):
            if body is None:
                rest.append((c, rid))
            else:
                c.body = body
                found.append((c, rid))
        return found, rest

    def _insert(self, captures: list[tuple[_Capture, str]]) -> None:
        if captures:
            items = [self._attempt(c) for c, _ in captures]
            ids = [rid for _, rid in captures]
            if self.load is None:
                self.index.insert_many(items, request_ids=ids)
            else:
                committed = self.load.stored
                self.load.add(items, request_ids=ids)
                if self.load.stored != committed:  # it committed all it took: readable now
                    self.taken.clear()
                else:
                    self.taken.update(ids)
            self.report.stored += len(captures)

    def _attempt(self, c: _Capture) -> tuple[RecordType, str, datetime, AttemptMetadata, list[Response]]:
        name, version = c.fetcher
        meta = AttemptMetadata(
            state=AttemptState.SUCCESS,
            url=c.url,
            fetcher_name=name,
            fetcher_version=version,
            fetcher_calibre=self.calibre,
            logs=c.note,
        )
        response = Response(
            url=c.url,
            request_url=c.url,
            status_code=c.status,
            headers=join_headers(c.headers),
            timestamp=c.record.date,
            data=c.body if c.method is RecordType.GET else None,
            is_final=True,
            fetcher_name=name,
            fetcher_version=version,
            fetcher_calibre=self.calibre,
        )
        return (c.method, c.url, c.record.date, meta, [response])
