"""Bulk loads: validated attempts sorted by partition on local disk, then written
a file a partition, past the insert buffer.

Chunks of attempts are *spilled*: each becomes one sorted table per record type,
written to an Arrow IPC file in the spool folder as a run of record batches per
partition (one batch, but for a partition of more than ``BATCH_BYTES``). A *commit*
then visits every partition spilled so far once, takes its runs from every chunk
(one run needs no sort; several are merged: past ``GATHER_MAX`` bytes as they are
read, never held whole, see ``_load_work``) and writes its file, so a partition
that many chunks touched is still written once.

On a local store the commit writes every file unsynced into the spool folder,
syncs the filesystem once (four fsyncs a partition were most of a flush's
time), then names each under its partition's compaction lock: the compacted
file when the partition has none (a file written without a superseded list is
exactly a compacted file that absorbed nothing, so it needs no compaction),
else a part file for :meth:`Store.compact` to merge. The capture index of each
new compacted file is made from the table in hand (not read back) and synced
the same way. Its month index rows are made from the table too, and gathered in
one spool file (never synced: lost, the build reads the files) for the months'
builds after the commit (``indexes/_month_rows.py``). On an object
store each file is created as the compacted file only if none exists (a
conditional PUT, so no lock: a compactor racing it loses cleanly), else
written as a part; its capture index and month index rows are made as it is
sent (``_load_remote``).

With ``jobs`` > 1 the per-partition work before naming (the table, payload
sharing, the file, its capture index) is done by worker processes
(``_load_work``); this process still names every file, in the same order.

Nothing of a load is visible before its commit; a load that dies before it
leaves only spool files, removed as any dead writer's are (``remove_orphans``).
A commit is not a transaction: a crash while it names files leaves some of its
partitions stored and others not, each partition whole.
"""

from __future__ import annotations

