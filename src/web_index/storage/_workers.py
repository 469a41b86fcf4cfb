"""Worker processes of this machine, for the work that Python on one core cannot keep up with
(a bulk load's commits, a query file's batches).

They are ``forkserver`` children, not forks: the process that starts them may have threads (a
server's, a read cache's), and a fork copies their locks held. Each exits with the process that
started it, even when that one is killed, and works in its environment as it was when the
workers started.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

__all__ = ["worker_processes"]


def worker_processes(jobs: int, preload: Sequence[str]) -> ProcessPoolExecutor:
    """``jobs`` worker processes, started now; ``preload``: the modules imported once in the
    fork server, so that each worker starts with them (pyarrow and numpy cost ~1.4 s a worker
    otherwise). A fork server already running keeps the modules it was started with."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__, *preload])
    # A worker is forked from the fork server, which keeps the environment it was started
    # with: the variables set since (an object store's credentials) are handed to it here.
    executor = ProcessPoolExecutor(
        jobs, mp_context=context, initializer=_start_worker, initargs=(dict(os.environ),)
    )
    for _ in range(jobs):  # a worker is started for a task none is free to take
        executor.submit(int)
    return executor


def _start_worker(environment: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(environment)
    _exit_with_parent()


def _exit_with_parent() -> None:
    """Make this worker exit when the process that started it does: a worker holds its
    own task queue open, so it would wait for tasks forever (and keep the fork server
    alive) after its parent was killed."""
    import multiprocessing
    import threading

    parent = multiprocessing.parent_process()  # the starter, not the fork server: its pipe
    if parent is not None:

        def watch() -> None:
            parent.join()  # returns once the parent's end of the pipe is closed: it has died
            os._exit(1)

        threading.Thread(target=watch, name="wi-parent-watch", daemon=True).start()
