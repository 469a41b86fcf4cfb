"""Crash tests: writers and compactors killed with SIGKILL at any point."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.crashcheck import ROOT, check_acknowledged, parse_keys

pytestmark = pytest.mark.slow


def spawn(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests._worker", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def read_lines(proc: subprocess.Popen[str], until: int) -> list[str]:
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if len(lines) >= until:
            break
    return lines


@pytest.mark.parametrize("seed", range(6))
def test_writer_killed_right_after_insert_returns(tmp_path: Path, seed: int) -> None:
    store = tmp_path / "store"
    rng = random.Random(seed)
    acked: list[str] = []
    for round_ in range(3):  # several writers in turn, each killed mid-stream
        proc = spawn("write", str(store), str(seed * 10 + round_), str(rng.choice([3, 7, 50])))
        acked += read_lines(proc, rng.randrange(5, 120))
        proc.send_signal(signal.SIGKILL)
        assert proc.stdout is not None
        acked += proc.stdout.readlines()  # whatever it acknowledged before dying
        proc.wait()
    keys = parse_keys(acked)
    assert len(keys) >= 15
    check_acknowledged(store, keys)


CRASH_POINTS = [
    "after-append",
    "flush-before-write",
    "flush-between-writes",
    "flush-before-complete",
    "compact-before-commit",
    "compact-after-commit",
    "compact-during-delete",
]


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_every_step(tmp_path: Path, point: str) -> None:
    store = tmp_path / "store"
    # A first clean run so that compaction has parts to absorb.
    first = spawn("once", str(store), "1", "12")
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0
    proc = spawn("once", str(store), "2", "12", env={"WEB_INDEX_CRASH_AT": point})
    out2, _ = proc.communicate(timeout=120)
    assert proc.returncode == 137, f"the crash point {point} was never reached"
    check_acknowledged(store, parse_keys(out.splitlines() + out2.splitlines()))


@pytest.mark.parametrize("seed", range(4))
def test_compactor_killed_at_random_points_under_load(tmp_path: Path, seed: int) -> None:
    store = tmp_path / "store"
    rng = random.Random(seed)
    writer = spawn("write", str(store), str(seed), "5")
    acked: list[str] = []

    def drain() -> None:
        assert writer.stdout is not None
        for line in writer.stdout:
            acked.append(line)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while len(acked) < 10 and time.monotonic() < deadline:
        time.sleep(0.05)
    for _ in range(4):
        compactor = spawn("compact", str(store))
        time.sleep(rng.uniform(0.05, 0.6))
        compactor.send_signal(signal.SIGKILL)
        compactor.wait()
    start = len(acked)
    while len(acked) < start + 5 and time.monotonic() < deadline + 60:
        time.sleep(0.05)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    reader.join(timeout=10)
    keys = parse_keys(acked)
    assert keys
    check_acknowledged(store, keys)
