"""Answering a query file's batches in worker processes of this machine.

Answering is Python on one core (a million queries at scale S: ~30 µs a query
in lines, pages and results built), so a query file answered in one process
leaves the other cores idle while the scan it is measured against uses them
all. Its batches are independent: each worker opens the store itself (as a
cluster's workers do, ``web_index._on_cluster``), answers a batch, writes its
result rows to a spool file and sends back their count (``_bulk.answer_window``);
this process reads the queries, orders them, and merges the spooled results, as
it does without workers.

A worker that dies (killed, out of memory) takes the batches it held with it:
they are answered again by new workers, up to ``_DEATHS`` times in one run, then
the run fails with a :class:`~web_index.errors.StoreError` and writes no file.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from web_index.errors import StoreError
from web_index.storage import DEATH_CAUSES, worker_processes

__all__ = ["Processes"]

_IN_FLIGHT = 2  # batches submitted a worker: one answered, one waiting its turn
_DEATHS = 2  # worker deaths a run survives
# What a batch imports on first use, imported once in the fork server (see worker_processes).
_PRELOAD = ("pyarrow", "pyarrow.compute", "pyarrow.ipc", "web_index._on_cluster", "web_index.query")


class Processes:
    """``jobs`` worker processes, started by :meth:`start` or the first :meth:`run`, stopped on exit."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self._executor: ProcessPoolExecutor | None = None
        self._started = 0  # how many workers the executor has
        self._deaths = 0  # in this run, every window's

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._executor is not None:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=True, cancel_futures=True)

    def start(self, tasks: int | None = None) -> ProcessPoolExecutor:
        """The workers, started now if they are not (a fork server and the processes: ~1 s):
        ``jobs`` of them, or one a task when ``tasks`` says there are fewer."""
        if self._executor is None:
            self._started = self.jobs if tasks is None else max(1, min(self.jobs, tasks))
            self._executor = worker_processes(self._started, _PRELOAD)
        return self._executor

    def run(self, fn: Callable[..., Any], tasks: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, Any]]:
        """``(n, fn(*args))`` for the ``n``-th of ``tasks``, as they complete, with at most
        ``_IN_FLIGHT`` a worker submitted at once; a task's exception is raised here."""
        from concurrent.futures.process import BrokenProcessPool

        pending = enumerate(tasks)
        again: list[tuple[int, tuple[Any, ...]]] = []  # the tasks of workers that died
        running: dict[Future[Any], tuple[int, tuple[Any, ...]]] = {}
        while True:
            broken: BaseException | None = None
            while broken is None and len(running) < _IN_FLIGHT * (self._started or self.jobs):
                task = again.pop() if again else next(pending, None)
                if task is None:
                    break
                try:
                    running[self.start().submit(fn, *task[1])] = task
                except BrokenProcessPool as exc:
                    again.append(task)
                    broken = exc
            if not running and broken is None:
                return
            if running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    task = running.pop(future)
                    try:
                        value = future.result()
                    except BrokenProcessPool as exc:
                        again.append(task)
                        broken = exc
                        continue
                    yield task[0], value
            if broken is not None:
                self._deaths += 1
                again += running.values()  # a broken pool fails every task it held
                running.clear()
                self._stop()
                if self._deaths > _DEATHS:
                    raise StoreError(
                        f"worker processes answering the queries died {self._deaths} times ({DEATH_CAUSES}): "
                        f"{broken}"
                    ) from broken
