"""A bulk load's commit, one partition at a time: what a commit does to a
partition before it names anything (``_load``), in the committing process or in
a worker process of its pool.

A partition's work is its table (its batches from every spilled chunk, sorted
and deduplicated), its payloads shared with the compacted files of other months
(a ``get`` table to be a partition's compacted file), its file written unsynced
into the spool folder, its month index rows made from the table (sent back), and,
for a ``get``/``head`` file, its capture index made from the table and the file as
written (the bodies' places), spooled too. A
worker reads the spill files itself (read, not mapped) and returns only paths, so
the committing process never holds more than one partition's table, and nothing
a worker writes is visible: the committing process names every file.

A partition bigger than :data:`GATHER_MAX` (one site's archive is one partition a
month) is never a table: its runs, spilled in batches of about :data:`BATCH_BYTES`,
are merged as they are read (``_merge``, as compaction merges files), shared and
written a row group at a time, and its capture index made from the file read back.
What a commit holds is then a batch of each chunk, whatever the partition's size.

A capture index names the version of the file it covers (inode and mtime on a
local disk), which renaming the spooled file keeps: the index made here covers
the file once it is named as the partition's compacted file, and is dropped if
the file becomes a part instead.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

from web_index.errors import StoreError
from web_index.models import RecordType
from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, partition_file_args
from web_index.storage._layout import Partition, compacted_stored
from web_index.storage._memory import release_freed_memory
from web_index.storage._merge import merge_sorted
from web_index.storage._schema import DIGEST_COLUMNS, REF_COLUMN
from web_index.storage._tables import conform, record_order
from web_index.storage._workers import DEATH_CAUSES, worker_processes
from web_index.storage.backends import Backend, FileInfo, LocalBackend
from web_index.storage.indexes import FileRows, capture_index_bytes, file_rows, measured, written_lines
from web_index.storage.payloads import (
    HOLDER_COLUMNS,
    Values,
    fill_pending,
    find_holders,
    holder_values,
    pending_holders,
    share_payloads,
    wanted_payloads,
)

if TYPE_CHECKING:
    import pyarrow as pa

_T = TypeVar("_T")
_R = TypeVar("_R")

__all__ = [
    "BATCH_BYTES",
    "GATHER_MAX",
    "Merged",
    "Pool",
    "Run",
    "Spooled",
    "Streamed",
    "Task",
    "partition_rows",
    "run_task",
    "shared_table",
    "spool_partition",
]

# A partition's rows in a chunk are spilled in record batches of about this: a partition merged
# as read holds a batch of each chunk of its commit (~128 of them at 8 GiB, a commit's default size).
BATCH_BYTES = 1 << 20
# A partition's spilled bytes past which it is merged as read, not gathered: a gathered one is
# held ~3-6 times over in a worker (its batches, sorted, shared, written, its lines), and two
# workers' commits were a 10 GiB import's peak at 64 MiB (1,057 MiB of it; 962 at 32).
GATHER_MAX = 32 << 20

Reader = Callable[[str], "pa.ipc.RecordBatchFileReader"]  # a spill file's reader, by its path


class Run(NamedTuple):
    """A partition's rows in one spilled chunk (sorted, each record once): batches
    ``first`` to ``first + batches - 1`` of the spill file at ``path``."""

    path: str
    first: int
    batches: int
    nbytes: int  # about: its bodies' bytes and 512 a row


class Task(NamedTuple):
    """A partition of a spill, as a worker process is given it."""

    partition: Partition
    runs: tuple[Run, ...]  # its rows in each chunk that holds it, in the order spilled
    share: bool  # its payloads stored in other months become references
    months: tuple[tuple[int, int], ...]  # the months holding ``get`` files, to look them up in
    commit: str  # which commit: a worker keeps its spill files open for that commit only
    gather_max: int  # GATHER_MAX as the committing process has it


class Streamed(Protocol):
    """A partition's rows too big to be held, as row groups in order (iterable again), and
    their payloads' SHA-256 column read alone: what payload sharing reads first."""

    def __iter__(self) -> Iterator[pa.Table]: ...

    def digests(self) -> Iterator[pa.Table]: ...


