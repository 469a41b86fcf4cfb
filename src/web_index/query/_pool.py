"""The reader threads of the query engine, one pool per kind of backend.

Both halves of a batch read files on these threads: finding winners (key
columns of partitions) and loading them (their full rows). They share one pool
so that the sizing below holds for the process, not per half.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from web_index.storage import LocalBackend, Store, release_freed_memory

__all__ = ["answering", "dedicate", "in_chunks", "reader_pool", "release_memory"]

T = TypeVar("T")
R = TypeVar("R")

_POOLS: dict[bool, ThreadPoolExecutor] = {}  # by whether the store is local
_POOLS_LOCK = threading.Lock()
# A batch of this many distinct queries leaves tens of MiB of decoding buffers in
# the allocator's heaps (~100 MiB after 10,000 lookups of one big site): given
# back after it. Smaller ones (a server's single lookups) would pay ~1 ms a call.
_NAMES = ("wi-read", "wi-read-remote")  # the reader threads' name prefixes
_RELEASE_AFTER = 1000
_BARRIER_S = 0.1
_IN_FLIGHT = 0  # batches being answered in this process
_IN_FLIGHT_LOCK = threading.Lock()
_RELEASING = threading.Lock()  # held while a release's tasks are queued or running
_SHARED_BY = 1  # processes answering batches at once on this machine, this one among them
_KEEP_MEMORY = False  # this process answers batches and nothing else


def dedicate(processes: int) -> None:
    """Make this process one of ``processes`` that answer batches and nothing else on this
    machine (a query file's workers), before its first batch: its local reader threads take
    its share of the cores (at least one), and what a batch's decoding freed is kept for the
    next, not given back. The workers keep every core busy already: more threads than that
    fight over the GIL, and memory given back is taken again a batch later (a million
    queries at S with two workers: 6% and 2-3% faster)."""
    global _SHARED_BY, _KEEP_MEMORY
    _SHARED_BY, _KEEP_MEMORY = max(1, processes), True


def reader_pool(store: Store) -> ThreadPoolExecutor:
    """The reader threads for this store's backend.

    Reading local files is decoding, CPU-bound: one thread per core. More only
    fight over the GIL and the caches (a batch of 10,000 queries at 2S spent
    13% more CPU with 8 threads than with 2 on 2 cores). Object-store reads
    wait on the network, so a remote store gets more threads than cores.
    """
    local = isinstance(store.backend, LocalBackend)
    with _POOLS_LOCK:
        pool = _POOLS.get(local)
        if pool is None:
            cores = os.cpu_count() or 1
            threads = max(1, cores // _SHARED_BY) if local else min(16, 4 * cores)
            name = _NAMES[0] if local else _NAMES[1]  # one name a thread
            pool = _POOLS[local] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
    return pool


def in_chunks(
    store: Store, fn: Callable[[Sequence[T]], list[R]], items: Sequence[T], *, least: int
) -> list[R]:
    """``fn(items)``: with ``least`` items or more for each, the items cut into one run a
    reader thread, this thread answering the first (for work that lets other threads
    run: reads, decompression, hashing); the results in the items' order. In a reader
    thread, all of them there: a run queued behind its own thread would wait forever."""
    pool = reader_pool(store)
    parts = min(pool._max_workers, len(items) // max(least, 1))
    if parts < 2 or threading.current_thread().name.startswith(_NAMES):
        return fn(items)
    size = -(-len(items) // parts)
    runs = [items[i : i + size] for i in range(0, len(items), size)]
    later = [pool.submit(fn, run) for run in runs[1:]]
    out = fn(runs[0])
    for job in later:
        out += job.result()
    return out


@contextlib.contextmanager
def answering(queries: int) -> Iterator[None]:
    """Around a batch of ``queries`` distinct queries: once the last batch in
    flight ends, and if this one was big, :func:`release_memory`."""
    global _IN_FLIGHT
    with _IN_FLIGHT_LOCK:
        _IN_FLIGHT += 1
    try:
        yield
    finally:
        with _IN_FLIGHT_LOCK:
            _IN_FLIGHT -= 1
            last = _IN_FLIGHT == 0
        if last and queries >= _RELEASE_AFTER and not _KEEP_MEMORY:
            release_memory()


def release_memory() -> None:
    """Give back to the system what Arrow's allocator keeps after decoding (and the C
    library's heap: :func:`~web_index.storage.release_freed_memory`).

    Arrow's default allocator (mimalloc, unless ``ARROW_DEFAULT_MEMORY_POOL``
    says otherwise) keeps freed memory in a heap per thread, and only that
    thread can hand it back. This thread releases its own now; each reader
    thread its own in a task queued for it, not waited for: one task a thread,
    held together by a barrier so that no thread takes two. A barrier not met
    within ``_BARRIER_S`` (a thread busy with a batch started meanwhile, which
    is using what it holds) is given up, and so is a release asked for while
    another is under way. Nothing to do if the batches read no Arrow data (pyarrow never imported).
    """
    pa = sys.modules.get("pyarrow")
    if pa is None:
        return
    pool = pa.default_memory_pool()
    release_freed_memory()  # this thread's (and the heap)
    if not _RELEASING.acquire(blocking=False):
        return
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    left = [sum(readers._max_workers for readers in pools)]
    left_lock = threading.Lock()

    def done() -> None:
        with left_lock:
            left[0] -= 1
            if left[0] == 0:
                _RELEASING.release()

    for readers in pools:
        barrier = threading.Barrier(readers._max_workers, timeout=_BARRIER_S)

        def release(barrier: threading.Barrier = barrier) -> None:
            try:
                barrier.wait()
                pool.release_unused()
            except threading.BrokenBarrierError:
                pass
            finally:
                done()

        for _ in range(barrier.parties):
            try:
                readers.submit(release)
            except RuntimeError:  # the interpreter is shutting down
                done()
    if not pools:
        _RELEASING.release()
