"""Process and CPU helpers the crawl and search benches share."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLI = str(Path(sys.executable).parent / "web-index")
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(procs: list[subprocess.Popen[Any]], grace: float = 30) -> int:
    """SIGTERM ``procs``; SIGKILL those still running ``grace`` s later; how many needed it."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    deadline, killed = time.monotonic() + grace, 0
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            killed += 1
    return killed


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    got = fn()
    return got, round(time.perf_counter() - t, 2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` has used so far (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def busy() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait)."""
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / TICK


def code_env(src: Path | None) -> dict[str, str]:
    """This process's environment, running the ``web_index`` package at ``src`` (a tree's
    ``src`` folder, through ``PYTHONPATH``) when given, else the venv's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return env | {"PYTHONPATH": str(src)} if src else env
