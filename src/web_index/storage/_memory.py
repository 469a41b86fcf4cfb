"""Freed memory given back to the system by a long-running process (a load's worker, a
server, a process building indexes) after each piece of its work.

Arrow's default allocator (mimalloc, unless ``ARROW_DEFAULT_MEMORY_POOL`` says otherwise)
keeps freed pages in a heap per thread for reuse, and only that thread can hand them back:
after a big build (a month index of a million records left ~180 MiB so) the process would
carry them until it exits. glibc's heap keeps what large Python objects (bodies) and
Parquet's footers freed: a process compacting a month's 364 partitions one after another,
as a load's worker does, ended at 226 MiB, and at 137 with the heap trimmed after each
(docs/performance.md).

A trim walks the heap (~2 ms), so it is done at most once every :data:`_TRIM_EVERY_S`. A
trim skipped so is done by a thread of this module once that time is up: what the last
piece of work freed would otherwise stay in the heap for as long as the process then idles
(a 10 GiB import's two workers each held ~80 MiB of untrimmed heap through the month index
builds between its commits, which is when the import peaked).

Also here, the other side of a batch's memory: the cyclic collector kept off while a batch
makes and frees its objects (:func:`gc_paused`), used by inserts, loads and queries alike.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["gc_paused", "release_freed_memory"]

_TRIM_EVERY_S = 1.0


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for one batch of inserts or queries.

    A batch's temporaries (rows, candidates, decoded dicts) die by reference
    counting when it ends; meanwhile every collection would walk them, and a
    full one every object the process holds (the caller's pages too): ~8% of
    the time of batches of 1,000 inserts (alternated runs, 50,000 attempts).
    Switching it is process-wide: a batch in another thread just collects later.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def release_freed_memory() -> None:
    """Give back to the system what the allocators keep of freed memory: Arrow's, of this
    thread, and the C library's heap, now or (trimmed less than a second ago) by a thread
    about a second from now (threads may race to a trim: harmless)."""
    pa = sys.modules.get("pyarrow")
    if pa is not None:
        pa.default_memory_pool().release_unused()
    if _MALLOC_TRIM is None:
        return
    if not _trim_if_due():
        _owed.set()
        _start_trimmer()


def _trim_if_due() -> bool:
    now = time.monotonic()
    if now - _trimmed[0] < _TRIM_EVERY_S:
        return False
    _trimmed[0] = now
    _MALLOC_TRIM(0)
    return True


def _trim_owed() -> None:
    """The trimmer thread: a trim that was skipped, done once it is due."""
    while True:
        _owed.wait()
        # A sleep, by an Event: a test may stand a clock of its own in for this module's ``time``.
        threading.Event().wait(max(_trimmed[0] + _TRIM_EVERY_S - time.monotonic(), 0.0))
        _owed.clear()  # before the trim: a skip after it is owed again
        if not _trim_if_due():  # trimmed meanwhile by a piece of work: what it skipped is owed
            _owed.set()


def _start_trimmer() -> None:
    with _started_lock:
        if not _started[0]:
            _started[0] = True
            threading.Thread(target=_trim_owed, name="wi-heap-trim", daemon=True).start()


def _forget_trimmer() -> None:
    """In a forked child: the parent's thread is not there, and its locks may have been held
    by another of the parent's threads as it forked (an Event's too): made anew."""
    global _started_lock, _owed
    _started_lock = threading.Lock()
    _owed = threading.Event()
    _started[0] = False


_trimmed = [float("-inf")]  # when this process's heap was last trimmed
_owed = threading.Event()  # a trim was skipped since the last one
_started = [False]
_started_lock = threading.Lock()
os.register_at_fork(after_in_child=_forget_trimmer)
_MALLOC_TRIM: Any
try:
    _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim  # glibc's; another C library may have none
    _MALLOC_TRIM.argtypes = [ctypes.c_size_t]
except (OSError, AttributeError, TypeError):  # TypeError: no CDLL(None) (Windows)
    _MALLOC_TRIM = None
