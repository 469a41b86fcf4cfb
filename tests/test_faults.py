"""Faults on the shared deployment: S3 (SeaweedFS) files, SQLite or Postgres buffer.

* writers, flushers and compactors SIGKILLed at random points under concurrent load;
* the S3 server SIGKILLed mid-upload and restarted on the same data;
* connections to S3 cut by a proxy in the middle of requests.

Afterwards ``verify`` is clean and every acknowledged record is found exactly once.

Run as a module, this file is the child process of those tests::

    python -m tests.test_faults write|flush|compact LOCATION BUFFER SEED [MAX_ROWS]
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO

import pytest

from tests.crashcheck import ROOT, check_index, parse_keys
from tests.servers import Postgres, Proxy, SeaweedFS
from web_index import FlushPolicy, WebIndex
from web_index.models import PageKey

pytestmark = pytest.mark.slow


def _open(location: str, buffer: str, **kwargs: object) -> WebIndex:
    return WebIndex(location, buffer=buffer or None, **kwargs)  # type: ignore[arg-type]


def child(mode: str, location: str, buffer: str, seed: int, max_rows: int) -> None:
    from tests._worker import emit, make

    rng = random.Random(seed)
    with _open(location, buffer, policy=FlushPolicy(max_rows=max_rows, compact_parts=3)) as index:
        n = 0
        while True:
            if mode == "write":
                n += 1
                item = make(rng, n)
                key = index.insert(*item)  # type: ignore[arg-type]
                emit(key, len(item[4]))  # type: ignore[arg-type]
            elif mode == "flush":
                index.flush()
                time.sleep(rng.uniform(0, 0.05))
            else:
                index.compact()
                time.sleep(rng.uniform(0, 0.05))


class Fleet:
    """Child processes of one test; acknowledged keys collected from the writers."""

    def __init__(self, location: str, buffer: str, extra_env: dict[str, str] | None = None) -> None:
        self.location = location
        self.buffer = buffer
        self.env = {**os.environ, "WEB_INDEX_LEASE_TTL": "2", **(extra_env or {})}
        self.acked: list[str] = []
        self.acked_by: dict[int, int] = {}  # pid -> inserts acknowledged
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[str]] = []
        self.logs = tempfile.TemporaryDirectory(prefix="web-index-faults-")
        self.log_paths: dict[int, str] = {}

    def spawn(self, mode: str, seed: int, max_rows: int = 5) -> subprocess.Popen[str]:
        path = os.path.join(self.logs.name, f"{len(self.procs)}-{mode}.log")
        with open(path, "w") as log:
            proc = self._popen(mode, seed, max_rows, log)
        self.procs.append(proc)
        self.log_paths[proc.pid] = path
        if mode == "write":
            threading.Thread(target=self._drain, args=(proc,), daemon=True).start()
        return proc

    def _popen(self, mode: str, seed: int, max_rows: int, log: IO[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.test_faults",
                mode,
                self.location,
                self.buffer,
                str(seed),
                str(max_rows),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=self.env,
        )

    def died(self, procs: list[subprocess.Popen[str]]) -> str:
        """The last lines each exited child wrote to stderr, for an assertion message."""
        out = []
        for p in procs:
            if p.poll() is not None:
                with open(self.log_paths[p.pid]) as f:
                    out.append(f"pid {p.pid} exit {p.returncode}: " + "".join(f.readlines()[-15:]))
        return "\n".join(out)

    def _drain(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.lock:
                self.acked.append(line)
                self.acked_by[proc.pid] = self.acked_by.get(proc.pid, 0) + 1

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_for(self, n: int, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.count()} of {n} inserts acknowledged")
            time.sleep(0.05)

    def wait_until_writing(self, writers: list[subprocess.Popen[str]], timeout: float = 90) -> None:
        """Until each writer has acknowledged an insert: it opened the store and runs.
        (An outage while a writer still opens the store is a failed start, not what
        these tests are about; under load a writer can take seconds to get there.)"""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                if all(self.acked_by.get(w.pid, 0) for w in writers):
                    return
            assert all(w.poll() is None for w in writers), self.died(writers)
            if time.monotonic() > deadline:
                raise TimeoutError("a writer never acknowledged an insert")
            time.sleep(0.05)

    def kill(self, proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def kill_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                self.kill(p)
        time.sleep(0.2)  # let the drain threads read the last acknowledged lines


def check(location: str, buffer: str, acked_lines: list[str]) -> None:
    """Every acknowledged attempt is found exactly once and verify is clean (as crashcheck)."""
    acked: list[tuple[PageKey, int]] = parse_keys(acked_lines)
    assert acked
    with _open(location, buffer) as index:
        check_index(index, acked)


def chaos(fleet: Fleet, rng: random.Random, rounds: int, action: Callable[[], None] | None = None) -> None:
    """Writers, a flusher and a compactor; SIGKILL and restart them at random points."""
    writers = [fleet.spawn("write", rng.randrange(10**6)) for _ in range(2)]
    flusher = fleet.spawn("flush", rng.randrange(10**6))
    compactor = fleet.spawn("compact", rng.randrange(10**6))
    fleet.wait_for(10)
    for _ in range(rounds):
        time.sleep(rng.uniform(0.2, 1.0))
        victim = rng.choice(["writer", "flusher", "compactor", "action"])
        if victim == "writer":
            i = rng.randrange(len(writers))
            fleet.kill(writers[i])
            writers[i] = fleet.spawn("write", rng.randrange(10**6), rng.choice([3, 5, 50]))
        elif victim == "flusher":
            fleet.kill(flusher)
            flusher = fleet.spawn("flush", rng.randrange(10**6))
        elif victim == "compactor":
            fleet.kill(compactor)
            compactor = fleet.spawn("compact", rng.randrange(10**6))
        elif action is not None:
            action()
    start = fleet.count()
    fleet.wait_for(start + 5)
    fleet.kill_all()


@pytest.mark.parametrize("seed", range(2))
def test_sigkill_everyone_s3_sqlite_buffer(seaweed: SeaweedFS, seed: int) -> None:
    fleet = Fleet(seaweed.new_store(), "")
    chaos(fleet, random.Random(seed), rounds=8)
    check(fleet.location, fleet.buffer, fleet.acked)


@pytest.mark.parametrize("seed", range(2))
def test_sigkill_everyone_s3_postgres_buffer(seaweed: SeaweedFS, postgres: Postgres, seed: int) -> None:
    fleet = Fleet(seaweed.new_store(), postgres.new_database())
    chaos(fleet, random.Random(seed), rounds=8)
    check(fleet.location, fleet.buffer, fleet.acked)


def test_s3_server_killed_mid_upload_and_restarted(seaweed: SeaweedFS, postgres: Postgres) -> None:
    fleet = Fleet(seaweed.new_store(), postgres.new_database())
    rng = random.Random(7)

    def restart_server() -> None:
        seaweed.kill()  # SIGKILL, whatever PUT or GET is in flight
        time.sleep(rng.uniform(0.1, 1.0))
        seaweed.start()

    writers = [fleet.spawn("write", rng.randrange(10**6), 3) for _ in range(2)]
    fleet.spawn("flush", 1)
    fleet.spawn("compact", 2)
    fleet.wait_until_writing(writers)
    for _ in range(3):
        n = fleet.count()
        fleet.wait_for(n + 10)
        restart_server()
    fleet.wait_for(fleet.count() + 10)
    assert all(w.poll() is None for w in writers), "a writer died of an outage:\n" + fleet.died(writers)
    fleet.kill_all()
    check(fleet.location, fleet.buffer, fleet.acked)


def test_dropped_connections(seaweed: SeaweedFS) -> None:
    proxy = Proxy(int(seaweed.endpoint.rsplit(":", 1)[1]))
    env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}
    fleet = Fleet(seaweed.new_store(), "", extra_env=env)
    rng = random.Random(3)
    try:
        writers = [fleet.spawn("write", rng.randrange(10**6), 3) for _ in range(2)]
        fleet.spawn("compact", 5)
        fleet.wait_until_writing(writers)
        fleet.wait_for(10)
        for _ in range(15):
            time.sleep(rng.uniform(0.05, 0.3))
            proxy.cut()
        fleet.wait_for(fleet.count() + 10)
        assert all(w.poll() is None for w in writers), fleet.died(writers)
        fleet.kill_all()
    finally:
        proxy.close()
    check(fleet.location, fleet.buffer, fleet.acked)


if __name__ == "__main__":
    child(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
