"""Bulk loads: validated attempts sorted by partition on local disk, then written
a file a partition, past the insert buffer.

Chunks of attempts are *spilled*: each becomes one sorted table per record type,
written to an Arrow IPC file in the spool folder as a record batch per
partition. A *commit* then visits every partition spilled so far once, takes
its batches from every chunk (one batch needs no sort; several are merged) and
writes its file, so a partition that many chunks touched is still written once.

On a local store the commit writes every file unsynced into the spool folder,
syncs the filesystem once (four fsyncs a partition were most of a flush's
time), then names each under its partition's compaction lock: the compacted
file when the partition has none (a file written without a superseded list is
exactly a compacted file that absorbed nothing, so it needs no compaction),
else a part file for :meth:`Store.compact` to merge. The capture index of each
new compacted file is made from the table in hand (not read back) and synced
the same way. On an object store each file is created as the compacted file
only if none exists (a conditional PUT, so no lock: a compactor racing it
loses cleanly), else written as a part.

Nothing of a load is visible before its commit; a load that dies before it
leaves only spool files, removed as any dead writer's are (``remove_orphans``).
A commit is not a transaction: a crash while it names files leaves some of its
partitions stored and others not, each partition whole.
"""

from __future__ import annotations

import itertools
import operator
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from web_index.errors import ConflictError
from web_index.models import (
    GET_COLUMNS,
    HEAD_COLUMNS,
    METADATA_COLUMNS,
    AttemptRows,
    RecordType,
    payload_digests,
)
from web_index.storage._files import (
    WriteOptions,
    columns_to_table,
    partition_file_args,
    sort_dedupe,
    write_partition_file,
)
from web_index.storage._layout import TMP_DIR, Partition, StoredFile
from web_index.storage._listing import Listing
from web_index.storage._locks import Locks
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, SORT_KEYS
from web_index.storage.backends import Backend, LocalBackend, new_spool
from web_index.storage.buffer import MethodPartition
from web_index.storage.indexes import capture_index_bytes, table_lines
from web_index.storage.payloads import find_holders, share_payloads, wanted_payloads

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Spill"]

_COLUMNS = {
    RecordType.GET: GET_COLUMNS,
    RecordType.HEAD: HEAD_COLUMNS,
    RecordType.GET_METADATA: METADATA_COLUMNS,
    RecordType.HEAD_METADATA: METADATA_COLUMNS,
}


