"""Compaction: a partition's part files merged into its one compacted file, and
the indexes of the months compacted brought up to date."""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from web_index.errors import ConflictError, CorruptFileError
from web_index.models import RecordType
from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, outdated, row_groups, write_partition_file
from web_index.storage._layout import Partition, StoredFile, compacted_file, compacted_stored
from web_index.storage._listing import Listing
from web_index.storage._locks import Locks
from web_index.storage._merge import merge_sorted
from web_index.storage.backends import LocalBackend, handle_version
from web_index.storage.buffer import Buffer, MethodPartition
from web_index.storage.indexes import (
    CaptureIndexes,
    MonthRows,
    build_capture_index,
    capture_index_path,
    ensure_capture_indexes,
    index_on_write,
    refresh_held_places,
)
from web_index.storage.payloads import find_holders, part_digests, share_payloads, wanted_payloads

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["METHODS", "Compaction", "Listings", "PartitionFiles"]

log = logging.getLogger("web_index.storage")

METHODS = (RecordType.GET, RecordType.HEAD)
_Month = tuple[RecordType, int, int]  # a month folder: type, year, month
Listings = dict[_Month, dict[str, list[StoredFile]]]  # month folders' files, by domain
PartitionFiles = dict[RecordType, list[StoredFile]]  # a method partition's files, of both its types


