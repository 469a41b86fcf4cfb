"""What a long-running process (a load's worker, a server) gives back after its work:
freed memory that the allocators keep is handed to the system, the C library's heap at
most once a second (a trim walks the heap)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from web_index.storage import _tables, release_freed_memory

_FRAGMENTED = textwrap.dedent(
    """
    from web_index.storage import release_freed_memory

    def anon():
        for line in open("/proc/self/status"):
            if line.startswith("RssAnon"):
                return int(line.split()[1]) >> 10

    # Bodies of 60 KB (under glibc's threshold for a mapping of their own), each with a
    # 1 KB survivor after it on the heap (pymalloc leaves objects past 512 bytes to malloc):
    # freeing the bodies leaves holes that free() alone does not give back.
    held = [(bytes(60_000) + bytes([n % 251]), bytes([n % 7]) * 1000) for n in range(4000)]
    survivors = [small for _big, small in held]
    del held
    before = anon()
    release_freed_memory()
    print(before, anon())
    """
)


@pytest.mark.skipif(
    _tables._MALLOC_TRIM is None or "LD_PRELOAD" in os.environ,
    reason="not glibc's allocator: no heap of glibc's to trim",
)
def test_freed_holes_in_the_heap_are_given_back() -> None:
    done = subprocess.run([sys.executable, "-c", _FRAGMENTED], capture_output=True, text=True, check=True)
    before, after = map(int, done.stdout.split())
    assert before - after > 150, (before, after)  # MiB: ~230 of bodies were freed


def test_the_heap_is_trimmed_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    clock = [100.0]
    monkeypatch.setattr(_tables, "_MALLOC_TRIM", trims.append)
    monkeypatch.setattr(_tables, "_trimmed", [float("-inf")])
    monkeypatch.setattr(_tables, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    for step in (0.0, 0.3, 0.6, 0.2, 0.5, 2.0):
        clock[0] += step
        release_freed_memory()
    assert trims == [0, 0, 0]  # at 100.0, 101.1 (past 101.0) and 103.6