class Spill:
    """The chunks of a bulk load not yet committed, in the store's spool folder."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._folder = backend.local_folder(TMP_DIR)
        self._files: list[tuple[Path, pa.ipc.RecordBatchFileReader | None]] = []
        self._where: dict[Partition, list[tuple[int, int]]] = {}  # (file, batch) of each chunk
        self.attempts = 0
        self.bytes = 0  # in the spill files so far

    def add(self, attempts: Sequence[AttemptRows]) -> None:
        """Spill one chunk: a file per record type, a record batch per partition."""
        import pyarrow as pa

        start = len(self._files)
        try:
            for _, tables in itertools.groupby(_partition_tables(attempts), key=lambda pt: pt[0].type):
                path = new_spool(self._folder)
                self._files.append((path, None))
                with pa.OSFile(str(path), "wb") as sink:
                    writer = None
                    for n, (partition, table) in enumerate(tables):
                        if writer is None:
                            options = pa.ipc.IpcWriteOptions(compression=None)
                            writer = pa.ipc.new_file(sink, table.schema, options=options)
                        writer.write_batch(table.combine_chunks().to_batches()[0])
                        self._where.setdefault(partition, []).append((len(self._files) - 1, n))
                    if writer is not None:
                        writer.close()
                self._files[-1] = (path, pa.ipc.open_file(pa.memory_map(str(path))))
                self.bytes += path.stat().st_size
        except BaseException:
            # This chunk is dropped whole; the chunks before it stay spilled.
            for path, _ in self._files[start:]:
                path.unlink(missing_ok=True)
            del self._files[start:]
            for partition in list(self._where):
                kept = [(f, b) for f, b in self._where[partition] if f < start]
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

    def commit(
        self, locks: Locks, options: WriteOptions, listing: Listing, *, durable: bool
    ) -> tuple[set[MethodPartition], set[MethodPartition]]:
        """Write every spilled partition's file and empty the spill; return the
        partitions written and those of them that got a part file (to compact):
        those that had files before the commit (``listing`` lists them), so that
        their compaction tidies what was there too."""
        had_files = _had_files(listing)
        try:
            tables = ((p, self._table(p)) for p in sorted(self._where, key=_commit_order))
            months = listing.months(RecordType.GET) if options.share_payloads else []
            shared = _shared(self._backend, tables, had_files, months, options.share_payloads)
            if isinstance(self._backend, LocalBackend):
                parted = _write_local(
                    self._backend, locks, options, shared, had_files, self._table, durable=durable
                )
            else:
                parted = _write_remote(self._backend, options, shared, had_files, self._table)
            return {_method_partition(p) for p in self._where}, parted
        finally:
            self.discard()

    def _table(self, partition: Partition) -> pa.Table:
        import pyarrow as pa

        batches = []
        for f, b in self._where[partition]:
            reader = self._files[f][1]
            assert reader is not None  # set once its file is written
            batches.append(reader.get_batch(b))
        table = pa.Table.from_batches(batches)
        return table if len(batches) == 1 else sort_dedupe(partition.type, table)


def _shared(
    backend: Backend,
    tables: Iterator[tuple[Partition, pa.Table]],
    had_files: Callable[[Partition], bool],
    months: Sequence[tuple[int, int]],
    share: bool,
) -> Iterator[tuple[Partition, pa.Table, bool]]:
    """Each table, and whether its payloads stored elsewhere became references
    (storage/payloads/_sharing.py): only a ``get`` table to be the compacted file of a
    partition without files. Parts never refer: a compaction may make their
    rows references, which would leave a reference to one of them without its body."""
    import pyarrow as pa

    for partition, table in tables:
        if not share or partition.type is not RecordType.GET or had_files(partition):
            yield partition, table, False
            continue
        wanted = wanted_payloads([table])
        holders = find_holders(backend, partition, months, wanted)
        yield partition, pa.concat_tables(share_payloads([table], holders, wanted)), True


def _had_files(listing: Listing) -> Callable[[Partition], bool]:
    listed: dict[tuple[RecordType, int, int], set[str]] = {}

    def had_files(p: Partition) -> bool:
        # One listing a month, taken before the commit names anything in it.
        month = (p.type, p.year, p.month)
        if month not in listed:
            listed[month] = {d for d, files in listing.month_files(*month).items() if files}
        return p.domain in listed[month]

    return had_files


def _commit_order(p: Partition) -> tuple[MethodPartition, bool]:
    return _method_partition(p), p.type.is_metadata  # a page's data before its metadata, as a flush


def _method_partition(p: Partition) -> MethodPartition:
    return MethodPartition(p.type.method, p.year, p.month, p.domain)


def _write_local(
    backend: LocalBackend,
    locks: Locks,
    options: WriteOptions,
    tables: Iterator[tuple[Partition, pa.Table, bool]],
    had_files: Callable[[Partition], bool],
    original: Callable[[Partition], pa.Table],
    *,
    durable: bool,
) -> set[MethodPartition]:
    import pyarrow as pa

    from web_index.storage.pages import CheckedFile

    spooled: list[tuple[Partition, Path, list[bytes] | None]] = []
    parted: set[MethodPartition] = set()
    indexes: list[tuple[Path, str]] = []
    shared: set[Partition] = set()
    try:
        for partition, table, refers in tables:
            data, write_options = partition_file_args(partition, table, options)
            spool = backend.spool_parquet(data, **write_options)
            spooled.append((partition, spool, None))
            if refers:
                shared.add(partition)
            if not partition.type.is_metadata:
                # The lines carry the bodies' places: learnt from the file as written.
                with pa.memory_map(str(spool)) as source:
                    written = CheckedFile(source, path=partition.compacted_path)
                    made = table_lines(partition.type, table, written, backend, partition.compacted_path)
                    spooled[-1] = (partition, spool, made)
        if durable:
            backend.sync_all()  # every spooled file's bytes, before any is named
        for mp, group in itertools.groupby(spooled, key=lambda s: _method_partition(s[0])):
            with locks.hold("compact", str(mp)):
                # Held: no compaction commits this partition meanwhile, so its
                # compacted file cannot appear between the check and the rename.
                for partition, spool, lines in group:
                    path = partition.compacted_path
                    if had_files(partition) or backend.has_file(path):
                        if partition in shared:  # compacted meanwhile: a part, which never refers
                            whole = original(partition)
                            data, write_options = partition_file_args(partition, whole, options)
                            spool.unlink()
                            spool = backend.spool_parquet(data, **write_options)
                            if durable:
                                backend.sync_all()
                        backend.place(spool, partition.part_path(str(uuid.uuid4())))
                        parted.add(mp)
                        continue
                    backend.place(spool, path)
                    if lines is not None:
                        covered = _stored(backend, partition, path)
                        where, body = capture_index_bytes(partition, covered, frozenset(), lines)
                        indexes.append((backend.spool_bytes(body), where))
        if durable:
            backend.sync_all()  # the names above, and the capture indexes' bytes
        for spool, where in indexes:
            backend.place(spool, where)
        if durable:
            backend.sync_folders(where for _, where in indexes)
        return parted
    finally:
        for _, spool, _ in spooled:
            spool.unlink(missing_ok=True)  # a file not placed (the commit failed): never visible
        for spool, _ in indexes:
            spool.unlink(missing_ok=True)


def _stored(backend: LocalBackend, partition: Partition, path: str) -> StoredFile:
    info = backend.file_info(path)
    return StoredFile(partition, None, path, info.size, info.version)


def _write_remote(
    backend: Backend,
    options: WriteOptions,
    tables: Iterator[tuple[Partition, pa.Table, bool]],
    had_files: Callable[[Partition], bool],
    original: Callable[[Partition], pa.Table],
) -> set[MethodPartition]:
    parted: set[MethodPartition] = set()
    for partition, table, refers in tables:
        if not had_files(partition):
            try:
                create: dict[str, object] = {"create": True}
                write_partition_file(backend, partition, table, options, part=None, condition=create)
                continue
            except ConflictError:  # compacted by another meanwhile: this file is a part of it
                if refers:
                    table = original(partition)  # a part never refers
        write_partition_file(backend, partition, table, options, part=str(uuid.uuid4()))
        parted.add(_method_partition(partition))
    return parted


def _partition_tables(attempts: Sequence[AttemptRows]) -> Iterator[tuple[Partition, pa.Table]]:
    """One table per partition, each sorted by the type's sort key with each
    record once (the last given wins, as in a flush): slices of one table a type."""
    by_type: dict[RecordType, dict[tuple[Any, ...], tuple[tuple[str, int, int], tuple[Any, ...]]]] = {}
    for a in attempts:
        where = (a.domain, a.year, a.month)
        by_type.setdefault(a.method.metadata, {})[(where, a.request_id)] = (where, a.metadata)
        if a.responses:
            data = by_type.setdefault(a.method, {})
            for r in a.responses:
                data[(where, a.request_id, r[4])] = (where, r)  # 4: chain_index
    for type in sorted(by_type, key=lambda t: t.value):
        names = _COLUMNS[type]
        sort_key = _row_key(names, SORT_KEYS[type])
        rows = sorted(by_type[type].values(), key=lambda wr: (wr[0], sort_key(wr[1])))
        values = zip(*(r for _, r in rows), strict=True)
        columns: dict[str, Sequence[Any]] = dict(zip(names, values, strict=True))
        if BODY_COLUMN in columns:
            pairs = [payload_digests(body or b"") for body in columns[BODY_COLUMN]]
            columns[DIGEST_COLUMNS[0]] = [p[0] for p in pairs]
            columns[DIGEST_COLUMNS[1]] = [p[1] for p in pairs]
        table = columns_to_table(type, columns)
        start = 0
        for (domain, year, month), group in itertools.groupby(w for w, _ in rows):
            n = sum(1 for _ in group)
            yield Partition(type, year, month, domain), table.slice(start, n)
            start += n


def _row_key(names: Sequence[str], keys: Sequence[str]) -> Callable[[tuple[Any, ...]], Any]:
    return operator.itemgetter(*(names.index(k) for k in keys))
