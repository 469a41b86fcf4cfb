"""Lease locks on an object store: mutual exclusion across machines without a lock server.

A lease is a small object ``_locks/<kind>/<sha256 of name>.lease`` holding who
holds it and for how long (JSON: owner, host, pid, ttl, expiry, a nonce).

* **Take**: ``PUT`` with ``If-None-Match: *``; exactly one of several racing
  writers gets a 2xx, the others a 412.
* **Renew**: a background thread rewrites the lease every ``ttl/3`` with
  ``If-Match: <its ETag>`` (a new nonce each time, so the ETag changes). A 412
  means the lease was taken over: the holder marks it lost.
* **Take over**: a waiter reads the lease (its ETag and TTL). If the same ETag
  stays unchanged for a whole TTL on the waiter's own monotonic clock, or the
  holder's expiry (wall clock) is more than a TTL in the past, the holder is
  dead; the waiter replaces the lease with ``If-Match: <that stale ETag>``, so
  of several waiters only one wins, and a holder that renewed meanwhile wins
  over all of them.
* **Release**: delete the lease, unless it was lost.

Leases are advisory: a holder paused longer than its TTL could act after
losing its lease. Compaction therefore also commits through a conditional PUT
on the compacted object (``If-Match`` the version it read), so a late
compactor cannot overwrite a newer compacted file; see ``docs/format.md``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, NamedTuple

from web_index._retry import Pause, retrying
from web_index.errors import ConflictError, StoreError
from web_index.storage._layout import LOCK_DIR

if TYPE_CHECKING:  # only ever given one; importing it needs the s3 extra
    from web_index.storage.backends.s3 import S3Backend

__all__ = ["Lease", "LeaseLocks"]

log = logging.getLogger("web_index.storage.lease")


def _default_ttl() -> float:
    try:
        return float(os.environ.get("WEB_INDEX_LEASE_TTL", "30"))
    except ValueError:
        return 30.0


class _Ours(NamedTuple):
    etag: str | None


class Lease:
    """One held lease; renewed by a daemon thread until released."""

    def __init__(self, backend: S3Backend, path: str, name: str, ttl_s: float) -> None:
        self.backend = backend
        self.path = path
        self.name = name
        self.ttl_s = ttl_s
        self.owner = str(uuid.uuid4())
        self.etag: str | None = None
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def body(self) -> bytes:
        return json.dumps(
            {
                "owner": self.owner,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "name": self.name,
                "ttl_s": self.ttl_s,
                "expires": time.time() + self.ttl_s,
                "nonce": uuid.uuid4().hex,
            }
        ).encode()

    def start_renewing(self) -> None:
        self._thread = threading.Thread(target=self._renew, name=f"lease {self.name}", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        last_ok = time.monotonic()
        while not self._stop.wait(self.ttl_s / 3):
            try:
                self.etag = self.backend.put(self.path, self.body(), if_match=self.etag)
                last_ok = time.monotonic()
            except ConflictError:
                log.warning("lease %s was taken over: lost", self.name)
                self.lost = True
                return
            except StoreError as exc:  # the store is unreachable: keep trying until expiry
                if time.monotonic() - last_ok > self.ttl_s:
                    log.warning("lease %s could not be renewed: lost (%s)", self.name, exc)
                    self.lost = True
                    return

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost:
            return
        try:
            current = self.backend.head(self.path)
            if current is not None and current.etag == self.etag:
                self.backend.delete(self.path)
        except StoreError as exc:  # it expires by itself
            log.warning("could not release lease %s: %s", self.name, exc)


class LeaseLocks:
    """The :class:`~web_index.storage._locks.Locks` protocol with leases in the bucket."""

    def __init__(self, backend: S3Backend, *, ttl_s: float | None = None, poll_s: float = 0.1) -> None:
        self.backend = backend
        self.ttl_s = ttl_s if ttl_s is not None else _default_ttl()
        self.poll_s = poll_s

    def path(self, kind: str, name: str) -> str:
        return f"{LOCK_DIR}/{kind}/{hashlib.sha256(name.encode()).hexdigest()[:32]}.lease"

    def hold(self, kind: str, name: str, *, blocking: bool = True) -> AbstractContextManager[bool]:
        return self._hold(kind, name, blocking)

    def acquire(self, kind: str, name: str, *, blocking: bool = True) -> Lease | None:
        lease = Lease(self.backend, self.path(kind, name), f"{kind} {name}", self.ttl_s)
        seen: tuple[str | None, float] | None = None  # the holder's lease as first seen unchanged

        def take() -> Lease | None:
            nonlocal seen
            try:
                lease.etag = self.backend.put(lease.path, lease.body(), create=True)
                return lease
            except ConflictError:
                pass
            stale = self._stale(lease.path, seen, lease.owner)
            if isinstance(stale, _Ours):
                # Our PUT went through but its answer was lost and the retry saw our own lease.
                lease.etag = stale.etag
                return lease
            if isinstance(stale, tuple):
                seen = stale
            elif stale is not None:
                try:
                    lease.etag = self.backend.put(lease.path, lease.body(), if_match=stale)
                    log.warning("took over the stale lease %s", lease.name)
                    return lease
                except ConflictError:
                    seen = None  # someone else took it, or the holder renewed
            return None

        if not blocking:
            return take()
        pause = Pause(self.poll_s, factor=1.5, cap=max(self.poll_s, self.ttl_s / 10))
        return retrying(take, tries=None, done=lambda got: got is not None, pause=pause, gave_up="")

    def _stale(
        self, path: str, seen: tuple[str | None, float] | None, owner: str
    ) -> tuple[str | None, float] | str | _Ours | None:
        """The stale lease's ETag to take over, or what we saw now ``(etag, when)``."""
        try:
            data, _size, etag = self.backend.get_tail(path, 1 << 16)
        except FileNotFoundError:
            return (None, time.monotonic())  # released meanwhile: try to create again
        now = time.monotonic()
        try:
            info = json.loads(data)
            ttl = float(info.get("ttl_s", self.ttl_s))
            expires = float(info.get("expires", 0.0))
            if info.get("owner") == owner:
                return _Ours(etag)
        except (ValueError, TypeError, AttributeError):
            ttl, expires = self.ttl_s, 0.0  # unreadable lease: judge by its age alone
        if etag is not None and time.time() > expires + ttl:
            return etag
        if seen is None or seen[0] != etag:
            return (etag, now)
        if etag is not None and now - seen[1] > ttl:
            return etag
        return seen

    @contextmanager
    def _hold(self, kind: str, name: str, blocking: bool) -> Iterator[bool]:
        lease = self.acquire(kind, name, blocking=blocking)
        if lease is None:
            yield False
            return
        lease.start_renewing()
        try:
            yield True
        finally:
            lease.release()
