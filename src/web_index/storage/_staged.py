"""A load staged by many processes, then named by one: the commit of an import spread
over a Dask cluster (``archive``'s ``_import_cluster``).

Each worker writes, for each WARC file it imports, one file a partition under a staging
folder of the store (``Spill.stage``), where no reader looks. A partition that several
files touched is merged, on a worker too, into one staged file (:func:`merge_staged`:
sorted, each record once, as compaction merges). Then one process gives each
partition's one file its name as a part file of the partition (:func:`name_staged`): one
rename, or one copy inside an object store, a partition, so a load that dies leaves each
partition with every record the load gave it or none. Compaction makes them compacted
files with their indexes, on the cluster as well.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterable, Sequence

from web_index.storage._files import WriteOptions, partition_file_args, row_groups
from web_index.storage._layout import Partition
from web_index.storage._load import commit_order, method_partition
from web_index.storage._merge import merge_sorted
from web_index.storage.backends import Backend
from web_index.storage.buffer import MethodPartition

__all__ = ["merge_staged", "name_staged"]


def merge_staged(
    backend: Backend, options: WriteOptions, partition: Partition, paths: Sequence[str], to: str
) -> None:
    """The staged files ``paths`` of ``partition`` (each sorted) written as one, at ``to``:
    merged as read, a row group of each held at a time; then ``paths`` removed. Run again
    after that (a task repeated), it finds ``to`` written and its inputs gone: done."""
    try:
        opened = [backend.open_parquet(path) for path in paths]
    except FileNotFoundError:
        backend.file_info(to, fresh=True)  # gone because merged: else this raises
        return
    merged = merge_sorted(
        partition.type, [row_groups(h) for h in opened], functools.partial(options.group_rows, partition.type)
    )
    data, write_options = partition_file_args(partition, merged, options)
    backend.write_parquet(to, data, **write_options)
    for path in paths:  # here, on the workers: an object store's deletes are a request each
        backend.delete(path)


def name_staged(backend: Backend, staged: Iterable[tuple[Partition, str]]) -> set[MethodPartition]:
    """Name each staged file a part file of its partition, in a commit's order (a page's data
    before its metadata, as a flush); return the partitions named."""
    named = set()
    for partition, path in sorted(staged, key=lambda item: commit_order(item[0])):
        backend.move(path, partition.part_path(str(uuid.uuid4())))
        named.add(method_partition(partition))
    return named
