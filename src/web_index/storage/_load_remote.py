"""A bulk load's commit onto an object store: each partition's file created (or, if another
writer's is there by then, added as a part file of it), its capture index written from the rows
and bytes in hand.

On a local disk the load's workers spool each file with its index and month rows, and the
commit names them (``_load``); an object store has no rename, so a file is sent where it will
stay, on the condition that nothing is there yet, and its month index rows gathered as it
is sent.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from web_index.errors import ConflictError
from web_index.storage._files import WriteOptions, write_partition_file
from web_index.storage._layout import Partition
from web_index.storage._load_work import Streamed
from web_index.storage.backends import Backend, FileInfo
from web_index.storage.indexes import MonthRowsSpool, file_rows, index_on_write

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["write_remote"]


def write_remote(
    backend: Backend,
    options: WriteOptions,
    tables: Iterator[tuple[Partition, tuple[pa.Table | Iterable[pa.Table], bool]]],
    had_files: Callable[[Partition], bool],
    original: Callable[[Partition], pa.Table | Streamed],
    gathered: MonthRowsSpool | None,
) -> set[Partition]:
    """Write each partition's file; return those written as part files (to compact). The
    month index rows of each file created go to ``gathered`` (``None``: made by no one; the
    month's build reads the file's key columns back)."""
    parted: set[Partition] = set()
    for partition, (table, refers) in tables:
        if not had_files(partition):
            try:
                _create_indexed(backend, partition, table, options, gathered)
                continue
            except ConflictError:  # compacted by another meanwhile: this file is a part of it
                if refers:
                    table = original(partition)  # a part never refers
        write_partition_file(backend, partition, table, options, part=str(uuid.uuid4()))
        parted.add(partition)
    return parted


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
