"""A load staged by many processes, then committed: an import spread over a Dask cluster
(``archive``'s ``_import_cluster``).

Each worker stages, for each WARC file it imports, its partitions' rows under a staging
folder of the store (``Spill.stage``), where no reader looks: on an object store one pack a
record type, a partition's rows a store file at a byte range of it (``_staging``); on a
folder one file a partition. Then each partition's staged rows become visible whole, a
partition at a time, so a load that dies leaves each partition with every record the load
gave it or none:

* on an object store, a partition that had no files is written by a worker as its compacted
  file where it stays (:func:`create_staged`: its pieces merged as read, its payloads
  shared, one conditional create, its capture index from the bytes sent), as a bulk load's
  commit there does (``_load_remote``): nothing is copied, and nothing is compacted after; a
  task writes many neighbouring partitions, reading each staged file once for them all;
* any other partition's pieces are merged into one file on a worker (:func:`merge_staged`:
  sorted, each record once, as compaction merges), which one process names a part file of
  the partition (:func:`name_staged`: a rename, or one copy inside an object store), for
  compaction to fold into what the partition held. A file staged on a folder that is a
  partition's only one is named as it is.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from web_index.models import RecordType
from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, partition_file_args, read_table, row_groups
from web_index.storage._layout import Partition
from web_index.storage._load import commit_order, method_partition
from web_index.storage._load_remote import write_remote
from web_index.storage._load_work import GATHER_MAX, shared_table
from web_index.storage._merge import merge_sorted
from web_index.storage._staging import Piece, StagedPieces
from web_index.storage._tables import sort_dedupe
from web_index.storage.backends import Backend
from web_index.storage.buffer import MethodPartition
from web_index.storage.payloads import part_digests

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["create_staged", "merge_staged", "name_staged"]


class _StagedRows:
    """A partition's staged pieces (each a sorted store file) merged as read, a row group of
    each held at a time, each record once; iterable again, and their payload digests read
    alone; or, when small, read whole (:meth:`whole`)."""

    def __init__(
        self, staged: StagedPieces, partition: Partition, pieces: Sequence[Piece], options: WriteOptions
    ):
        self._type = partition.type
        self._handles = [staged.open(piece) for piece in pieces]  # FileNotFoundError if gone
        self._group_rows = functools.partial(options.group_rows, partition.type)

    def __iter__(self) -> Iterator[pa.Table]:
        return merge_sorted(self._type, [row_groups(h) for h in self._handles], self._group_rows)

    def whole(self) -> pa.Table | None:
        """The rows as one table, if they take at most ``GATHER_MAX`` bytes (most partitions):
        sent from memory, where a stream is spooled to a local file first."""
        held = sum(
            h.metadata.row_group(g).total_byte_size for h in self._handles for g in range(h.num_row_groups)
        )
        if held > GATHER_MAX:
            return None
        import pyarrow as pa

        tables = [read_table(self._type, h) for h in self._handles]
        return tables[0] if len(tables) == 1 else sort_dedupe(self._type, pa.concat_tables(tables))

    def digests(self) -> Iterator[pa.Table]:
        return part_digests(self._handles)


def merge_staged(
    backend: Backend, options: WriteOptions, partition: Partition, pieces: Sequence[Piece], to: str
) -> None:
    """The staged ``pieces`` of ``partition`` written as one file, at ``to``; then the files
    of their own removed (a pack goes with the staging folder). Run again after that
    (a task repeated), it finds ``to`` written and its inputs gone: done."""
    try:
        rows = _StagedRows(StagedPieces(backend, pieces, GATHER_MAX), partition, pieces, options)
    except FileNotFoundError:
        backend.file_info(to, fresh=True)  # gone because merged: else this raises
        return
    data, write_options = partition_file_args(partition, iter(rows), options)
    backend.write_parquet(to, data, **write_options)
    _remove_own(backend, pieces)


def create_staged(
    backend: Backend,
    options: WriteOptions,
    items: Sequence[tuple[Partition, Sequence[Piece]]],
    months: Sequence[tuple[int, int]],
) -> list[bool]:
    """On an object store, each partition's staged pieces (a partition that had no files)
    written as its compacted file (payloads shared with the domain's ``months``, capture
    index from the bytes sent), or as a part file if another writer created that file
    meanwhile; each staged file's bytes for all of them read in one request. Return, for
    each, whether a part file may have been written (to compact).

    Run again (a task repeated), a partition whose pieces are still there gets a part file
    of the same records (the compaction after merges it into what the first run wrote); one
    whose files of its own the first run removed is found written and says "may": that run's
    answer is not known, and compacting a partition that has no part file changes nothing."""
    staged = StagedPieces(backend, [piece for _, pieces in items for piece in pieces], GATHER_MAX)
    return [_create(backend, options, staged, partition, pieces, months) for partition, pieces in items]


def _create(
    backend: Backend,
    options: WriteOptions,
    staged: StagedPieces,
    partition: Partition,
    pieces: Sequence[Piece],
    months: Sequence[tuple[int, int]],
) -> bool:
    try:
        rows = _StagedRows(staged, partition, pieces, options)
    except FileNotFoundError:
        backend.file_info(partition.compacted_path, fresh=True)  # written by the first run: else this raises
        return True
    share = options.share_payloads and partition.type is RecordType.GET
    whole = rows.whole()
    data: pa.Table | _StagedRows = rows if whole is None else whole
    table = shared_table(backend, partition, data, share, months)
    parted, _ = write_remote(backend, options, [partition], lambda _: table, lambda _: False, lambda _: data)
    crash_point("staged-created")  # its inputs still there: a task run again writes a part file
    _remove_own(backend, pieces)
    return bool(parted)


def _remove_own(backend: Backend, pieces: Sequence[Piece]) -> None:
    """The staged files that were the partition's alone (on the workers: an object store's
    deletes are a request each)."""
    for piece in pieces:
        if piece.whole:
            backend.delete(piece.path)


def name_staged(backend: Backend, staged: Iterable[tuple[Partition, Piece]]) -> set[MethodPartition]:
    """Name each staged file of its own a part file of its partition, in a commit's order (a
    page's data before its metadata, as a flush); return the partitions named."""
    named = set()
    for partition, piece in sorted(staged, key=lambda item: commit_order(item[0])):
        if not piece.whole:
            raise ValueError(f"{piece.path}: a piece of a pack cannot be named a partition's")
        backend.move(piece.path, partition.part_path(str(uuid.uuid4())))
        named.add(method_partition(partition))
    return named
