"""A Dask worker plugin that stops the worker's statistical profiler before Python 3.12.

Every 10 ms of a task, a worker's profiler calls ``sys._current_frames()``, which in
CPython 3.11 holds the interpreter's thread-list lock while it makes frame objects.
A garbage collection that those allocations start there, freeing a ``threading.local``
(whose clearing takes the same lock), never returns: the worker stops with the GIL
held, its heartbeats too. Seen in the cluster import's tests: a compaction task stuck
~10 minutes in a worker, until the scheduler gave up on the worker and restarted it
(py-spy: the event loop in ``_PyThread_CurrentFrames`` → ``gc_collect_main``, waiting
on a lock; the task's thread waiting for the GIL). CPython's issue 106883: fixed from
3.12 on, not in 3.11. A client of web-index registers
this plugin, so every worker of the cluster, and every one started later, runs
without it; the Dask dashboard's profile pages stay empty for them.
"""

from __future__ import annotations

import sys
from typing import Any

from distributed import WorkerPlugin

__all__ = ["NoProfiler"]


class NoProfiler(WorkerPlugin):
    """Stops the profiler of each worker it is set up on, where it can deadlock it."""

    name = "web-index-no-profiler"
    idempotent = True

    def setup(self, worker: Any) -> None:
        if sys.version_info >= (3, 12):  # the collector no longer runs inside that lock
            return
        for name in ("profile", "profile-cycle"):
            callback = worker.periodic_callbacks.pop(name, None)
            if callback is not None:
                callback.stop()