class Compaction(Listing):
    """What :class:`~web_index.storage._store.Store` does to compact (see ``compact``)."""

    buffer: Buffer
    write_options: WriteOptions
    capture_indexes: CaptureIndexes

    def _writable_locks(self) -> Locks:
        raise NotImplementedError  # the store's

    def remove_orphans(self) -> int:
        raise NotImplementedError  # the store's

    def _write_claim(self, mp: MethodPartition, flush_id: str) -> int:
        raise NotImplementedError  # the store's: a flush that died, finished

    def compact(
        self,
        partitions: Iterable[MethodPartition] | None = None,
        *,
        min_parts: int = 1,
        on_progress: Callable[[int, int], None] | None = None,
        run: Callable[[list[tuple[MethodPartition, PartitionFiles | None]]], Iterable[int]] | None = None,
        index_also: Iterable[MethodPartition] = (),
        apart: bool = False,
        month_rows: MonthRows | None = None,
    ) -> int:
        """Compact partitions with at least ``min_parts`` part files; return how many
        partitions (type, month, domain) changed.

        Then bring the month key index of every month touched (all months when
        ``partitions`` is ``None``) up to date, and write the capture index of
        every compacted file in them that has none.

        ``run`` compacts the partitions elsewhere (each with :meth:`compact_partition`
        of a store at the same location, e.g. on a Dask cluster), given with their files
        as listed here (``None``: not listed), yielding each one's count as it finishes;
        the month and capture indexes are still brought up to date here, once, after
        all of them. ``index_also``: partitions whose
        months are indexed too (a bulk load's, written compacted already). ``apart``: the
        month indexes of a local store built in a process of their own, whose memory ends with
        it (a bulk load's, which builds its months' at every commit). ``month_rows``: index
        rows of files a bulk load wrote, used for the files they still match.
        """
        self.remove_orphans()
        done = 0
        listed: dict[MethodPartition, PartitionFiles] = {}
        if partitions is None:
            listed = self._partitions_with_parts(every=min_parts == 0)
            targets = sorted(listed)
            months = {
                (t, y, m) for method in METHODS for t in (method, method.metadata) for y, m in self.months(t)
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
            # month folder each: quadratic in a month's domains), and on a local disk its capture
            # index left to the month's pass below, which lists each index folder once, not once a
            # partition; on an object store (a listing by prefix is one request) it is written from
            # the bytes sent, which that pass would read back.
            index_here = partitions is not None or self.backend.remote
            counts: Iterable[int] = (
                self._compact_partition(mp, min_parts, listed.get(mp), indexed=index_here) for mp in targets
            )
        else:
            counts = run([(mp, listed.get(mp)) for mp in targets])
        for n, changed in enumerate(counts, start=1):
            done += changed
            if on_progress is not None:
                on_progress(n, total)
        if run is not None:
            self.forget_listings(targets)
        # Here, not at the top: the build needs polars, which a store opened to be read never does.
        from web_index.storage.indexes import build_month_index, build_month_indexes_apart

        ordered = sorted(months)
        local = self.backend if apart and isinstance(self.backend, LocalBackend) else None
        if local is not None:
            build_month_indexes_apart(local, ordered, month_rows)
        for n, (type, year, month) in enumerate(ordered, start=len(targets) + 1):
            if local is None:
                build_month_index(self.backend, type, year, month, month_rows)
            if not type.is_metadata:
                ensure_capture_indexes(self.backend, type, year, month, self.month_files(type, year, month))
            if on_progress is not None:
                on_progress(n, total)
        return done

    def forget_listings(self, partitions: Iterable[MethodPartition]) -> None:
        """Drop the read cache's listings of these partitions' folders: other processes
        wrote them (compacted them, a cluster's import), and only this process's own writes
        invalidate its cache."""
        invalidate = getattr(self.backend, "invalidate", None)
        if callable(invalidate):
            for mp in partitions:
                for type in (mp.method, mp.method.metadata):
                    invalidate(Partition(type, mp.year, mp.month, mp.domain).compacted_path)

    def _partitions_with_parts(self, *, every: bool = False) -> dict[MethodPartition, PartitionFiles]:
        """Partitions with a part file in either type (``every``: or a compacted file an older
        version wrote, judged from its footer without a lock; compaction judges it again under
        its lock), and the files of both types, from one listing per month folder (listing each
        partition's files separately is quadratic in the domains of a month)."""
        listings: Listings = {}
        found: set[MethodPartition] = set()
        for method in METHODS:
            for type in (method, method.metadata):
                for year, month in self.months(type):
                    listing = listings[type, year, month] = self.month_files(type, year, month)
                    for domain, files in listing.items():
                        if any(f.part is not None for f in files) or (every and self._outdated(files)):
                            found.add(MethodPartition(method, year, month, domain))
        return self._month_listed(found, listings)

    def _outdated(self, files: list[StoredFile]) -> bool:
        """Whether the compacted file among ``files`` was written by an older version
        (a damaged or vanished one is left to ``verify`` and the next run)."""
        covered = compacted_file(files)
        if covered is None:
            return False
        try:
            handle = self.backend.open_parquet(covered.path)
        except (CorruptFileError, FileNotFoundError):
            return False
        return outdated(handle.metadata, covered.partition.type, self.write_options)

    def compact_partition(
        self,
        mp: MethodPartition,
        *,
        min_parts: int = 1,
        listed: PartitionFiles | None = None,
        indexed: bool | None = None,
    ) -> int:
        """Compact the partitions of ``mp`` (its type and its metadata type);
        return how many changed (0, 1 or 2).

        ``listed``: their files as a whole-store :meth:`compact` listed them (checked
        under the lock, as there). A local store's capture index is then left to that
        compaction's month pass: written here, it would cost a scan of the month's index
        folder a partition. On an object store (a prefix listing is one request) it is
        written here, by the cluster's workers in parallel. ``indexed`` says which, when
        the caller knows better (a bulk load's workers: each index written by the worker
        that wrote the file, in parallel, not all read back by one process's month pass)."""
        if indexed is None:
            indexed = listed is None or self.backend.remote
        return self._compact_partition(mp, min_parts, listed, indexed=indexed)

    def _compact_partition(
        self,
        mp: MethodPartition,
        min_parts: int,
        listed: PartitionFiles | None,
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
                index = indexed and not type.is_metadata
                changed += self._compact_type(
                    partition, min_parts, None if listed is None else listed[type], index
                )
            return changed

    def _month_listed(
        self, partitions: Iterable[MethodPartition], listings: Listings
    ) -> dict[MethodPartition, PartitionFiles]:
        """The files of both types of each partition, from one listing a month folder (see
        :meth:`_listed`)."""
        return {
            mp: {t: self._listed(t, mp, listings) for t in (mp.method, mp.method.metadata)}
            for mp in partitions
        }

    def _listed(self, type: RecordType, mp: MethodPartition, listings: Listings) -> list[StoredFile]:
        """The files of ``type`` of ``mp`` from its month's listing in ``listings``, taken now
        and added to it if not there."""
        month = (type, mp.year, mp.month)
        if month not in listings:  # a folder just written is listed anew at every call
            listings[month] = self.month_files(*month)
        return listings[month].get(mp.domain, [])

    def _compact_listed(self, listed: dict[MethodPartition, PartitionFiles]) -> None:
        """Compact these partitions from their files as ``listed``, then write the capture
        indexes of their months (one listing a month, not one a partition)."""
        months = set()
        for mp in sorted(listed):
            if self._compact_partition(mp, 1, listed[mp], indexed=False):
                months.add((mp.method, mp.year, mp.month))
        for type, year, month in sorted(months):
            ensure_capture_indexes(self.backend, type, year, month, self.month_files(type, year, month))

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

    def _refresh_held_places(self, partition: Partition) -> None:
        """After a ``get`` partition's compacted file was written again: the capture
        indexes of its domain's other months whose lines place payloads in it are
        written again (their places moved). Done before its absorbed parts are
        deleted, so that a compaction killed meanwhile leaves them, and the next
        compaction of the partition does it again."""
        month = f"{partition.year:04d}/{partition.month:02d}"
        for year, m in self.months(partition.type):
            other = Partition(partition.type, year, m, partition.domain)
            if other == partition:
                continue
            try:
                # As the store has it now: a listing this process cached may be of a file
                # compacted again since by another, whose index would not be the one written.
                info = self.backend.file_info(other.compacted_path, fresh=True)
            except FileNotFoundError:
                continue
            covered = compacted_stored(other, info.size, info.version)
            if refresh_held_places(self.backend, other, covered, month):
                self.capture_indexes.forget(capture_index_path(other, covered))

    def _compact_type(
        self, partition: Partition, min_parts: int, listed: list[StoredFile] | None, index: bool
    ) -> bool:
        """Compact one type of a partition if it has ``min_parts`` part files (or files to
        upgrade); return whether anything changed. ``index``: write the compacted file's
        capture index: on an object store from the bytes sent, which a reading back would
        fetch again (on the cluster import of 1 GiB, every body the references place)."""
        indexed: list[bool] = []  # whether the index was written from the bytes sent
        changed = self._compact_type_once(partition, min_parts, listed, indexed if index else None)
        if changed and index and not any(indexed):
            build_capture_index(self.backend, partition, self.partition_files(partition), prune=True)
        return changed

    def _compact_type_once(
        self, partition: Partition, min_parts: int, listed: list[StoredFile] | None, index: list[bool] | None
    ) -> bool:
        if listed is not None and not self._compacted_as_listed(partition, listed):
            listed = None
        files, opened, dead = self.open_visible(partition, listed, once=True)
        live_parts = [f for f, _ in opened if f.part is not None]
        old = [handle for f, handle in opened if f.part is None]
        # min_parts=0 also rewrites a compacted file alone if it was written as
        # files no longer are (an older format, big bodies without pages).
        options = self.write_options
        upgrade = min_parts == 0 and any(outdated(h.metadata, partition.type, options) for h in old)
        if len(live_parts) < max(min_parts, 1) and not upgrade:
            if dead and partition.type is RecordType.GET:
                self._refresh_held_places(partition)  # what that compaction may not have done
            for f in dead:  # leftovers of a compaction that died after its commit
                self.backend.delete(f.path)
            return bool(dead)
        # Merged as read (every file is sorted): one row group of each file in
        # memory, not the partition (docs/performance.md).
        shares = options.share_payloads and partition.type is RecordType.GET
        merged = merge_sorted(
            partition.type,
            [row_groups(handle) for _, handle in opened],
            functools.partial(self.write_options.group_rows, partition.type),
            fresh=[f.part is not None for f, _ in opened] if shares else None,
        )
        if shares:
            # Identical payloads stored once: fresh rows refer to a stored copy.
            wanted = wanted_payloads(part_digests(h for f, h in opened if f.part is not None))
            holders = find_holders(
                self.backend, partition, self.months(partition.type), wanted, old[0] if old else None
            )
            merged = share_payloads(merged, holders, wanted)
        superseded = [f.part for f in files if f.part is not None]
        # On an object store the commit is conditional on the compacted file
        # being the version we read (or still absent): a compactor that lost
        # its lease can never overwrite a newer compacted file.
        version = handle_version(old[0]) if old else None
        condition: dict[str, object] = {"if_match": version} if version else {} if old else {"create": True}
        crash_point("compact-before-commit")
        rows: pa.Table | Iterable[pa.Table] = merged
        if index is not None and self.backend.remote:
            rows, hook = index_on_write(self.backend, partition, merged, superseded, prune=True, done=index)
            condition = {**condition, "written": hook}
        try:
            write_partition_file(
                self.backend,
                partition,
                rows,
                self.write_options,
                part=None,
                superseded=superseded,
                condition=condition,
            )
        except ConflictError:
            log.warning("compaction of %s lost to a concurrent compaction; nothing deleted", partition)
            return False
        crash_point("compact-after-commit")
        if old and partition.type is RecordType.GET:
            self._refresh_held_places(partition)
        for f in files:
            if f.part is not None:
                self.backend.delete(f.path)
                crash_point("compact-during-delete")
        return True
