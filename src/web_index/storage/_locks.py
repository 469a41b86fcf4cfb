"""Partition locks: who may flush or compact a partition right now.

Two kinds exist, ``"flush"`` and ``"compact"``; a process takes at most one of
each at a time, always ``compact`` before ``flush``, so no deadlock is possible.
Locks must be released by the system when their holder dies (a killed
flusher must not block a partition forever).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

__all__ = ["FileLocks", "KindLocks", "Locks", "partition_lock"]


class Locks(Protocol):
    """Mutual exclusion per (kind, partition), across processes (and machines, for shared stores)."""

    def hold(self, kind: str, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]:
        """Hold the lock; the context yields whether it was taken (always ``True`` if blocking)."""
        ...


class FileLocks:
    """``flock`` locks in a local folder: the kernel releases them when a holder dies."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def hold(self, kind: str, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]:
        return partition_lock(self.folder, kind, name, blocking=blocking)


class KindLocks:
    """Different lock implementations per kind (e.g. Postgres flush locks, S3 compact leases)."""

    def __init__(self, by_kind: dict[str, Locks]) -> None:
        self.by_kind = by_kind

    def hold(self, kind: str, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]:
        return self.by_kind[kind].hold(kind, name, blocking=blocking)


# Locks are striped over a fixed set of files, so the lock folder never grows
# with the number of partitions; two partitions sharing a stripe only wait on
# each other, they never deadlock, because a process takes at most one lock of
# each kind at a time, always "compact" before "flush".
_STRIPES = 256


@contextmanager
def partition_lock(folder: Path, kind: str, name: str, *, blocking: bool = True) -> Iterator[bool]:
    """Hold the ``kind`` lock of partition ``name``; yields whether it was taken.

    With ``blocking=False`` it yields ``False`` at once if another holds it.
    """
    stripe = int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "big") % _STRIPES
    path = folder / f"{kind}-{stripe:03d}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