import functools
import itertools
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from web_index.models import AttemptRows, RecordType
from web_index.storage._chunks import Chunks, partition_tables
from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, partition_file_args
from web_index.storage._layout import TMP_DIR, Partition, compacted_stored
from web_index.storage._listing import Listing, had_files_of, sharing_months
from web_index.storage._load_remote import write_remote
from web_index.storage._load_work import (
    BATCH_BYTES,
    GATHER_MAX,
    Merged,
    Pool,
    Run,
    Spooled,
    Task,
    partition_rows,
    shared_table,
    spool_partition,
)
from web_index.storage._locks import Locks
from web_index.storage._staging import Piece, stage_files, stage_packed
from web_index.storage.backends import Backend, LocalBackend, new_spool
from web_index.storage.buffer import MethodPartition
from web_index.storage.indexes import (
    MonthRows,
    MonthRowsSpool,
    build_capture_index,
    holders_moved,
    mark_checking,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Chunks", "Spill", "commit_order", "method_partition"]


class Spill:
    """The chunks of a bulk load not yet committed, in the store's spool folder."""

    def __init__(self, backend: Backend, jobs: int = 1) -> None:
        self._backend = backend
        # Commits of a local store spool their partitions in worker processes (``_load_work``).
        self._pool = Pool(jobs) if jobs > 1 and isinstance(backend, LocalBackend) else None
        if self._pool is not None:
            self._pool.start()
        self._folder = backend.local_folder(TMP_DIR)
        self._files: list[tuple[Path, pa.ipc.RecordBatchFileReader | None]] = []
        self._where: dict[Partition, list[tuple[int, Run]]] = {}  # each chunk's run, and its file
        self.attempts = 0
        self.bytes = 0  # in the spill files so far
        self._month_rows: MonthRows | None = None  # of the files the last commit wrote

    def add(self, attempts: Sequence[AttemptRows], payload_of: Mapping[str, str] | None = None) -> None:
        """Spill one chunk: a file per record type, a record batch per partition.
        ``payload_of``: request id -> that of the response whose body the attempt's
        response takes (``payloads/_pending.py``)."""
        import pyarrow as pa

        start = len(self._files)
        try:
            tables_of = partition_tables(attempts, payload_of or {})
            for _, tables in itertools.groupby(tables_of, key=lambda pt: pt[0].type):
                path = new_spool(self._folder)
                self._files.append((path, None))
                with pa.OSFile(str(path), "wb") as sink:
                    writer = None
                    written = 0
                    for partition, table, nbytes in tables:
                        if writer is None:
                            options = pa.ipc.IpcWriteOptions(compression=None)
                            writer = pa.ipc.new_file(sink, table.schema, options=options)
                        rows = max(1, table.num_rows * BATCH_BYTES // max(nbytes, 1))
                        batches = table.combine_chunks().to_batches(max_chunksize=rows)
                        for batch in batches:
                            writer.write_batch(batch)
                        run = Run(str(path), written, len(batches), nbytes)
                        self._where.setdefault(partition, []).append((len(self._files) - 1, run))
                        written += len(batches)
                    if writer is not None:
                        writer.close()
                # Read, not mapped: a batch read is this process's memory until dropped, where
                # mapped pages once touched stay in its RSS till the file is closed.
                self._files[-1] = (path, pa.ipc.open_file(pa.OSFile(str(path), "rb")))
                self.bytes += path.stat().st_size
        except BaseException:
            # This chunk is dropped whole; the chunks before it stay spilled.
            for path, _ in self._files[start:]:
                path.unlink(missing_ok=True)
            del self._files[start:]
            for partition in list(self._where):
                kept = [(f, run) for f, run in self._where[partition] if f < start]
                if kept:
                    self._where[partition] = kept
                else:
                    del self._where[partition]
            self.bytes = sum(path.stat().st_size for path, _ in self._files)
            raise
        self.attempts += len(attempts)

    def discard(self) -> None:
        """Remove every spilled chunk."""
        for path, _ in self._files:
            path.unlink(missing_ok=True)
        self._files, self._where, self.attempts, self.bytes = [], {}, 0, 0

    def hand_over(self) -> Chunks:
        """The chunks spilled so far, for another process's spill to :meth:`absorb` (a
        worker's reading of one file of an import); this spill forgets them, and must
        not outlive their absorbing."""
        crash_point("load-hand-over")  # its chunks left by a dead process, for remove_orphans
        chunks = Chunks(
            tuple(str(path) for path, _ in self._files),
            tuple((p, f, run) for p, runs in self._where.items() for f, run in runs),
            self.attempts,
            self.bytes,
        )
        self._files, self._where, self.attempts, self.bytes = [], {}, 0, 0
        return chunks

    def absorb(self, chunks: Chunks) -> None:
        """Take another spill's chunks (:meth:`hand_over`) as if spilled here, after this
        one's: their files renamed as this process's (see ``remove_dead_spools``)."""
        start, paths = len(self._files), {}
        try:
            for name in chunks.files:
                path = new_spool(self._folder)
                Path(name).rename(path)
                paths[name] = str(path)
                self._files.append((path, None))
        except BaseException:
            for path, _ in self._files[start:]:
                path.unlink(missing_ok=True)
            del self._files[start:]
            raise
        for partition, f, run in chunks.runs:
            self._where.setdefault(partition, []).append((start + f, run._replace(path=paths[run.path])))
        self.attempts += chunks.attempts
        self.bytes += chunks.bytes

    @property
    def free_bytes(self) -> int:
        """The free space of the disk the spill is on (where it waits for its commit)."""
        return shutil.disk_usage(self._folder).free

    @property
    def month_rows(self) -> MonthRows | None:
        """The month index rows of the files the last commit wrote, made as it wrote them
        (``indexes/_month_rows.py``), for :meth:`Store.compact` to build their months'
        indexes from (till the next commit, :meth:`drop_month_rows` or :meth:`close`)."""
        return self._month_rows

    def drop_month_rows(self) -> None:
        if self._month_rows is not None:
            self._month_rows.remove()
            self._month_rows = None

    @property
    def pool(self) -> Pool | None:
        """The worker processes of the load, if it has any."""
        return self._pool

    def close(self) -> None:
        """Remove every spilled chunk and stop the worker processes."""
        self.discard()
        self.drop_month_rows()
        if self._pool is not None:
            self._pool.close()

    def commit(
        self, locks: Locks, options: WriteOptions, listing: Listing, *, durable: bool
    ) -> tuple[set[MethodPartition], set[MethodPartition]]:
        """Write every spilled partition's file and empty the spill; return the
        partitions written and those of them that got a part file (to compact):
        those that had files before the commit (``listing`` lists them), so that
        their compaction tidies what was there too."""
        had_files = had_files_of(listing)
        self.drop_month_rows()
        try:
            order = sorted(self._where, key=commit_order)
            share = options.share_payloads
            months = sharing_months(listing, options)

            def sharing(p: Partition) -> bool:
                return share and p.type is RecordType.GET and not had_files(p)

            if isinstance(self._backend, LocalBackend):
                original = functools.partial(self._rows, options=options)  # read again, if need be
                spooled = self._spooled(self._backend, options, order, sharing, months)
                parted, self._month_rows = _write_local(
                    self._backend, locks, options, spooled, had_files, original, durable=durable
                )
            else:  # in the commit's threads: readers of their own
                own = functools.partial(self._rows, options=options, own=True)

                def table_of(p: Partition) -> tuple[pa.Table | Iterable[pa.Table], bool]:
                    return shared_table(self._backend, p, own(p), sharing(p), months)

                remote, self._month_rows = write_remote(
                    self._backend, options, order, table_of, had_files, own, gather=True
                )
                parted = {method_partition(p) for p in remote}
            return {method_partition(p) for p in self._where}, parted
        finally:
            self.discard()

    def stage(
        self, folder: str, options: WriteOptions, *, packed: bool = False
    ) -> list[tuple[Partition, Piece]]:
        """Write every spilled partition's rows under the store's ``folder``, named nowhere a
        reader looks, and empty the spill; return each partition and its :class:`Piece`: a
        file of its own, or with ``packed`` a byte range of a pack a record type
        (``_staging``). What a cluster's import does on each worker, for one process to
        commit them all (``_staged``)."""
        try:
            # Packed, a record type's partitions one after the other: its pack is written once.
            order = sorted(
                self._where, key=lambda p: (p.type.value, commit_order(p)) if packed else commit_order(p)
            )
            parts = ((p, self._rows(p, options)) for p in order)
            return (stage_packed if packed else stage_files)(self._backend, folder, parts, options)
        finally:
            self.discard()

    def _spooled(
        self,
        backend: LocalBackend,
        options: WriteOptions,
        order: list[Partition],
        sharing: Callable[[Partition], bool],
        months: tuple[tuple[int, int], ...],
    ) -> Iterator[Spooled]:
        """Each partition's file spooled, in ``order``: here, or by the pool's workers."""
        if self._pool is None or len(order) < 2:
            for p in order:  # its rows handed over, not held here (spool_partition)
                yield spool_partition(
                    backend, options, p, self._rows(p, options), share=sharing(p), months=months
                )
            return
        commit = str(uuid.uuid4())
        tasks = (
            Task(p, tuple(run for _, run in self._where[p]), sharing(p), months, commit, GATHER_MAX)
            for p in order
        )
        yield from self._pool.map(str(backend.root), options, tasks)

    def _rows(self, partition: Partition, options: WriteOptions, *, own: bool = False) -> pa.Table | Merged:
        """The partition's rows: a table, or merged as read when big. ``own``: from readers of
        its own, not those the spill keeps (a thread of a commit onto an object store)."""
        import pyarrow as pa

        readers = {}
        for f, run in self._where[partition]:
            path, reader = self._files[f]
            if reader is None or own:  # absorbed: opened when read (the workers that commit read by path)
                reader = pa.ipc.open_file(pa.OSFile(str(path), "rb"))
                if not own:
                    self._files[f] = (path, reader)
            readers[run.path] = reader
        runs = [run for _, run in self._where[partition]]
        return partition_rows(partition, runs, readers.__getitem__, options, GATHER_MAX)


def commit_order(p: Partition) -> tuple[MethodPartition, bool]:
    return method_partition(p), p.type.is_metadata  # a page's data before its metadata, as a flush


def method_partition(p: Partition) -> MethodPartition:
    return MethodPartition(p.type.method, p.year, p.month, p.domain)


def _write_local(
    backend: LocalBackend,
    locks: Locks,
    options: WriteOptions,
    spooled: Iterator[Spooled],
    had_files: Callable[[Partition], bool],
    original: Callable[[Partition], pa.Table | Merged],
    *,
    durable: bool,
) -> tuple[set[MethodPartition], MonthRows | None]:
    written: list[Spooled] = []
    parted: set[MethodPartition] = set()
    indexes: list[tuple[Path, str, Spooled]] = []
    gathered = MonthRowsSpool(backend)
    try:
        for s in spooled:
            written.append(s._replace(month_rows=None))  # its files removed below if not named
            if s.month_rows is not None:  # gathered in one file, not held here
                gathered.add(s.partition, s.month_rows)
        if durable:
            backend.sync_all()  # every spooled file's bytes, before any is named
        crash_point("load-before-naming")
        for mp, group in itertools.groupby(list(written), key=lambda s: method_partition(s.partition)):
            with locks.hold("compact", str(mp)):
                # Held: no compaction commits this partition meanwhile, so its
                # compacted file cannot appear between the check and the rename.
                for s in group:
                    partition, spool = s.partition, s.spool
                    path = partition.compacted_path
                    if had_files(partition) or backend.has_file(path):
                        if s.refers:  # compacted meanwhile: a part, which never refers
                            data, write_options = partition_file_args(partition, original(partition), options)
                            spool = backend.spool_parquet(data, **write_options)
                            written.append(
                                Spooled(partition, spool, False, None, None)
                            )  # unlinked unless placed
                            if durable:
                                backend.sync_all()
                        backend.place(spool, partition.part_path(str(uuid.uuid4())))
                        crash_point("load-while-naming")
                        parted.add(mp)
                        continue
                    backend.place(spool, path)
                    crash_point("load-while-naming")
                    if s.captures is not None and s.captures_path is not None:
                        indexes.append((s.captures, s.captures_path, s))
        if durable:
            backend.sync_all()  # the names above, and the capture indexes' bytes
        crash_point("load-before-capture-indexes")
        # An index that places payloads in other months' files is checked once placed: marked
        # until then, so that a load killed in between has it written again (mark_checking).
        marks = [mark_checking(backend, where, s.holders or {}) for _, where, s in indexes]
        for spool, where, _ in indexes:
            backend.place(spool, where)
        if durable:
            backend.sync_folders(where for _, where, _ in indexes)
        for (_, _, s), mark in zip(indexes, marks, strict=True):
            if s.holders and holders_moved(backend, s.holders):  # see build_capture_index
                info = backend.file_info(s.partition.compacted_path)
                covered = compacted_stored(s.partition, info.size, info.version)
                build_capture_index(backend, s.partition, [covered], prune=False, have=())
            if mark is not None:
                backend.delete(mark)
        return parted, gathered.done()
    except BaseException:
        gathered.discard()
        raise
    finally:
        for s in written:
            # A file not placed (the commit failed), an index of a file named as a part: never visible.
            s.spool.unlink(missing_ok=True)
            if s.captures is not None:
                s.captures.unlink(missing_ok=True)
