"""What a worker runs for :class:`~web_index.WebIndex`: a Dask cluster's (``scheduler=``), or a
worker process of this machine answering a query file's batches (``query_file(jobs=)``).

A worker opens the store itself, from its location (an ``s3://`` URL, or a
folder every worker sees at the same path) and the buffer's location, once per
worker process: opening reads the store's marker and, for an object store,
starts a read cache that later batches reuse. These functions are pickled by
reference, so a task carries only the two strings.

It opens a :class:`~web_index.storage.Store` (``open_store``, as ``WebIndex``
does), not the handle: ``web_index.index`` imports this module, and this one
imports nothing above ``query`` and ``storage`` (no import cycle).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from web_index.models import Query
from web_index.query import (
    Plan,
    Processes,
    Result,
    Workers,
    answer_on_cluster,
    answer_to_file,
    dedicate,
    map_on_cluster,
    run_plans,
)
from web_index.storage import MethodPartition, PartitionFiles, Store, WriteOptions, gc_paused, open_store

__all__ = ["answer_file", "compactor", "shared_location", "worker_store"]


def shared_location(location: str) -> str:
    """The location as the workers must see it: a folder made absolute (a worker's
    working directory is its own), a URL as it is."""
    return location if "://" in location else str(Path(location).resolve())


def answer_file(
    location: str,
    buffer: str | None,
    workers: str | int,
    here: Callable[[list[Plan]], list[Result]],
    source: str | os.PathLike[str] | Iterable[Query],
    destination: str | os.PathLike[str],
    *,
    batch_size: int,
    on_progress: Callable[[int], None] | None,
) -> int:
    """``WebIndex.query_file(...)`` of the store at ``location`` (its buffer's DSN:
    ``buffer``) with its batches answered by ``workers``: the Dask cluster at that
    address, or that many worker processes of this machine (a window of one batch
    is answered ``here``, starting none)."""
    answer = functools.partial(_answer, shared_location(location), buffer)
    if isinstance(workers, str):
        return answer_on_cluster(
            workers, answer, source, destination, batch_size=batch_size, on_progress=on_progress
        )
    dedicated = functools.partial(answer, dedicated=workers)
    with Processes(workers) as processes:
        return answer_to_file(
            here,
            source,
            destination,
            batch_size=batch_size,
            on_progress=on_progress,
            workers=Workers(processes.run, dedicated, processes.start, local=True, jobs=workers),
        )


def compactor(
    location: str, buffer: str | None, scheduler: str, min_parts: int
) -> Callable[[list[tuple[MethodPartition, PartitionFiles | None]]], Iterator[int]]:
    """A ``run`` for ``Store.compact``: one task per partition, with its files as listed, on the
    cluster (a worker listing it again would scan a local store's month folder a partition)."""
    compact = functools.partial(_compact, shared_location(location), buffer, min_parts)
    return functools.partial(map_on_cluster, scheduler, compact)


_opened_stores: dict[tuple[object, ...], Store] = {}


def worker_store(
    location: str,
    buffer: str | None,
    *,
    read_only: bool,
    durable: bool = True,
    write_options: WriteOptions | None = None,
) -> Store:
    """The store a worker process (a cluster's, a bulk load's) opens from its location,
    once: kept open for the worker's life (create=False: a mistyped location fails the task)."""
    options = None if write_options is None else tuple(sorted(vars(write_options).items()))
    key = (location, buffer, read_only, durable, options)
    store = _opened_stores.get(key)
    if store is None:
        store = _opened_stores[key] = open_store(
            location,
            read_only=read_only,
            buffer=buffer,
            durable=durable,
            write_options=write_options,
            create=False,
        )
    return store


def _answer(location: str, buffer: str | None, plans: list[Plan], *, dedicated: int = 0) -> list[Result]:
    """As WebIndex.query answers them; ``dedicated``: in one of that many worker processes
    of this machine that answer batches and nothing else."""
    if dedicated:
        dedicate(dedicated)
    with gc_paused():
        return run_plans(worker_store(location, buffer, read_only=True), plans, bodies=True)  # type: ignore[return-value]


def _compact(
    location: str, buffer: str | None, min_parts: int, listed: tuple[MethodPartition, PartitionFiles | None]
) -> int:
    partition, files = listed
    store = worker_store(location, buffer, read_only=False)
    return store.compact_partition(partition, min_parts=min_parts, listed=files)
