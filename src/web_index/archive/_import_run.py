"""An import's run over its records: which the store holds already, each record's
HTTP message read and checked, and the revisits resolved once what they refer to is
written (``_import`` says what each record type becomes)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from web_index.archive._arc_read import read_arc
from web_index.archive._http import parse_http_response, restore_headers, store_body
from web_index.archive._import_originals import Originals, body_again, partition_of
from web_index.archive._import_report import ImportReport
from web_index.archive._revisits import Waiting, resolve_revisits
from web_index.archive._sources import ArchiveFile
from web_index.archive._warc_fields import RevisitTarget, record_request_id, revisit_target, warcinfo_software
from web_index.archive._warc_read import WarcRecord, read_warc
from web_index.errors import InvalidRecordError, WarcError
from web_index.fetch import join_headers
from web_index.index import WebIndex
from web_index.ingest import validate_attempt
from web_index.models import AttemptMetadata, AttemptState, PageKey, RecordType, Response

if TYPE_CHECKING:
    from web_index._bulk_load import BulkLoad

__all__ = ["Run", "import_files"]

_RESOLVED_AT_ONCE = 2048  # revisits of a bulk import resolved together (their bodies held meanwhile)
_METHODS_KEPT = 1 << 16  # request records waiting for their response (it is mostly the next record)
_DEFAULT_FETCHER = ("warc-import", "unknown")


@dataclass
class _Capture:
    """A record to store. Its HTTP message is parsed and its body decoded only once the
    store says it does not hold it (``Run._read``): importing a file again costs its reading."""

    record: WarcRecord
    url: str
    fetcher: tuple[str, str]
    method: RecordType = RecordType.GET
    refers: RevisitTarget | None = None  # what a revisit refers to
    status: int = 0
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    note: str | None = None  # for the attempt's logs


class Run:
    """One import's state across its files: the records waiting for a presence check, the
    requests waiting for their response, the bulk load and the revisits waiting for it."""

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
        self.deferred: Waiting[tuple[_Capture, str]] | None = None
        # The responses the load took since it last committed, by what a revisit names: its
        # URI and payload digest. A revisit of one of them is stored with the load, not held back
        # for a load of its own (which would rewrite every partition it lands in): told its
        # payload in the same partition (BulkLoad.add's payload_of), else given the body of
        # the original's record read again.
        self.originals = Originals()
        self.source: Path | None = None  # the local WARC file being read, where an original can be read again
        # Where a round of resolved revisits goes, readable by the next round once it ends.
        self.revisit_load: Callable[[], contextlib.AbstractContextManager[BulkLoad]] = functools.partial(
            index.bulk_load, jobs=jobs
        )

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
        if self.deferred is not None and self.originals:
            waiting = self._with_originals(waiting)
        if self.deferred is not None:
            for c, _ in waiting:  # kept till the load commits: what it stores, not the record
                c.record = dataclasses.replace(c.record, headers={}, block=b"")
            self.deferred.add(waiting)
        else:
            self._resolve_all([waiting], bulk=False)
        if problem is not None and not self.skip_invalid:
            raise problem

    def store_deferred(self) -> None:
        """The revisits held back, once the bulk load that took the rest has committed."""
        deferred, self.deferred = self.deferred, None
        self.taken.clear()  # the load that took them has committed
        self.originals.clear()
        if deferred is None:
            return
        seen: set[str] = set()
        again: list[str] = []

        def first_given(at_once: int) -> Iterator[list[tuple[_Capture, str]]]:
            assert deferred is not None
            for part in deferred.slices(at_once):
                fresh = []
                for c, rid in part:
                    if rid in seen:
                        again.append(rid)
                    else:
                        seen.add(rid)
                        fresh.append((c, rid))
                yield fresh

        unresolved = self._resolve_all(first_given(_RESOLVED_AT_ONCE), bulk=True)
        # A revisit given twice (a file named twice) is stored once, then already stored, as
        # through the buffer; or not resolved, twice.
        for rid in again:
            if rid in unresolved:
                self.report.skip("revisit not resolved")
            else:
                self.report.already_stored += 1

    def _resolve_all(self, waiting: Iterable[list[tuple[_Capture, str]]], *, bulk: bool) -> set[str]:
        """Store every revisit whose capture is found, round after round (a revisit may refer to
        one stored the round before; with ``bulk``, each round that finds any a bulk load of its
        own); return the request ids of those not resolved, each counted. ``waiting``: the
        revisits in slices (each resolved at once)."""
        at_once = _RESOLVED_AT_ONCE if bulk else None
        while True:
            found, rest = self._resolve_and_insert(waiting, bulk=bulk)
            if not rest:
                return set()
            if not found:
                for _ in rest:
                    self.report.skip("revisit not resolved")
                return {rid for _, rid in rest}
            size = at_once or len(rest)
            waiting = [rest[at : at + size] for at in range(0, len(rest), size)]

    def _resolve_and_insert(
        self, waiting: Iterable[list[tuple[_Capture, str]]], *, bulk: bool
    ) -> tuple[int, list[tuple[_Capture, str]]]:
        """Store the revisits of ``waiting`` (slices) whose captures are found; return how many,
        and the others. With ``bulk``, into a load of their own, opened once one is found, and
        resolved a slice at a time (none of them readable before that load commits, as if
        at once), so that their bodies are not all held together."""
        stored, rest = 0, []
        with contextlib.ExitStack() as load:
            for part in waiting:
                if not part:
                    continue
                found, left = self._resolve_round(part)
                if found and bulk and not stored:
                    self.load = load.enter_context(self.revisit_load())
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

    def _insert(self, captures: list[tuple[_Capture, str]], payload_of: dict[str, str] | None = None) -> None:
        if captures:
            items = [self._attempt(c) for c, _ in captures]
            ids = [rid for _, rid in captures]
            if self.load is None:
                self.index.insert_many(items, request_ids=ids)
            else:
                committed, commits = self.load.stored, self.load.commits
                self.load.add(items, request_ids=ids, payload_of=payload_of)
                if self.load.stored != committed:  # it committed all it took: readable now
                    self.taken.clear()
                else:
                    self.taken.update(ids)
                if self.load.commits != commits:  # committed or staged: no holder for a revisit now
                    self.originals.clear()
                elif self.deferred is not None:
                    self._taken_originals(captures)
            self.report.stored += len(captures)

    def _taken_originals(self, captures: list[tuple[_Capture, str]]) -> None:
        for c, rid in captures:
            if c.refers is None and c.method is RecordType.GET and c.body:
                self.originals.took(c.url, c.record, rid, self.source)

    def _with_originals(self, waiting: list[tuple[_Capture, str]]) -> list[tuple[_Capture, str]]:
        """Store the revisits of ``waiting`` whose originals this load took (see ``originals``);
        return the others."""
        holders: dict[str, str] = {}
        told: list[tuple[_Capture, str]] = []
        read_again: list[tuple[_Capture, str]] = []
        rest: list[tuple[_Capture, str]] = []
        for c, rid in waiting:
            taken = None if c.refers is None else self.originals.find(c.refers)
            if taken is None:
                rest.append((c, rid))
                continue
            where = partition_of(c.url, c.record.date)
            if taken.where == where:
                holders[rid] = taken.rid
                told.append((c, rid))
            elif taken.where[0] == where[0]:
                rest.append((c, rid))  # another month of its domain: a reference once that is compacted
            elif (body := body_again(taken, self.index.limits.max_body_bytes)) is not None:
                c.body = body
                read_again.append((c, rid))
            else:
                rest.append((c, rid))
        self._insert(told, payload_of=holders)
        self._insert(read_again)
        return rest

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


def import_files(
    run: Run,
    files: list[ArchiveFile],
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
    run: Run,
    file: ArchiveFile,
    source: Path | IO[bytes],
    finished: int,
    on_progress: Callable[[ImportReport], None] | None,
) -> None:
    report = run.report
    fetcher = _DEFAULT_FETCHER
    records = read_arc(source, file.name) if isinstance(source, Path) else read_warc(source, file.name)
    run.source = file.path if file.member is None and not file.is_arc else None
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
