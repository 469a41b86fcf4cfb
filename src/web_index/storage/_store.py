"""The store: files on a backend, the insert buffer, flushing and compaction."""

from __future__ import annotations

import functools
import itertools
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, cast

import pyarrow.parquet as pq

from web_index._retry import retrying
from web_index.errors import ConflictError, StoreError
from web_index.models import AttemptRows, RecordType
from web_index.storage._capture_index import CaptureIndexes
from web_index.storage._capture_index_build import build_capture_index, ensure_capture_indexes
from web_index.storage._clock import SYSTEM_CLOCK, Clock
from web_index.storage._files import (
    WriteOptions,
    row_groups,
    rows_to_table,
    visible_files,
    write_partition_file,
)
from web_index.storage._layout import LOCK_DIR, Partition, StoredFile, compacted_file
from web_index.storage._listing import Listing
from web_index.storage._load import Spill
from web_index.storage._locks import FileLocks, KindLocks, Locks
from web_index.storage._marker import open_or_create
from web_index.storage._merge import merge_sorted
from web_index.storage._month_index_build import build_month_index
from web_index.storage._schema import SORT_KEYS
from web_index.storage.backends import Backend, handle_version
from web_index.storage.buffer import Buffer, MethodPartition, open_buffer

if TYPE_CHECKING:
    from web_index.storage.backends import S3Backend

__all__ = ["FlushPolicy", "Store"]

_Month = tuple[RecordType, int, int]  # a month folder: type, year, month
# A partition as listed, its visible files opened, its superseded files.
_Visible = tuple[list[StoredFile], list[tuple[StoredFile, pq.ParquetFile]], list[StoredFile]]

log = logging.getLogger("web_index.storage")

_METHODS = (RecordType.GET, RecordType.HEAD)


class FlushPolicy(NamedTuple):
    """When buffered rows of a partition go to a Parquet part file.

    ``compact_parts``: compact a partition by itself once it has that many
    part files (0 disables automatic compaction).
    """

    max_rows: int = 100_000
    max_bytes: int = 128 * 1024 * 1024
    max_age_s: float = 900.0
    compact_parts: int = 16


def _default_locks(backend: Backend, buffer: Buffer) -> Locks:
    """Flush locks from a shared buffer if it has them (Postgres), else local ``flock``;
    compaction locks as leases in the bucket for an object store, else local ``flock``."""
    inner = getattr(backend, "inner", backend)  # through the read cache
    local: Locks | None = None

    def local_locks() -> Locks:
        nonlocal local
        if local is None:
            local = FileLocks(backend.local_folder(LOCK_DIR))
        return local

    shared_flush = getattr(buffer, "locks", None)
    flush: Locks = shared_flush() if callable(shared_flush) else local_locks()
    if inner.remote:  # other machines compact too: a lease in the bucket
        from web_index.storage._lease import LeaseLocks

        compact: Locks = LeaseLocks(cast("S3Backend", inner))
    else:
        compact = local_locks()
    return KindLocks({"flush": flush, "compact": compact})


_OPEN_TRIES = 8


def _crash_point(name: str) -> None:
    # Fault injection for the crash tests: WEB_INDEX_CRASH_AT=<name> kills the
    # process at that step as SIGKILL would, leaving whatever is on disk.
    if os.environ.get("WEB_INDEX_CRASH_AT") == name:
        os._exit(137)


