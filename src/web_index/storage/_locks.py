"""Inter-process locks for the local store (``flock``, released when a holder dies)."""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["partition_lock"]

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
