"""Answering a stream of queries, or running one task per partition, on a Dask cluster.

The client does what ``_bulk`` does for one process, except the answering: it
reads the source a window at a time, cuts each window into batches in partition
order (type, then registrable domain: a batch is a narrow run of domains), and
ships each batch to the cluster as an Arrow table with its row numbers. A worker
answers it with the same planner against the same store, which it opens itself
from its location (see ``web_index._on_cluster``), and sends back the result
rows as an Arrow table; the client spools them as they come and merges them
into input order, into a file that appears whole or not at all.

Memory on the client stays bounded as in ``_bulk``: the window's query rows,
the merge's row groups, and the batches in flight, at most ``_IN_FLIGHT``
per worker thread (so a slow cluster never piles up results on either side).

A worker that dies takes its tasks with it: the scheduler runs them again on
another worker (up to ``distributed.scheduler.allowed-failures`` deaths a task);
a task that raises is retried ``_RETRIES`` times. Each batch's future gives its
rows once, so the output has every answer exactly once either way.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from web_index._extras import import_extra
from web_index.errors import ClusterError, InvalidRecordError
from web_index.models import Query
from web_index.query._bulk import (
    _OUTPUT_ROWS,
    _answered,
    _batches,
    _source_name,
    _Spool,
    _write_windows,
)
from web_index.query._results import Result

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["answer_on_cluster", "map_on_cluster"]

_RETRIES = 2  # a task that raises (a store read that failed, a worker out of memory) runs again
_IN_FLIGHT = 2  # batches submitted per worker thread: one running, one waiting its turn

T = TypeVar("T")
R = TypeVar("R")


def _distributed() -> ModuleType:
    return import_extra("distributed", "dask")


class _Connection:
    """A client of the scheduler at ``address``, closed on exit; an unreachable
    or malformed address is one :class:`ClusterError` line."""

    def __init__(self, address: str) -> None:
        distributed = _distributed()
        try:
            # set_as_default=False: the caller's own dask calls keep their scheduler.
            self.client: Any = distributed.Client(address, set_as_default=False)
        except (OSError, ValueError, TypeError) as exc:
            problem = " ".join(str(exc).split()) or type(exc).__name__
            raise ClusterError(f"no Dask scheduler at {address}: {problem}") from None
        self.killed: type[BaseException] = distributed.KilledWorker
        self.as_completed: Any = distributed.as_completed
        from web_index.query._profiler import NoProfiler

        try:
            self.client.register_plugin(NoProfiler())
        except Exception:
            self.client.close()
            raise

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.client.close()

    def slots(self) -> int:
        """How many tasks to keep submitted: ``_IN_FLIGHT`` per worker thread."""
        threads: int = sum(self.client.nthreads().values())
        return _IN_FLIGHT * max(1, threads)

    def run(self, fn: Callable[..., R], tasks: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, R]]:
        """``(n, fn(*args))`` for the ``n``-th of ``tasks``, as they complete, with at most
        :meth:`slots` submitted at once; a task that failed for good raises here."""
        pending = enumerate(tasks)
        numbers: dict[str, int] = {}
        running = self.as_completed(loop=self.client.loop)
        for _ in range(self.slots()):
            if not self._submit(fn, pending, numbers, running):
                break
        for future in running:
            try:
                value = future.result()
            except self.killed as exc:
                raise ClusterError(f"a task killed its workers again and again: {exc}") from None
            n = numbers.pop(future.key)
            future.release()
            self._submit(fn, pending, numbers, running)
            yield n, value

    def _submit(
        self,
        fn: Callable[..., R],
        pending: Iterator[tuple[int, tuple[Any, ...]]],
        numbers: dict[str, int],
        running: Any,
    ) -> bool:
        task = next(pending, None)
        if task is None:
            return False
        n, args = task
        future = self.client.submit(fn, *args, retries=_RETRIES, pure=False)
        numbers[future.key] = n
        running.add(future)
        return True


def map_on_cluster(scheduler: str, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[R]:
    """``fn(item)`` for each item, each a task on the cluster at ``scheduler``,
    yielded as they complete (in any order); ``fn`` must be picklable."""
    with _Connection(scheduler) as cluster:
        for _, value in cluster.run(fn, ((item,) for item in items)):
            yield value


def answer_on_cluster(
    scheduler: str,
    answer: Callable[[list[Query]], list[Result]],
    source: str | os.PathLike[str] | Iterable[Query],
    destination: str | os.PathLike[str],
    *,
    batch_size: int = 20_000,
    window: int = 1_000_000,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """:func:`~web_index.query.answer_to_file`, with each batch answered by ``answer``
    on a worker of the Dask cluster at ``scheduler`` (``tcp://host:port``).

    ``answer`` is pickled to the workers: a module-level function, or a
    ``functools.partial`` of one, that opens the store itself.
    """
    with _Connection(scheduler) as cluster:

        def each(rows: pa.Table, start: int, writer: pq.ParquetWriter, work: Path) -> None:
            _window_on_cluster(cluster, answer, rows, source, start, writer, work, batch_size, on_progress)

        return _write_windows(source, destination, batch_size, window, each)


def _window_on_cluster(
    cluster: _Connection,
    answer: Callable[[list[Query]], list[Result]],
    rows: pa.Table,
    source: object,
    start: int,
    writer: pq.ParquetWriter,
    work: Path,
    batch_size: int,
    on_progress: Callable[[int], None] | None,
) -> None:
    """One window: its batches answered on the cluster, spooled as they come, merged in input order."""
    import pyarrow.compute as pc

    batches = _batches(rows, batch_size)
    name = _source_name(source)
    # A batch travels as its query rows and output row numbers, taken when submitted.
    tasks = ((answer, rows.take(positions), pc.add(positions, start), name) for positions in batches)
    done = 0
    with _Spool(work / "spool.arrow", len(batches)) as spooled:
        for n, got in cluster.run(_answer_batch, tasks):
            if isinstance(got, InvalidRecordError):
                raise got  # the input is wrong: no retry would help
            if got.num_rows != len(batches[n]):
                raise AssertionError(f"cluster: {got.num_rows} results for a batch of {len(batches[n])}")
            if len(batches) == 1:
                writer.write_table(got, row_group_size=_OUTPUT_ROWS)
            else:
                spooled.add(got)  # in completion order: the merge takes any order
            done += got.num_rows
            if on_progress is not None:
                on_progress(start + done)
        if len(batches) > 1:
            spooled.merge(start, rows.num_rows, writer)


def _answer_batch(
    answer: Callable[[list[Query]], list[Result]], rows: pa.Table, numbers: pa.Array[Any], name: str
) -> pa.Table | InvalidRecordError:
    """On a worker: one batch's result rows, or the invalid query's error as a value
    (raised, Dask would retry what can only fail again)."""
    try:
        return _answered(answer, rows, cast(list[int], numbers.to_pylist()), name)
    except InvalidRecordError as exc:
        return exc
