"""The store: files on a backend, the insert buffer, flushing (and compaction, ``_compaction``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, NamedTuple, cast

from web_index.errors import CorruptFileError, StoreError
from web_index.models import AttemptRows, RecordType
from web_index.storage._clock import SYSTEM_CLOCK, Clock
from web_index.storage._compaction import METHODS, Compaction, Listings
from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, write_partition_file
from web_index.storage._layout import LOCK_DIR, Partition, StoredFile, compacted_stored
from web_index.storage._listing import had_files_of, sharing_months
from web_index.storage._load import Spill
from web_index.storage._locks import FileLocks, KindLocks, Locks
from web_index.storage._marker import open_or_create
from web_index.storage._schema import SORT_KEYS
from web_index.storage._staged import create_staged, merge_staged, name_staged
from web_index.storage._staging import Piece, remove_dead_staging, staging_folder
from web_index.storage._tables import rows_to_table
from web_index.storage.backends import Backend
from web_index.storage.buffer import Buffer, MethodPartition, open_buffer
from web_index.storage.indexes import CaptureIndexes, StoredCapture, bodies_by_place, row_captures

if TYPE_CHECKING:
    from web_index.storage.backends import S3Backend

__all__ = ["FlushPolicy", "Store"]

log = logging.getLogger("web_index.storage")


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
    compaction locks, and a staging folder's (``_staging``), as leases in the bucket for an
    object store, else local ``flock``."""
    inner = _uncached(backend)
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
    return KindLocks({"flush": flush, "compact": compact, "stage": compact})


def _uncached(backend: Backend) -> Backend:
    """The backend under the read cache, if any: what other machines share, as it is now."""
    inner: Backend = getattr(backend, "inner", backend)
    return inner


class Store(Compaction):
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

    def captures_by_row(
        self,
        type: RecordType,
        path: str,
        size: int,
        version: str,
        rows: Iterable[int],
        *,
        if_referring: bool = False,
    ) -> dict[int, StoredCapture] | None:
        """The lines of these rows of the compacted file at ``path`` (of that size
        and version), from its capture index; ``None`` if it has none (a row its
        index cannot give is left out), or, ``if_referring``, if none of its rows
        refers to a payload another month's file holds, or no index this store
        opened so far had such rows (opening a small file's index only to learn
        that costs ~60 us: at a million queries, a second or more on a store
        without references). Their bodies: :meth:`bodies_by_place`."""
        if if_referring and not self.capture_indexes.seen_referring:
            return None
        _type, year, month, name = path.split("/")
        partition = Partition(type, int(year), int(month), name.removesuffix(".parquet"))
        index = self.capture_indexes.get(partition, compacted_stored(partition, size, version))
        if index is None or (if_referring and not index.meta.payload_months):
            return None
        try:
            return row_captures(index, rows)
        except CorruptFileError as exc:  # a damaged block of the index: read the older way
            self.capture_indexes.refuse(exc, partition)
            return None

    def bodies_by_place(self, wanted: Sequence[tuple[str, StoredCapture]]) -> list[bytes | None]:
        """The body each ``(path, line)`` of :meth:`captures_by_row` names, or ``None``
        where its place no longer holds it (the file compacted again, damaged)."""
        return bodies_by_place(self.backend, wanted)

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
        for method in METHODS:
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

    def remove_orphans(self) -> int:
        """Delete what writers that died left in the store: their spool files, and on an
        object store their staging folders (``_staging``); return how many."""
        removed = self.backend.remove_orphans()
        if self.backend.remote and self._locks is not None:  # a read-only store judges nothing
            # Listed as the bucket is now: a cached listing may hold a folder removed since.
            removed += remove_dead_staging(_uncached(self.backend), self._locks)
        return removed

    def staging(self) -> AbstractContextManager[str]:
        """A staging folder of this process's own in the store, removed whole when the
        block ends (see ``_staging.staging_folder``)."""
        return staging_folder(self.backend, self._writable_locks())

    def append(self, attempts: Sequence[AttemptRows]) -> None:
        self.buffer.append(attempts)
        crash_point("after-append")
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

    def spill(self, jobs: int = 1) -> Spill:
        """Where a bulk load sorts its chunks before :meth:`commit_spill` writes them (see ``_load``),
        with ``jobs`` processes to write them."""
        self._writable_locks()
        return Spill(self.backend, jobs)

    def stage_spill(
        self, spill: Spill, folder: str, *, packed: bool = False
    ) -> list[tuple[Partition, Piece]]:
        """Write a spill's partitions under ``folder`` of the store, for one process to commit
        what many staged (see ``_staged``); return each and its piece (``packed``: a pack a
        record type, on an object store)."""
        return spill.stage(folder, self.write_options, packed=packed)

    def merge_staged(self, partition: Partition, pieces: Sequence[Piece], to: str) -> None:
        """The staged pieces of one partition as one staged file, at ``to``."""
        merge_staged(self.backend, self.write_options, partition, pieces, to)

    def create_staged(
        self, items: Sequence[tuple[Partition, Sequence[Piece]]], months: Sequence[tuple[int, int]]
    ) -> list[bool]:
        """The staged pieces of partitions without files as their compacted files, on an
        object store; for each, whether a part file may have been written instead (``_staged``)."""
        return create_staged(self.backend, self.write_options, items, months)

    def had_files(self) -> Callable[[Partition], bool]:
        """Whether a partition has files now (each month listed once, when first asked)."""
        return had_files_of(self)

    def sharing_months(self) -> tuple[tuple[int, int], ...]:
        """The months whose ``get`` files a new compacted file's payloads may be shared with."""
        return sharing_months(self, self.write_options)

    def name_staged(self, staged: Iterable[tuple[Partition, Piece]]) -> set[MethodPartition]:
        """Name staged files part files of their partitions (visible from then on); return
        the partitions named."""
        self._writable_locks()
        return name_staged(self.backend, staged)

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
        self.remove_orphans()
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
        # The metadata folders only if a partition is to be compacted: most flushes compact none.
        listings: Listings = {}
        full = [mp for mp in flushed if crowded(self._listed(mp.method, mp, listings))]
        if full:
            self._compact_listed(self._month_listed(full, listings))

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
        crash_point("flush-before-write")
        if responses:
            self._write_part(Partition(mp.method, mp.year, mp.month, mp.domain), flush_id, responses)
        crash_point("flush-between-writes")
        metadata = [a.metadata for a in attempts]
        self._write_part(Partition(mp.method.metadata, mp.year, mp.month, mp.domain), flush_id, metadata)
        crash_point("flush-before-complete")
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
