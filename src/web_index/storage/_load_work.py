"""A bulk load's commit, one partition at a time: what a commit does to a
partition before it names anything (``_load``), in the committing process or in
a worker process of its pool.

A partition's work is its table (its batches from every spilled chunk, sorted
and deduplicated), its payloads shared with the compacted files of other months
(a ``get`` table to be a partition's compacted file), its file written unsynced
into the spool folder, and, for a ``get``/``head`` file, its capture index made
from the table and the file as written (the bodies' places), spooled too. A
worker reads the spill files itself (read, not mapped) and returns only paths, so
the committing process never holds more than one partition's table, and nothing
a worker writes is visible: the committing process names every file.

A capture index names the version of the file it covers (inode and mtime on a
local disk), which renaming the spooled file keeps: the index made here covers
the file once it is named as the partition's compacted file, and is dropped if
the file becomes a part instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from web_index.errors import StoreError
from web_index.models import RecordType
from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, partition_file_args, sort_dedupe
from web_index.storage._layout import Partition, compacted_stored
from web_index.storage.backends import Backend, FileInfo, LocalBackend
from web_index.storage.indexes import capture_index_bytes, table_lines
from web_index.storage.payloads import find_holders, share_payloads, wanted_payloads

if TYPE_CHECKING:
    import pyarrow as pa

_T = TypeVar("_T")
_R = TypeVar("_R")

__all__ = ["Pool", "Spooled", "Task", "gathered", "run_task", "shared_table", "spool_partition"]


class Task(NamedTuple):
    """A partition of a spill, as a worker process is given it."""

    partition: Partition
    batches: tuple[tuple[str, int], ...]  # (spill file, batch) of each chunk that holds it
    share: bool  # its payloads stored in other months become references
    months: tuple[tuple[int, int], ...]  # the months holding ``get`` files, to look them up in
    commit: str  # which commit: a worker keeps its spill files open for that commit only


class Spooled(NamedTuple):
    """A partition's file written into the spool folder, not yet named."""

    partition: Partition
    spool: Path
    refers: bool  # rows of it refer to payloads held elsewhere (it must not become a part)
    captures: Path | None  # its capture index, spooled: placed if the file is named the compacted file
    captures_path: str | None  # where that index goes
    holders: dict[str, FileInfo] | None = None  # the files whose payloads its lines place, as read


def shared_table(
    backend: Backend, partition: Partition, table: pa.Table, share: bool, months: Sequence[tuple[int, int]]
) -> tuple[pa.Table, bool]:
    """``table``, and whether its payloads stored elsewhere became references
    (storage/payloads/_sharing.py): only with ``share``, which the commit gives a
    ``get`` table to be the compacted file of a partition without files. Parts never
    refer: a compaction may make their rows references, which would leave a reference
    to one of them without its body."""
    if not share:
        return table, False
    import pyarrow as pa

    wanted = wanted_payloads([table])
    holders = find_holders(backend, partition, months, wanted)
    return pa.concat_tables(share_payloads([table], holders, wanted)), True


def spool_partition(
    backend: LocalBackend,
    options: WriteOptions,
    partition: Partition,
    table: pa.Table,
    *,
    share: bool,
    months: Sequence[tuple[int, int]],
) -> Spooled:
    """Write ``partition``'s file (and its capture index) into the spool folder."""
    import pyarrow as pa

    from web_index.storage.pages import CheckedFile

    table, refers = shared_table(backend, partition, table, share, months)
    data, write_options = partition_file_args(partition, table, options)
    spool = backend.spool_parquet(data, **write_options)
    if partition.type.is_metadata:
        return Spooled(partition, spool, refers, None, None)
    try:
        path = partition.compacted_path
        # The lines carry the bodies' places: learnt from the file as written.
        with pa.memory_map(str(spool)) as source:
            holders: dict[str, FileInfo] = {}
            lines = table_lines(partition.type, table, CheckedFile(source, path=path), backend, path, holders)
        info = backend.spooled_info(spool)
        covered = compacted_stored(partition, info.size, info.version)
        where, body = capture_index_bytes(partition, covered, frozenset(), lines)
        return Spooled(partition, spool, refers, backend.spool_bytes(body), where, holders)
    except BaseException:
        spool.unlink(missing_ok=True)
        raise


