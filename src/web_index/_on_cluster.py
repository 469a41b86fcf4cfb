"""What a Dask worker runs for :class:`~web_index.WebIndex` (``scheduler=``).

A worker opens the store itself, from its location (an ``s3://`` URL, or a
folder every worker sees at the same path) and the buffer's location, once per
worker process: opening reads the store's marker and, for an object store,
starts a read cache that later batches reuse. These functions are pickled by
reference, so a task carries only the two strings.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from web_index.index import WebIndex
from web_index.models import Query
from web_index.query import Result, answer_on_cluster, map_on_cluster
from web_index.storage import MethodPartition, PartitionFiles

__all__ = ["answer_file", "compactor"]


def _shared(location: str) -> str:
    """The location as the workers must see it: a folder made absolute (a worker's
    working directory is its own), a URL as it is."""
    return location if "://" in location else str(Path(location).resolve())


def answer_file(
    index: WebIndex,
    scheduler: str,
    source: str | os.PathLike[str] | Iterable[Query],
    destination: str | os.PathLike[str],
    *,
    batch_size: int,
    on_progress: Callable[[int], None] | None,
) -> int:
    """``index.query_file(...)`` with every batch answered on the cluster."""
    answer = functools.partial(_answer, _shared(index.location), index._buffer_location)
    return answer_on_cluster(
        scheduler, answer, source, destination, batch_size=batch_size, on_progress=on_progress
    )


def compactor(
    index: WebIndex, scheduler: str, min_parts: int
) -> Callable[[list[tuple[MethodPartition, PartitionFiles | None]]], Iterator[int]]:
    """A ``run`` for ``Store.compact``: one task per partition, with its files as listed, on the
    cluster (a worker listing it again would scan a local store's month folder a partition)."""
    compact = functools.partial(_compact, _shared(index.location), index._buffer_location, min_parts)
    return functools.partial(map_on_cluster, scheduler, compact)


@functools.lru_cache(maxsize=16)
def _opened(location: str, buffer: str | None, read_only: bool) -> WebIndex:
    # Kept open for the worker's life; create=False: a mistyped location fails the task.
    return WebIndex(location, read_only=read_only, buffer=buffer, create=False)


def _answer(location: str, buffer: str | None, queries: list[Query]) -> list[Result]:
    return _opened(location, buffer, True).query(queries)


def _compact(
    location: str, buffer: str | None, min_parts: int, listed: tuple[MethodPartition, PartitionFiles | None]
) -> int:
    partition, files = listed
    store = _opened(location, buffer, False)._store
    return store.compact_partition(partition, min_parts=min_parts, listed=files)