class Store(Listing):
    """A store's files and insert buffer: what is listed (:class:`Listing`), flushed and compacted."""

    def __init__(
        self,
        backend: Backend,
        *,
        readonly: bool = False,
        durable: bool = True,
        policy: FlushPolicy | None = None,
        write_options: WriteOptions | None = None,
        buffer: str | Buffer | None = None,
        locks: Locks | None = None,
        clock: Clock = SYSTEM_CLOCK,
        create: bool = True,
    ) -> None:
        super().__init__(backend)
        self.clock = clock
        self.readonly = readonly
        self.durable = durable
        self.policy = policy or FlushPolicy()
        self.write_options = write_options or WriteOptions()
        open_or_create(backend, create=create and not readonly)
        self.buffer = buffer = open_buffer(buffer, backend, readonly=readonly, durable=durable, clock=clock)
        set_generation_source = getattr(backend, "set_generation_source", None)
        if callable(set_generation_source):
            set_generation_source(buffer.generation)
        if locks is None and not readonly:
            locks = _default_locks(backend, buffer)
        self._locks = locks
        self._last_age_check = -float("inf")
        self.capture_indexes = CaptureIndexes(backend)

    @property
    def remote(self) -> bool:
        """Whether reading waits on the network: an object store, or a buffer on a server."""
        return self.backend.remote or self.buffer.remote

    def close(self) -> None:
        self.buffer.close()

    # -- listing (and see Listing) ----------------------------------------------

    def method_partitions(self) -> list[MethodPartition]:
        """Every partition that has files or buffered rows."""
        seen: set[MethodPartition] = set(self.buffer.partitions())
        for method in _METHODS:
            for type in (method, method.metadata):
                for year, month in self.months(type):
                    for domain in self.month_files(type, year, month):
                        seen.add(MethodPartition(method, year, month, domain))
        return sorted(seen)

    # -- writing ---------------------------------------------------------------

    def _writable_locks(self) -> Locks:
        if self._locks is None:
            raise StoreError("this store was opened read-only")
        return self._locks

    def append(self, attempts: Sequence[AttemptRows]) -> None:
        self.buffer.append(attempts)
        _crash_point("after-append")
        try:
            # Plain tuples first: a batch has far fewer partitions than attempts.
            touched = {(a.method, a.year, a.month, a.domain) for a in attempts}
            self.maybe_flush(MethodPartition._make(t) for t in touched)
        except Exception as exc:
            # The attempts are durable and visible already, so the insert has
            # succeeded whatever the flush met (the object store unreachable, a
            # full disk, a file read half-way while its server died): raising
            # would tell the caller it failed and invite it to insert twice.
            # A later flush redoes this one.
            log.warning("flush after insert failed, will retry later: %s", exc, exc_info=True)

    def spill(self) -> Spill:
        """Where a bulk load sorts its chunks before :meth:`commit_spill` writes them (see ``_load``)."""
        self._writable_locks()
        return Spill(self.backend)

    def commit_spill(self, spill: Spill) -> tuple[set[MethodPartition], set[MethodPartition]]:
        """Write a spill's partitions, past the buffer; return those written and
        those that got a part file, for :meth:`compact` to finish."""
        return spill.commit(self._writable_locks(), self.write_options, self, durable=self.durable)

    def maybe_flush(self, touched: Iterable[MethodPartition] = ()) -> None:
        """Flush partitions past a threshold (size checks now, age checks now and then)."""
        p = self.policy
        due = set(self.buffer.oversized(touched, p.max_rows, p.max_bytes))
        now = self.clock.monotonic()
        if now - self._last_age_check >= min(5.0, p.max_age_s):
            self._last_age_check = now
            due.update(self.buffer.due(p.max_rows, p.max_bytes, p.max_age_s))
        self._flush_each(sorted(due))

    def flush(self, partitions: Iterable[MethodPartition] | None = None) -> int:
        """Move buffered rows into part files; return the number of attempts moved."""
        self.backend.remove_orphans()
        targets = list(partitions) if partitions is not None else self.buffer.partitions()
        return self._flush_each(targets)

    def flush_partition(self, mp: MethodPartition) -> int:
        return self._flush_each([mp])

    def _flush_each(self, targets: Sequence[MethodPartition]) -> int:
        """Flush each partition, then compact those with ``compact_parts`` part files or more."""
        moved = [(mp, self._flush_one(mp)) for mp in targets]
        if self.policy.compact_parts:
            self._compact_crowded(sorted({mp for mp, n in moved if n}))
        return sum(n for _, n in moved)

    def _compact_crowded(self, flushed: list[MethodPartition]) -> None:
        def crowded(files: list[StoredFile]) -> bool:
            return sum(1 for f in files if f.part is not None) >= self.policy.compact_parts

        if self.backend.remote:  # a partition's listing is one request by prefix
            for mp in flushed:
                if crowded(self.partition_files(Partition(mp.method, mp.year, mp.month, mp.domain))):
                    self.compact_partition(mp)
            return
        # A local listing reads the whole month folder whatever the prefix: one a month, not
        # one a partition (quadratic in the domains a flush wrote).
        listed = self._month_listed(flushed, {})
        self._compact_listed({mp: by_type for mp, by_type in listed.items() if crowded(by_type[mp.method])})

    def _month_listed(
        self, partitions: Iterable[MethodPartition], listings: dict[_Month, dict[str, list[StoredFile]]]
    ) -> dict[MethodPartition, dict[RecordType, list[StoredFile]]]:
        """The files of both types of each partition, from one listing a month folder (those in
        ``listings`` already, the others taken now and added to it)."""

        def files(type: RecordType, mp: MethodPartition) -> list[StoredFile]:
            month = (type, mp.year, mp.month)
            if month not in listings:  # a folder just written is listed anew at every call
                listings[month] = self.month_files(*month)
            return listings[month].get(mp.domain, [])

        return {mp: {t: files(t, mp) for t in (mp.method, mp.method.metadata)} for mp in partitions}

    def _compact_listed(self, listed: dict[MethodPartition, dict[RecordType, list[StoredFile]]]) -> None:
        """Compact these partitions from their files as ``listed``, then write the capture
        indexes of their months (one listing a month, not one a partition)."""
        months = set()
        for mp in sorted(listed):
            if self._compact_partition(mp, 1, listed[mp], indexed=False):
                months.add((mp.method, mp.year, mp.month))
        for type, year, month in sorted(months):
            ensure_capture_indexes(self.backend, type, year, month, self.month_files(type, year, month))

    def _flush_one(self, mp: MethodPartition) -> int:
        locks = self._writable_locks()
        moved = 0
        with locks.hold("flush", str(mp)):
            # Holding the lock means no live flusher owns a claim on this
            # partition: any claim left is from a flusher that died. Redo it;
            # part names come from the flush id, so a redo overwrites, never doubles.
            for flush_id in self.buffer.claims(mp):
                moved += self._write_claim(mp, flush_id)
            while True:
                flush_id = str(uuid.uuid4())
                if not self.buffer.claim(mp, flush_id, self.policy.max_rows):
                    break
                moved += self._write_claim(mp, flush_id)
        return moved

    def _write_claim(self, mp: MethodPartition, flush_id: str) -> int:
        attempts = list(self.buffer.claimed(flush_id))
        responses = [r for a in attempts for r in a.responses]
        _crash_point("flush-before-write")
        if responses:
            self._write_part(Partition(mp.method, mp.year, mp.month, mp.domain), flush_id, responses)
        _crash_point("flush-between-writes")
        metadata = [a.metadata for a in attempts]
        self._write_part(Partition(mp.method.metadata, mp.year, mp.month, mp.domain), flush_id, metadata)
        _crash_point("flush-before-complete")
        self.buffer.complete(flush_id)
        return len(attempts)

    def _write_part(self, partition: Partition, flush_id: str, rows: list[dict[str, object]]) -> None:
        # Sorted and deduplicated as Python rows, before the table exists: sorting
        # a table copies every body once more (a 64 MiB body cost the flush 11.6
        # times its size in memory with the table sorted, measured by bench/body_bench.py).
        keys = SORT_KEYS[partition.type]
        identity = keys[2:]  # request id (and chain index): one record, one row
        unique = {tuple(r[k] for k in identity): r for r in rows}
        ordered = sorted(unique.values(), key=lambda r: tuple(r[k] for k in keys))
        table = rows_to_table(partition.type, ordered)
        write_partition_file(self.backend, partition, table, self.write_options, part=flush_id)

    # -- compaction ------------------------------------------------------------

    def compact(
        self,
        partitions: Iterable[MethodPartition] | None = None,
        *,
        min_parts: int = 1,
        on_progress: Callable[[int, int], None] | None = None,
        run: Callable[[list[MethodPartition]], Iterable[int]] | None = None,
        index_also: Iterable[MethodPartition] = (),
    ) -> int:
        """Compact partitions with at least ``min_parts`` part files; return how many
        partitions (type, month, domain) changed.

        Then bring the month key index of every month touched (all months when
        ``partitions`` is ``None``) up to date, and write the capture index of
        every compacted file in them that has none.

        ``run`` compacts the partitions elsewhere (each with :meth:`compact_partition`
        of a store at the same location, e.g. on a Dask cluster), yielding each one's
        count as it finishes; the month and capture indexes are still brought up to
        date here, once, after all of them. ``index_also``: partitions whose
        months are indexed too (a bulk load's, written compacted already).
        """
        self.backend.remove_orphans()
        done = 0
        listed: dict[MethodPartition, dict[RecordType, list[StoredFile]]] = {}
        if partitions is None:
            listed = self._partitions_with_parts()
            targets = sorted(listed)
            months = {
                (t, y, m) for method in _METHODS for t in (method, method.metadata) for y, m in self.months(t)
            }
        else:
            targets = sorted(set(partitions))
            months = {
                (t, mp.year, mp.month)
                for mp in itertools.chain(targets, index_also)
                for t in (mp.method, mp.method.metadata)
            }
        total = len(targets) + len(months)
        if run is None:
            # Each partition from the month listings just taken, not listed again (a scan of a
            # month folder each: quadratic in a month's domains), and its capture index left to
            # the month's pass below, which lists each index folder once, not once a partition.
            counts: Iterable[int] = (
                self._compact_partition(mp, min_parts, listed.get(mp), indexed=partitions is not None)
                for mp in targets
            )
        else:
            counts = run(targets)
        for n, changed in enumerate(counts, start=1):
            done += changed
            if on_progress is not None:
                on_progress(n, total)
        if run is not None:
            self._forget_listings(targets)
        for n, (type, year, month) in enumerate(sorted(months), start=len(targets) + 1):
            build_month_index(self.backend, type, year, month)
            if not type.is_metadata:
                ensure_capture_indexes(self.backend, type, year, month, self.month_files(type, year, month))
            if on_progress is not None:
                on_progress(n, total)
        return done

    def _forget_listings(self, partitions: Iterable[MethodPartition]) -> None:
        """Drop the read cache's listings of these partitions' folders: other processes
        compacted them, and only this process's own writes invalidate its cache."""
        invalidate = getattr(self.backend, "invalidate", None)
        if callable(invalidate):
            for mp in partitions:
                for type in (mp.method, mp.method.metadata):
                    invalidate(Partition(type, mp.year, mp.month, mp.domain).compacted_path)

    def _partitions_with_parts(self) -> dict[MethodPartition, dict[RecordType, list[StoredFile]]]:
        """Partitions with a part file in either type, and the files of both types, from one
        listing per month folder (listing each partition's files separately is quadratic in
        the domains of a month)."""
        listings: dict[_Month, dict[str, list[StoredFile]]] = {}
        found: set[MethodPartition] = set()
        for method in _METHODS:
            for type in (method, method.metadata):
                for year, month in self.months(type):
                    listing = listings[type, year, month] = self.month_files(type, year, month)
                    for domain, files in listing.items():
                        if any(f.part is not None for f in files):
                            found.add(MethodPartition(method, year, month, domain))
        return self._month_listed(found, listings)

    def compact_partition(self, mp: MethodPartition, *, min_parts: int = 1) -> int:
        """Compact the partitions of ``mp`` (its type and its metadata type);
        return how many changed (0, 1 or 2)."""
        return self._compact_partition(mp, min_parts, None, indexed=True)

    def _compact_partition(
        self,
        mp: MethodPartition,
        min_parts: int,
        listed: dict[RecordType, list[StoredFile]] | None,
        *,
        indexed: bool,
    ) -> int:
        """:meth:`compact_partition` from the files ``listed`` by type (listed now if
        ``None``); ``indexed``: write the capture index of a compacted ``get``/``head`` file."""
        locks = self._writable_locks()
        with locks.hold("compact", str(mp)):
            with locks.hold("flush", str(mp)):
                # Finish any flush that died, so that none can be redone later
                # into a part this compaction has already absorbed.
                for flush_id in self.buffer.claims(mp):
                    self._write_claim(mp, flush_id)
                    listed = None  # its parts are newer than the listing
            changed = 0
            for type in (mp.method, mp.method.metadata):
                partition = Partition(type, mp.year, mp.month, mp.domain)
                if self._compact_type(partition, min_parts, None if listed is None else listed[type]):
                    changed += 1
                    if indexed and not type.is_metadata:
                        files = self.partition_files(partition)
                        build_capture_index(self.backend, partition, files, prune=True)
            return changed

    def open_visible(self, partition: Partition, files: list[StoredFile] | None = None) -> _Visible:
        """Open the visible files of a partition: its files as listed (``files``,
        else listed now), the visible ones opened, and the superseded ones.

        A file gone between listing and opening (a compaction committed) makes
        it list again; a partition that keeps changing is a :class:`StoreError`.
        """
        listed = [self.partition_files(partition) if files is None else files]

        def open_listed() -> _Visible:
            try:
                return (listed[0], *visible_files(self.backend, listed[0]))
            except FileNotFoundError:
                listed[0] = self.partition_files(partition)
                raise

        return retrying(
            open_listed,
            tries=_OPEN_TRIES,
            on=(FileNotFoundError,),
            gave_up=f"partition {partition} kept changing while it was read; try again",
        )

    def _compacted_as_listed(self, partition: Partition, listed: list[StoredFile]) -> bool:
        """Whether the partition's compacted file is still the one ``listed`` (or still absent).

        A listing taken before the compaction lock may predate a compaction by another
        process: without its compacted file, parts it absorbed and has not deleted yet (it
        died) would be compacted again into a file that replaces it. Parts listed and gone
        since are found when opened; parts added since are not absorbed, so stay visible."""
        covered = compacted_file(listed)
        try:
            now = self.backend.file_info(partition.compacted_path)
        except FileNotFoundError:
            return covered is None
        return covered is not None and (now.size, now.version) == (covered.size, covered.version)

    def _compact_type(self, partition: Partition, min_parts: int, listed: list[StoredFile] | None) -> bool:
        if listed is not None and not self._compacted_as_listed(partition, listed):
            listed = None
        files, opened, dead = self.open_visible(partition, listed)
        live_parts = [f for f, _ in opened if f.part is not None]
        if len(live_parts) < max(min_parts, 1):
            for f in dead:  # leftovers of a compaction that died after its commit
                self.backend.delete(f.path)
            return bool(dead)
        # Merged as read (every file is sorted): one row group of each file in
        # memory, not the partition (docs/performance.md).
        merged = merge_sorted(
            partition.type,
            [row_groups(handle) for _, handle in opened],
            functools.partial(self.write_options.group_rows, partition.type),
        )
        superseded = [f.part for f in files if f.part is not None]
        # On an object store the commit is conditional on the compacted file
        # being the version we read (or still absent): a compactor that lost
        # its lease can never overwrite a newer compacted file.
        old = [handle for f, handle in opened if f.part is None]
        version = handle_version(old[0]) if old else None
        condition: dict[str, object] = {"if_match": version} if version else {} if old else {"create": True}
        _crash_point("compact-before-commit")
        try:
            write_partition_file(
                self.backend,
                partition,
                merged,
                self.write_options,
                part=None,
                superseded=superseded,
                condition=condition,
            )
        except ConflictError:
            log.warning("compaction of %s lost to a concurrent compaction; nothing deleted", partition)
            return False
        _crash_point("compact-after-commit")
        for f in files:
            if f.part is not None:
                self.backend.delete(f.path)
                _crash_point("compact-during-delete")
        return True
