"""A bulk load's commit onto an object store: each partition's file created (or, if another
writer's is there by then, added as a part file of it), its capture index written from the rows
and bytes in hand.

On a local disk the load's workers spool each file with its index and month rows, and the
commit names them (``_load``); an object store has no rename, so a file is sent where it will
stay, on the condition that nothing is there yet, and its month index rows gathered as it
is sent. Several pages' partitions are written at a time, in threads (each page's data before
its metadata, as a flush): a commit otherwise waited on each request in turn.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from web_index.errors import ConflictError
from web_index.storage._files import WriteOptions, write_partition_file
from web_index.storage._layout import Partition
from web_index.storage._load_work import Streamed
from web_index.storage.backends import Backend, FileInfo
from web_index.storage.indexes import MonthRows, MonthRowsSpool, file_rows, index_on_write

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["write_remote"]

# Pages a commit onto an object store writes at a time (its requests wait on the network): one
# a core; two a core were no faster on the 1 GiB import into SeaweedFS and held a fifth more
# memory (a partition's table and its file's bytes each).
_THREADS = min(8, os.cpu_count() or 1)


def write_remote(
    backend: Backend,
    options: WriteOptions,
    order: Sequence[Partition],
    table_of: Callable[[Partition], tuple[pa.Table | Iterable[pa.Table], bool]],
    had_files: Callable[[Partition], bool],
    original: Callable[[Partition], pa.Table | Streamed],
    *,
    threads: int = _THREADS,
    gather: bool = False,
) -> tuple[set[Partition], MonthRows | None]:
    """Write each partition's file (its rows, and whether they refer: ``table_of``), a page's
    data before its metadata, the pages of ``threads`` partitions at a time; return those
    written as part files (to compact) and, with ``gather``, the month index rows of the files
    created, in a spool file (else made by no one: the month's build reads the file's key
    columns back). A file that failed raises once those being written are done; what was
    written stays, each partition whole, as a commit cut short leaves it."""
    gathered = MonthRowsSpool(backend) if gather else None

    def write(partition: Partition) -> bool:
        table, refers = table_of(partition)
        if not had_files(partition):
            try:
                _create_indexed(backend, partition, table, options, gathered)
                return False
            except ConflictError:  # compacted by another meanwhile: this file is a part of it
                if refers:
                    table = original(partition)  # a part never refers
        write_partition_file(backend, partition, table, options, part=str(uuid.uuid4()))
        return True

    def pages(partitions: list[Partition]) -> list[Partition]:
        return [p for p in partitions if write(p)]

    # A page's partitions (its data's, then its metadata's) one after the other, as a flush.
    units = [
        list(ps)
        for _, ps in itertools.groupby(order, key=lambda p: (p.type.method, p.year, p.month, p.domain))
    ]
    parted: set[Partition] = set()
    try:
        if threads < 2 or len(units) < 2:
            for unit in units:
                parted.update(pages(unit))
        else:
            # Each file is a conditional PUT and its capture index another: one partition at a
            # time, a commit waited on the network half the time (the 1 GiB import into
            # SeaweedFS, the cores 0.53 busy); Parquet encoding and the requests release the GIL.
            pool = ThreadPoolExecutor(threads, thread_name_prefix="web-index-commit")
            try:
                for done in pool.map(pages, units):
                    parted.update(done)
            finally:
                pool.shutdown(wait=True, cancel_futures=True)
    except BaseException:
        if gathered is not None:
            gathered.discard()
        raise
    return parted, None if gathered is None else gathered.done()


def _create_indexed(
    backend: Backend,
    partition: Partition,
    table: pa.Table | Iterable[pa.Table],
    options: WriteOptions,
    gathered: MonthRowsSpool | None,
) -> None:
    """Create ``partition``'s compacted file on an object store (:class:`ConflictError` if
    one is there), then its capture index from the rows and bytes in hand: the compaction
    pass that would write it reads the file back for it, and the pages of every body its
    rows' references place (the 1 GiB import into SeaweedFS: 879 of its 1,019 MB); and its
    month index rows, which the month's build would read the file's key columns back for
    (a table's only: a partition merged as read is read back, as on a local disk)."""
    import pyarrow as pa

    table, index = index_on_write(backend, partition, table, prune=False)

    def written(data: bytes | bytearray | Path, info: FileInfo) -> None:
        index(data, info)
        if gathered is not None and isinstance(table, pa.Table) and info.version:
            rows = file_rows(None, partition.type, table, info.size, info.version)
            if rows is not None:
                gathered.add(partition, rows)

    write_partition_file(
        backend, partition, table, options, part=None, condition={"create": True, "written": written}
    )