class Merged:
    """A partition too big to be held as a table: its runs merged as they are read,
    each record once (its copy in the earliest run, as :func:`partition_rows` keeps
    it), in row groups of ``options``. Iterable again (each time from the spill files)."""

    def __init__(
        self, partition: Partition, runs: Sequence[Run], reader: Reader, options: WriteOptions
    ) -> None:
        self.type = partition.type
        self._where = str(partition)
        self._runs = runs
        self._reader = reader
        self._options = options
        self._holders: dict[str, Values] | None = None  # of its pending rows (payloads/_pending.py)

    def __iter__(self) -> Iterator[pa.Table]:
        inputs = [self._tables(run) for run in self._runs]
        merged = merge_sorted(self.type, inputs, functools.partial(self._options.group_rows, self.type))
        if self._holders is None:  # once: the references read alone, then the holders' columns
            wanted = set().union(*(pending_holders(t) for t in self._columns([REF_COLUMN])))
            self._holders = holder_values(self._columns(HOLDER_COLUMNS), wanted)
        if not self._holders:
            return merged
        return (fill_pending(t, self._holders, where=self._where) for t in merged)

    def _tables(self, run: Run) -> Iterator[pa.Table]:
        import pyarrow as pa

        reader = self._reader(run.path)
        for b in range(run.first, run.first + run.batches):
            yield pa.Table.from_batches([reader.get_batch(b)])

    def digests(self) -> Iterator[pa.Table]:
        """The payloads' SHA-256 column of every run, the rest of the rows not read."""
        return self._columns([DIGEST_COLUMNS[1]])

    def _columns(self, names: Sequence[str]) -> Iterator[pa.Table]:
        import pyarrow as pa

        for run in self._runs:
            schema = self._reader(run.path).schema
            at = [schema.get_field_index(name) for name in names]
            if min(at) < 0:
                return
            options = pa.ipc.IpcReadOptions(included_fields=at)
            with pa.OSFile(run.path, "rb") as source:
                reader = pa.ipc.open_file(source, options=options)
                for b in range(run.first, run.first + run.batches):
                    yield pa.Table.from_batches([reader.get_batch(b)])


def partition_rows(
    partition: Partition, runs: Sequence[Run], reader: Reader, options: WriteOptions, gather_max: int
) -> pa.Table | Merged:
    """A partition's rows in a spill: a table gathered from its runs (one run is
    sorted already; several are merged, each record once: its copy in the earliest
    run), or :class:`Merged` when they hold more than ``gather_max`` bytes; rows
    whose payload the load was told of are given it (``payloads/_pending.py``)."""
    import pyarrow as pa

    if sum(run.nbytes for run in runs) > gather_max:
        return Merged(partition, runs, reader, options)
    batches = []
    for run in runs:
        read = reader(run.path)
        batches += [read.get_batch(b) for b in range(run.first, run.first + run.batches)]
    table = pa.Table.from_batches(batches)
    del batches  # the table's now: its batches go as soon as it is replaced by its sorted copy
    if len(runs) > 1:
        # Sorted, each record once, and filled in one take: a copy of the bodies, not two.
        order = record_order(partition.type, table)
        return conform(partition.type, fill_pending(table, where=str(partition), order=order))
    if table.column(0).num_chunks > 1:
        table = table.combine_chunks()
    return fill_pending(table, where=str(partition))


class Spooled(NamedTuple):
    """A partition's file written into the spool folder, not yet named."""

    partition: Partition
    spool: Path
    refers: bool  # rows of it refer to payloads held elsewhere (it must not become a part)
    captures: Path | None  # its capture index, spooled: placed if the file is named the compacted file
    captures_path: str | None  # where that index goes
    holders: dict[str, FileInfo] | None = None  # the files whose payloads its lines place, as read
    month_rows: FileRows | None = None  # its month index rows, if made (indexes/_month_rows.py)


def shared_table(
    backend: Backend,
    partition: Partition,
    rows: pa.Table | Streamed,
    share: bool,
    months: Sequence[tuple[int, int]],
) -> tuple[pa.Table | Iterable[pa.Table], bool]:
    """``rows`` (a table, or row groups: :class:`Merged`, a cluster's staged files), and
    whether its payloads stored elsewhere became references (storage/payloads/_sharing.py):
    only with ``share``, which the commit gives a ``get`` partition to be the compacted file
    of a partition without files. Parts never refer: a compaction may make their rows
    references, which would leave a reference to one of them without its body."""
    if not share:
        return rows, False
    import pyarrow as pa

    if not isinstance(rows, pa.Table):
        wanted = wanted_payloads(rows.digests())
        return share_payloads(rows, find_holders(backend, partition, months, wanted), wanted), True
    wanted = wanted_payloads([rows])
    holders = find_holders(backend, partition, months, wanted)
    return pa.concat_tables(share_payloads([rows], holders, wanted)), True


