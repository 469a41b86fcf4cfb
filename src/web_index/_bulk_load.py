"""``WebIndex.bulk_load``: many attempts into compacted Parquet without the insert buffer."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Protocol, Self, TypeVar

from web_index._attempts import InsertItem, key_of, validate_items
from web_index._on_cluster import worker_store
from web_index.ingest import Limits
from web_index.models import AttemptRows, PageKey
from web_index.storage import (
    Chunks,
    MethodPartition,
    Partition,
    PartitionFiles,
    Piece,
    Store,
    WriteOptions,
    gc_paused,
)

__all__ = ["BulkLoad", "default_commit_bytes"]

_T = TypeVar("_T")
_R = TypeVar("_R")
_H = TypeVar("_H", bound="Handed")


class Handed(Protocol):
    """What a worker's part of a load gives back: the chunks its load handed over, or the
    error that stopped it."""

    @property
    def chunks(self) -> Chunks | None: ...

    @property
    def error(self) -> BaseException | None: ...


_CHUNK_BYTES = 64 << 20  # bodies held before a chunk is spilled (each ~3 times while it is)
# The spill a commit waits for by default. Past one commit a load writes its partitions twice
# (a part file a commit, then the compaction that merges them: a 3 GiB import of WARCs took
# 153.6 s in two commits, 101.5 s in one, bench/results/warc-3gib-s23*.md), so the bigger the
# better, but for two bounds: a commit's merge holds a batch of each chunk spilled (8 GiB is
# ~128 chunks of 64 MiB), and the spill stays on the spool's disk until the commit has written
# its files (half its free space).
_COMMIT_MOST = 8 << 30
_COMMIT_LEAST = 256 << 20
# A commit past this many spilled bytes builds its months' indexes in a process of its own when
# the load has workers, as every commit before the last does: a build holds its whole month (a
# 3 GiB import's loader grew from 122 to 329 MiB building its months after one commit).
_APART_BYTES = 4 << 30
_GET_ROW = 15  # values in a GET response row (its body last); a HEAD row has 14
_NEVER = 1 << 62  # commit_bytes of a load that never commits: it hands over


class BulkLoad:
    """A bulk load in progress (from :meth:`WebIndex.bulk_load`).

    Attempts wait in memory until ``chunk`` of them (or 64 MiB of bodies) are
    held, then are spilled to local disk sorted by partition; each partition's
    file is written once, when ``commit_bytes`` have been spilled and at the
    end (see ``storage/_load.py``), by ``jobs`` processes.

    With ``stage`` (a folder of the store), each partition's rows are written there
    instead (``packed``: in a pack a record type), named nowhere a reader looks, and listed
    in :attr:`staged` for one process to commit with those of other loads (a cluster's
    import: ``storage/_staged.py``);
    nothing is compacted and :attr:`stored` stays 0.
    """

    def __init__(
        self,
        store: Store,
        limits: Limits,
        *,
        chunk: int = 50_000,
        commit_bytes: int | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        jobs: int = 1,
        reopen: tuple[str, str | None] | None = None,
        stage: str | None = None,
        packed: bool = False,
    ) -> None:
        from web_index.errors import InvalidRecordError

        if chunk < 1:
            raise InvalidRecordError("chunk", f"at least 1 attempt, got {chunk}")
        if jobs < 1:
            raise InvalidRecordError("jobs", f"at least 1 process, got {jobs}")
        self._store = store
        self._spill = store.spill(jobs)
        self._reopen = reopen  # the store's location and its buffer's, for workers to compact it
        self._stage = stage
        self._packed = packed
        self._commits = 0
        self.staged: list[tuple[Partition, Piece]] = []
        """With ``stage``: each partition written, and where its rows are."""
        if commit_bytes is None:
            commit_bytes = default_commit_bytes(self._spill.free_bytes)
        self._commit_bytes = commit_bytes
        self._spilled = 0  # bytes the commits so far took from the spill
        self._limits = limits
        self._chunk = chunk
        self._on_progress = on_progress
        self._pending: list[AttemptRows] = []
        self._pending_bytes = 0
        self._payload_of: dict[str, str] = {}  # of the attempts pending: see add()
        self._written: set[MethodPartition] = set()
        self._parted: set[MethodPartition] = set()
        self._finished = False
        self.stored = 0
        """Attempts in the store's files so far (committed)."""

    def add(
        self,
        items: Iterable[InsertItem],
        *,
        request_ids: Sequence[str] | None = None,
        payload_of: Mapping[str, str] | None = None,
    ) -> list[PageKey]:
        """Validate ``items`` (all or none, as :meth:`WebIndex.insert_many`) and
        take them into the load; return their keys. Written when a chunk fills.

        ``payload_of`` maps the request id of an item (a GET attempt of one
        response with an empty body) to that of a response this load took
        before, in the same partition (domain and month) and not committed
        since: the item's body is that response's, stored once (a WARC
        revisit of a capture the same import read). A holder the commit does
        not find there fails it, naming both."""
        self._check_open()
        with gc_paused():
            attempts = validate_items(items, request_ids, self._limits)
            told = _told(attempts, payload_of) if payload_of else {}
            self._pending.extend(attempts)
            self._pending_bytes += _body_bytes(attempts)
            self._payload_of.update(told)
            if len(self._pending) >= self._chunk or self._pending_bytes >= _CHUNK_BYTES:
                try:
                    self._spill_pending()
                except BaseException:
                    # This add is not taken (it raised); what earlier adds took stays, to be spilled later.
                    del self._pending[len(self._pending) - len(attempts) :]
                    self._pending_bytes = _body_bytes(self._pending)
                    for rid in told:
                        self._payload_of.pop(rid, None)
                    raise
                if self._spill.bytes >= self._commit_bytes:
                    self._commit(indexed=True)
        return [key_of(a) for a in attempts]

    def _spill_pending(self) -> None:
        if self._pending:
            self._spill.add(self._pending, self._payload_of)
            self._pending = []
            self._pending_bytes = 0
            self._payload_of = {}

    @property
    def has_workers(self) -> bool:
        """Whether the load has worker processes (``jobs`` > 1 on a local store)."""
        return self._spill.pool is not None

    @property
    def workers(self) -> int:
        """How many worker processes the load has (0: none)."""
        pool = self._spill.pool
        return 0 if pool is None else pool.jobs

    @classmethod
    def handing_over(cls, store: Store, limits: Limits) -> BulkLoad:
        """A worker's load, which never commits: it ends with :meth:`hand_over`."""
        return cls(store, limits, commit_bytes=_NEVER)

    def task_bytes(self, total: int, most: int, least: int = 1) -> int:
        """How many of ``total`` bytes of input a task of :meth:`on_workers` takes: two tasks
        or more a worker (a small input still spreads), from ``least`` to ``most``."""
        return max(least, min(most, total // (2 * max(1, self.workers))))

    def on_workers(self, work: Callable[[_T], _R], items: Iterable[_T]) -> Iterator[_R]:
        """``work`` (a module-level function, or a partial of one) of each item, in order, by
        the load's workers, an item at a time and ``jobs + 1`` of them given ahead of the one
        taken (a commit meanwhile waits behind those only; ``items`` is read as they are
        given); a worker that died is a ``StoreError``."""
        pool = self._spill.pool
        if pool is None:
            raise ValueError("this bulk load has no worker processes")
        return pool.run_each(work, items, chunk=1, ahead=pool.jobs + 1)

    def absorb_each(
        self, work: Callable[[_T], _H], items: Iterable[_T], take: Callable[[_H], BaseException | None]
    ) -> None:
        """:meth:`on_workers`, each result's chunks absorbed in the items' order and the result
        then given to ``take``. The first error, a result's own or one ``take`` returns, stops
        the reading of items; the results in flight are discarded (their chunks removed, so
        that nothing after the error is stored) and the error is raised."""
        stop: BaseException | None = None

        def given() -> Iterator[_T]:
            for item in items:
                if stop is not None:
                    return
                yield item

        for done in self.on_workers(work, given()):
            if stop is not None:
                if done.chunks is not None:
                    done.chunks.discard()
                continue
            if done.error is not None:
                stop = done.error
                continue
            assert done.chunks is not None
            self.absorb(done.chunks)
            stop = take(done)
        if stop is not None:
            raise stop

    def hand_over(self) -> Chunks:
        """End this load without committing: what it took, spilled, for another process's
        load to :meth:`absorb` (a worker's reading of one file of an import). Once only."""
        self._check_open()
        self._finished = True
        try:
            with gc_paused():
                self._spill_pending()
            return self._spill.hand_over()
        finally:
            self._spill.close()

    def absorb(self, chunks: Chunks) -> None:
        """Take what another process's load handed over as if added here now (committed
        with the rest, and when the spill reaches ``commit_bytes``)."""
        self._check_open()
        with gc_paused():
            self._spill_pending()  # this load's own first, in the order taken
            self._spill.absorb(chunks)
            if self._spill.bytes >= self._commit_bytes:
                self._commit(indexed=True)

    def _check_open(self) -> None:
        if self._finished:
            from web_index.errors import StoreError

            raise StoreError("this bulk load has finished")

    @property
    def commits(self) -> int:
        """The commits (or, staged, the folders written) so far: ``payload_of`` names responses
        taken since the last."""
        return self._commits

    def _commit(self, *, indexed: bool = False) -> None:
        """Write what is spilled; ``indexed``: and bring its months' indexes up to date (a commit
        before the last: what the rest of the load looks up, an import's presence checks, would
        otherwise read every file this commit wrote, a key column at a time)."""
        self._commits += 1
        if self._stage is not None:  # a folder a commit: a partition may be in several
            folder = f"{self._stage}/{self._commits}"
            self.staged += self._store.stage_spill(self._spill, folder, packed=self._packed)
            return
        attempts = self._spill.attempts
        self._spilled += self._spill.bytes
        written, parted = self._store.commit_spill(self._spill)
        self._written |= written
        self._parted |= parted
        self.stored += attempts
        if indexed:
            try:
                rows = self._spill.month_rows
                self._store.compact([], index_also=written, apart=self.has_workers, month_rows=rows)
            finally:
                self._spill.drop_month_rows()

    def finish(self) -> int:
        """Write what is held, compact the partitions that got part files and
        index every month written; return the attempts stored. Once only."""
        if not self._finished:
            self._finished = True
            try:
                with gc_paused():
                    self._spill_pending()
                    self._commit()
                if self._stage is not None:
                    return self.stored
                self._let_workers_go()
                self._store.compact(
                    self._parted,
                    index_also=self._written,
                    on_progress=self._on_progress,
                    run=self._run(),
                    # A small load of one commit builds its months' indexes here: building
                    # apart costs a process start (~0.3-0.6 s). A bigger one builds apart, as
                    # a load of several does: what this process keeps of a build of a big
                    # month weighs on whatever it does next, which is not known here.
                    apart=self.has_workers and (self._commits > 1 or self._spilled > _APART_BYTES),
                    month_rows=self._spill.month_rows,  # removed by close, below
                )
            finally:
                self._spill.close()
        return self.stored

    def _let_workers_go(self) -> None:
        """Let the workers that read and committed go: what they kept of it (~180-250 MiB
        each after a 10 GiB import's commits) would be held beside the final compaction's
        own peak, or idle through the month indexes' builds. A compaction on workers starts
        new ones. Only once everything is named: a worker's spooled files are kept only
        while it lives."""
        pool = self._spill.pool
        if pool is not None:
            pool.close()

    def _run(self) -> Callable[[list[tuple[MethodPartition, PartitionFiles | None]]], Iterable[int]] | None:
        """The load's worker processes compacting the partitions it added parts to, each
        opening the store as this process did."""
        pool = self._spill.pool
        if pool is None or self._reopen is None or len(self._parted) < 2:
            return None
        store = self._store
        work = functools.partial(_compact, *self._reopen, store.durable, store.write_options)

        def run(items: list[tuple[MethodPartition, PartitionFiles | None]]) -> Iterator[int]:
            yield from pool.run_each(work, items, chunk=1)
            pool.close()  # idle through the month indexes' builds that follow: let them go

        return run

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.finish()


def default_commit_bytes(free: int) -> int:
    """The spill a commit waits for when the load is not told: as much as a commit's merge and
    the spool's disk (``free`` bytes of it) allow."""
    return max(_COMMIT_LEAST, min(_COMMIT_MOST, free // 2))


def _compact(
    location: str,
    buffer: str | None,
    durable: bool,
    options: WriteOptions,
    listed: tuple[MethodPartition, PartitionFiles | None],
) -> int:
    """A partition compacted by a worker process of a load (as ``_on_cluster`` on a cluster)."""
    store = worker_store(location, buffer, read_only=False, durable=durable, write_options=options)
    partition, files = listed
    return store.compact_partition(partition, listed=files, indexed=True)


def _body_bytes(attempts: Iterable[AttemptRows]) -> int:
    return sum(len(r[-1]) for a in attempts for r in a.responses if len(r) == _GET_ROW and r[-1])


def _told(attempts: Sequence[AttemptRows], payload_of: Mapping[str, str]) -> dict[str, str]:
    """``payload_of`` checked against the attempts it names (see :meth:`BulkLoad.add`)."""
    from web_index.errors import InvalidRecordError
    from web_index.models import RecordType

    given = {a.request_id: a for a in attempts}
    for rid, holder in payload_of.items():
        a = given.get(rid)
        if a is None:
            raise InvalidRecordError("payload_of", f"{rid} is not the request id of an item of this call")
        if a.method is not RecordType.GET or len(a.responses) != 1 or a.responses[0][-1]:
            raise InvalidRecordError("payload_of", f"{rid}: a GET attempt of one response with an empty body")
        if holder == rid or holder in payload_of:
            raise InvalidRecordError("payload_of", f"{rid}: its holder {holder} must hold its own body")
    return dict(payload_of)
