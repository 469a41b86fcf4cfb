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
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from web_index._extras import import_extra
from web_index.errors import ClusterError
from web_index.models import Query
from web_index.query._bulk import Answer, Workers, _write_windows, answer_window

if TYPE_CHECKING:
    import pyarrow as pa

    from web_index.query._result_file import ResultFile

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
    answer: Answer,
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
        workers = Workers(cluster.run, answer)

        def each(rows: pa.Table, start: int, out: ResultFile) -> None:
            answer_window(workers, rows, source, start, out, batch_size, on_progress)

        return _write_windows(source, destination, batch_size, window, each)
