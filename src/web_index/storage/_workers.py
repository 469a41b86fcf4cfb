"""Worker processes of this machine, for the work that Python on one core cannot keep up with
(a bulk load's commits, a query file's batches).

They are ``forkserver`` children, not forks: the process that starts them may have threads (a
server's, a read cache's), and a fork copies their locks held. Each exits with the process that
started it, even when that one is killed, and works in its environment as it was when the
workers started. A worker that dies fails the tasks its pool held (``BrokenProcessPool``), even
when it dies where the pool cannot see it (:func:`_watch`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import weakref
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
    threading.Thread(target=_watch, args=(weakref.ref(executor),), name="wi-pool-watch", daemon=True).start()
    return executor


_WATCH_S = 1.0  # how often a pool's workers are looked at


def _watch(pool: weakref.ref[ProcessPoolExecutor]) -> None:
    """Break a pool whose worker died where the pool cannot see it.

    A worker killed halfway through writing an answer (one bigger than a single write to
    the results pipe: 16 KiB) leaves the pool's manager thread reading the rest of that
    message forever (CPython 3.11): it no longer watches the workers, so the tasks it
    held never fail and whoever waits for them waits forever. A worker found gone at two
    looks in a row (the manager notices a death it can see within milliseconds) has its
    pool's remaining workers killed and the pool's own end of the results pipe closed:
    the manager reads the end of the pipe and fails every task it held, as for any death.
    The attributes read are ``ProcessPoolExecutor``'s own: there is no public way."""
    gone_before: set[int] = set()
    while True:
        time.sleep(_WATCH_S)
        executor = pool()
        if executor is None or executor._broken or executor._shutdown_thread:
            return
        gone = {pid for pid in list(executor._processes or ()) if not _alive(pid)}
        if gone & gone_before:
            _break(executor)
            return
        gone_before = gone
        del executor  # not kept alive between looks


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now: the worker's pid was reused
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] != b"Z"  # a zombie, not yet reaped
    except OSError:
        return True  # no /proc to ask: signal 0 said it runs


def _break(executor: ProcessPoolExecutor) -> None:
    for pid in list(executor._processes or ()):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    # Every other end of the pipe was a worker's: with this one closed, the manager's
    # read ends with an error, which it takes for a broken pool.
    executor._result_queue._writer.close()  # type: ignore[attr-defined]


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
