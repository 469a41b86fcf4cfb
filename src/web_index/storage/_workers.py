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
import multiprocessing.process
import os
import threading
import time
from collections.abc import MutableMapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, NamedTuple

__all__ = ["DEATH_CAUSES", "worker_processes"]

# What a worker's death most often comes of, for the error that says it died. The last: a
# worker imports the starting script again (``forkserver``), and an unguarded one starts
# workers of its own there, which multiprocessing refuses (its message goes to stderr).
DEATH_CAUSES = 'killed? out of memory? a script without the `if __name__ == "__main__":` guard?'


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
    threading.Thread(target=_watch, args=(_watched(executor),), name="wi-pool-watch", daemon=True).start()
    return executor


_WATCH_S = 1.0  # how often a pool's workers are looked at


class _Watched(NamedTuple):
    """What a pool's manager thread works with, held apart from the pool: a shutdown
    clears the pool's own references while that thread may still be stuck."""

    manager: threading.Thread
    processes: MutableMapping[int, multiprocessing.process.BaseProcess]
    writer: Any  # the pool's own end of the results pipe


def _watched(executor: ProcessPoolExecutor) -> _Watched:
    # ProcessPoolExecutor's own attributes: there is no public way to them.
    inner: Any = executor  # (typeshed has some of them, not all, and one wrongly)
    thread = inner._executor_manager_thread
    assert isinstance(thread, threading.Thread)  # started by the first submit
    return _Watched(thread, inner._processes, inner._result_queue._writer)


def _watch(pool: _Watched) -> None:
    """Break a pool whose worker died where the pool cannot see it.

    A worker killed halfway through writing an answer (one bigger than a single write to
    the results pipe: 16 KiB) leaves the pool's manager thread reading the rest of that
    message forever (CPython 3.11): it no longer watches the workers, so the tasks it
    held never fail, whoever waits for them waits forever, and so does a shutdown or the
    interpreter's exit, which join that thread. A worker found gone at two looks in a row
    (the manager notices a death it can see within milliseconds) has the pool's other
    workers killed and the pool's own end of the results pipe closed: the manager reads
    the end of the pipe and fails every task it held, as for any death. Watched for as
    long as the manager thread lives, a shutdown or not."""
    gone_before: set[int] = set()
    while pool.manager.is_alive():
        time.sleep(_WATCH_S)
        gone = {pid for pid in list(pool.processes) if not _alive(pid)}
        if gone & gone_before:
            _break(pool, gone)
            return
        gone_before = gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process now: the worker's pid was reused
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[-1].split()[0]
    except OSError:
        return True  # no /proc to ask: signal 0 said it runs
    return state not in (b"Z", b"X")  # a zombie not yet reaped, or dead


def _break(pool: _Watched, gone: set[int]) -> None:
    for pid, process in list(pool.processes.items()):
        if pid not in gone:  # a pid found gone may be another process's by now
            with contextlib.suppress(OSError, ValueError):
                process.kill()
    # Every other end of the pipe was a worker's: with this one closed, the manager's
    # read ends with an error, which it takes for a broken pool.
    pool.writer.close()


def _start_worker(environment: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(environment)
    _exit_with_parent()


def _exit_with_parent() -> None:
    """Make this worker exit when the process that started it does: a worker holds its
    own task queue open, so it would wait for tasks forever (and keep the fork server
    alive) after its parent was killed."""
    import multiprocessing

    parent = multiprocessing.parent_process()  # the starter, not the fork server: its pipe
    if parent is not None:

        def watch() -> None:
            parent.join()  # returns once the parent's end of the pipe is closed: it has died
            os._exit(1)

        threading.Thread(target=watch, name="wi-parent-watch", daemon=True).start()
