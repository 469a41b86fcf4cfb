"""What a long-running process (a load's worker, a server) gives back after its work:
freed memory that the allocators keep is handed to the system, the C library's heap at
most once a second (a trim walks the heap), and a trim skipped so done once the second is up
(the process may idle from then on)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from web_index.storage import _memory, release_freed_memory

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
    _memory._MALLOC_TRIM is None or "LD_PRELOAD" in os.environ,
    reason="not glibc's allocator: no heap of glibc's to trim",
)
def test_freed_holes_in_the_heap_are_given_back() -> None:
    done = subprocess.run([sys.executable, "-c", _FRAGMENTED], capture_output=True, text=True, check=True)
    before, after = map(int, done.stdout.split())
    assert before - after > 150, (before, after)  # MiB: ~230 of bodies were freed


def test_the_heap_is_trimmed_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    clock = [100.0]
    owed: list[float] = []
    monkeypatch.setattr(_memory, "_MALLOC_TRIM", trims.append)
    monkeypatch.setattr(_memory, "_trimmed", [float("-inf")])
    monkeypatch.setattr(_memory, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(_memory, "_start_trimmer", lambda: owed.append(clock[0]))
    for step in (0.0, 0.3, 0.6, 0.2, 0.5, 2.0):
        clock[0] += step
        release_freed_memory()
    assert trims == [0, 0, 0]  # at 100.0, 101.1 (past 101.0) and 103.6
    assert owed == pytest.approx([100.3, 100.9, 101.6])  # the ones skipped: each left to the trimmer


@pytest.mark.parametrize("busy", [False, True])
def test_a_skipped_trim_is_done_once_it_is_due(monkeypatch: pytest.MonkeyPatch, busy: bool) -> None:
    """``busy``: work trims again before the trimmer does; what it skipped after is still owed."""
    trims: list[float] = []
    monkeypatch.setattr(_memory, "_MALLOC_TRIM", lambda _pad: trims.append(time.monotonic()))
    monkeypatch.setattr(_memory, "_TRIM_EVERY_S", 0.3)
    monkeypatch.setattr(_memory, "_trimmed", [float("-inf")])
    release_freed_memory()
    release_freed_memory()  # skipped: owed
    if busy:
        time.sleep(0.31)
        release_freed_memory()  # due: trimmed by the work itself
        release_freed_memory()  # skipped again: owed
    deadline = time.monotonic() + 10
    while len(trims) < 2 + busy and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)  # and no more than owed
    assert len(trims) == 2 + busy, trims
    assert all(b - a >= 0.3 for a, b in itertools.pairwise(trims)), trims


_IDLE = _FRAGMENTED.replace(
    "release_freed_memory()\n",
    "release_freed_memory()\n"
    "held = [(bytes(60_000) + bytes([n % 251]), bytes([n % 7]) * 1000) for n in range(4000)]\n"
    "survivors += [small for _big, small in held]\n"
    "del held\n"
    "before = anon()\n"
    "release_freed_memory()\n"
    "import time; time.sleep(2.5)\n",
)


@pytest.mark.skipif(
    _memory._MALLOC_TRIM is None or "LD_PRELOAD" in os.environ,
    reason="not glibc's allocator: no heap of glibc's to trim",
)
def test_what_is_freed_just_after_a_trim_is_given_back_while_the_process_idles() -> None:
    assert _IDLE != _FRAGMENTED
    done = subprocess.run([sys.executable, "-c", _IDLE], capture_output=True, text=True, check=True)
    before, after = map(int, done.stdout.split())
    assert before - after > 150, (before, after)  # MiB: the second ~230 of bodies freed


def test_a_month_build_lets_go_of_the_index_it_replaces(tmp_path: Path) -> None:
    """The month index opened before a compaction rebuilt it is not held (mapped, cached)
    past the build: it would weigh on the rest of the process's work, the sort and write of
    the next build first (the old file, renamed over, stays mapped as ``(deleted)``)."""
    from tests.factories import T0, attempt
    from web_index import WebIndex
    from web_index.models import SimplePageQuery

    def deleted_index_maps() -> list[str]:
        with open("/proc/self/maps") as maps:
            return [line for line in maps if "/_index/" in line and "(deleted)" in line]

    urls = [f"https://{site}.example/{n}" for site in ("a", "b") for n in range(20)]
    with WebIndex(tmp_path / "s", create=True) as index:
        index.insert_many([attempt(url) for url in urls])
        index.flush()
        index.compact()
        assert index.presence([SimplePageQuery(url=urls[0])]) == [True]  # the index opened, mapped
        assert deleted_index_maps() == []
        later = [attempt(url, T0 + timedelta(days=1)) for url in urls[:20]]  # one domain's files change
        index.insert_many(later)
        index.flush()
        index.compact()
        assert deleted_index_maps() == []
        assert index.presence([SimplePageQuery(url=url) for url in urls]) == [True] * len(urls)