def gathered(type: RecordType, batches: Sequence[pa.RecordBatch]) -> pa.Table:
    """A partition's table from its batch in each chunk that holds it: one batch is
    sorted already; several are merged, each record once (the last given wins)."""
    import pyarrow as pa

    table = pa.Table.from_batches(batches)
    return table if len(batches) == 1 else sort_dedupe(type, table)


def run_task(root: str, options: WriteOptions, task: Task) -> Spooled:
    """:func:`spool_partition` in a worker process: the partition's table read from
    the spill files by their paths."""
    batches = [_reader(task.commit, path).get_batch(b) for path, b in task.batches]
    table = gathered(task.partition.type, batches)
    spooled = spool_partition(
        _backend(root), options, task.partition, table, share=task.share, months=task.months
    )
    crash_point("load-worker")  # its spooled files left by a dead process, for remove_orphans
    return spooled


@functools.lru_cache(maxsize=4)
def _backend(root: str) -> LocalBackend:
    return LocalBackend(Path(root))


_readers: dict[str, pa.ipc.RecordBatchFileReader] = {}
_readers_of = [""]  # the commit whose spill files ``_readers`` holds open


def _reader(commit: str, path: str) -> pa.ipc.RecordBatchFileReader:
    """A spill file, opened once a commit: held open longer, it would keep the
    disk space of a file the commit has removed."""
    import pyarrow as pa

    if _readers_of[0] != commit:
        _readers.clear()
        _readers_of[0] = commit
    reader = _readers.get(path)
    if reader is None:
        reader = _readers[path] = pa.ipc.open_file(pa.OSFile(path, "rb"))  # read, not mapped: see _load.Spill
    return reader


# What a task imports on first use, imported once in the fork server: each worker then
# starts with them (1.4 s of pyarrow and numpy a worker otherwise).
_PRELOAD = (
    "pyarrow",
    "pyarrow.compute",
    "pyarrow.ipc",
    "pyarrow.parquet",
    "web_index.storage.pages",
    "web_index.storage.payloads",
)
_CHUNK = 8  # partitions sent to a worker at a time: thousands of small ones cost one message each less


def _exit_with_loader() -> None:
    """Make this worker exit when the process that started it does: a worker holds its
    own task queue open, so it would wait for tasks forever (and keep the fork server
    alive) after a loader killed mid-commit."""
    import multiprocessing
    import os
    import threading

    loader = multiprocessing.parent_process()  # the loader, not the fork server: its pipe
    if loader is not None:

        def watch() -> None:
            loader.join()  # returns once the loader's end of the pipe is closed: it has died
            os._exit(1)

        threading.Thread(target=watch, name="wi-loader-watch", daemon=True).start()


class Pool:
    """The worker processes of a bulk load (``jobs`` of them), started on first use
    and kept until :meth:`close`: a worker's spooled files are named by its process id,
    which ``remove_orphans`` must see alive until the commit has named them."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._executor: ProcessPoolExecutor | None = None

    def start(self) -> ProcessPoolExecutor:
        """The workers, started now (while the load spills, not when it commits)."""
        if self._executor is None:
            import multiprocessing

            # Not fork: the store may have threads (a server's, a read cache's).
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([__name__, *_PRELOAD])
            self._executor = ProcessPoolExecutor(self.jobs, mp_context=context, initializer=_exit_with_loader)
            for _ in range(self.jobs):  # a worker is started for a task none is free to take
                self._executor.submit(int)
        return self._executor

    def map(self, root: str, options: WriteOptions, tasks: Iterable[Task]) -> Iterator[Spooled]:
        """Each task's :class:`Spooled`, in the tasks' order, as the workers finish them."""
        return self.run_each(functools.partial(run_task, root, options), tasks)

    def run_each(self, work: Callable[[_T], _R], items: Iterable[_T], chunk: int = _CHUNK) -> Iterator[_R]:
        """``work`` (a module-level function, or a partial of one) of each item, in order, by
        the workers; a worker's exception raised here, and a worker that died a
        :class:`StoreError`."""
        from concurrent.futures.process import BrokenProcessPool

        try:
            yield from self.start().map(work, items, chunksize=chunk)
        except BrokenProcessPool as exc:
            self.close()
            raise StoreError(
                f"a worker process of the bulk load died (killed? out of memory?): {exc}"
            ) from exc
        except BaseException:
            self.close()  # its workers gone, what they had spooled is a dead writer's, for remove_orphans
            raise

    def close(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=True, cancel_futures=True)