def spool_partition(
    backend: LocalBackend,
    options: WriteOptions,
    partition: Partition,
    rows: pa.Table | Merged,
    *,
    share: bool,
    months: Sequence[tuple[int, int]],
) -> Spooled:
    """Write ``partition``'s file (and its capture index) into the spool folder."""
    import pyarrow as pa

    table, refers = shared_table(backend, partition, rows, share, months)
    # The caller hands ``rows`` over (run_task keeps no reference): a table it was copied
    # from (payloads shared) is not held through the write and the lines.
    del rows
    sizes: list[int | None] = []  # of a merged partition's bodies, as it is written
    if partition.type is RecordType.GET and not isinstance(table, pa.Table):
        table = measured(table, sizes)
    data, write_options = partition_file_args(partition, table, options)
    spool = backend.spool_parquet(data, **write_options)
    month_rows = None
    try:
        info = backend.spooled_info(spool)
        # Made here, from the table in hand: the month's build then need not read the file.
        if isinstance(table, pa.Table):
            month_rows = file_rows(backend, partition.type, table, info.size, info.version)
        if partition.type.is_metadata:
            return Spooled(partition, spool, refers, None, None, month_rows=month_rows)
        holders: dict[str, FileInfo] = {}
        lines = written_lines(backend, partition, table, sizes, spool, holders)
        covered = compacted_stored(partition, info.size, info.version)
        where, body = capture_index_bytes(partition, covered, frozenset(), lines)
        return Spooled(partition, spool, refers, backend.spool_bytes(body), where, holders, month_rows)
    except BaseException:
        spool.unlink(missing_ok=True)
        if month_rows is not None and month_rows.path is not None:
            Path(month_rows.path).unlink(missing_ok=True)
        raise


def run_task(root: str, options: WriteOptions, task: Task) -> Spooled:
    """:func:`spool_partition` in a worker process: the partition's rows read from
    the spill files by their paths."""
    reader = functools.partial(_reader, task.commit)
    spooled = spool_partition(
        _backend(root),
        options,
        task.partition,
        partition_rows(task.partition, task.runs, reader, options, task.gather_max),
        share=task.share,
        months=task.months,
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


def _released(work: Callable[[_T], _R], item: _T) -> _R:
    """In a worker: ``work`` of ``item``, then what Arrow's allocator kept of it given back (a
    worker's tasks each build tables of their own, which would otherwise hold its memory at
    the biggest's till the load ends)."""
    try:
        return work(item)
    finally:
        release_freed_memory()


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
            self._executor = worker_processes(self.jobs, (__name__, *_PRELOAD))
        return self._executor

    def map(self, root: str, options: WriteOptions, tasks: Iterable[Task]) -> Iterator[Spooled]:
        """Each task's :class:`Spooled`, in the tasks' order, as the workers finish them."""
        return self.run_each(functools.partial(run_task, root, options), tasks)

    def run_each(
        self, work: Callable[[_T], _R], items: Iterable[_T], chunk: int = _CHUNK, ahead: int | None = None
    ) -> Iterator[_R]:
        """``work`` (a module-level function, or a partial of one) of each item, in order, by
        the workers; a worker's exception raised here, and a worker that died a
        :class:`StoreError`. ``ahead``: at most that many items given to the workers before
        their results are taken (else all at once), so that work the caller gives the pool
        meanwhile (a commit's) waits behind no more."""
        from concurrent.futures.process import BrokenProcessPool

        work = functools.partial(_released, work)
        try:
            if ahead is None:
                yield from self.start().map(work, items, chunksize=chunk)
            else:
                given: collections.deque[Future[_R]] = collections.deque()
                for item in items:
                    given.append(self.start().submit(work, item))
                    if len(given) >= ahead:
                        yield given.popleft().result()
                while given:
                    yield given.popleft().result()
        except BrokenProcessPool as exc:
            self.close()
            raise StoreError(f"a worker process of the bulk load died ({DEATH_CAUSES}): {exc}") from exc
        except BaseException:
            self.close()  # its workers gone, what they had spooled is a dead writer's, for remove_orphans
            raise

    def close(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=True, cancel_futures=True)
