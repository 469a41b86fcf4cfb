"""What a long-running process (a load's worker, a server) gives back after its work:
freed memory that the allocators keep is handed to the system, the C library's heap at
most once a second (a trim walks the heap), and a trim skipped so done once the second is up
(the process may idle from then on)."""

from __future__ import annotations

import gc
import itertools
import os
import subprocess
import sys
import textwrap
import threading
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
    monkeypatch.setattr(_memory, "_owed", threading.Event())  # not the one a trimmer thread waits on
    for step in (0.0, 0.3, 0.6, 0.2, 0.5, 2.0):
        clock[0] += step
        release_freed_memory()
    assert trims == [0, 0, 0]  # at 100.0, 101.1 (past 101.0) and 103.6
    assert owed == pytest.approx([100.3, 100.9, 101.6])  # the ones skipped: each left to the trimmer


@pytest.mark.parametrize("again", [False, True])
def test_a_skipped_trim_is_done_once_it_is_due(monkeypatch: pytest.MonkeyPatch, again: bool) -> None:
    """``again``: skipped after the trimmer's own trim, and owed again so."""
    trims: list[float] = []  # when each trim was decided (not when its call ran: a thread may wait)
    monkeypatch.setattr(_memory, "_MALLOC_TRIM", lambda _pad: trims.append(_memory._trimmed[0]))
    monkeypatch.setattr(_memory, "_TRIM_EVERY_S", 0.3)
    monkeypatch.setattr(_memory, "_trimmed", [float("-inf")])

    def trimmed(n: int) -> None:
        deadline = time.monotonic() + 10
        while len(trims) < n and time.monotonic() < deadline:
            time.sleep(0.02)

    release_freed_memory()
    release_freed_memory()  # skipped: owed
    expected = 2
    if again:
        trimmed(2)
        release_freed_memory()  # just after the trimmer's trim: skipped, owed again
        release_freed_memory()
        expected = 3
    trimmed(expected)
    time.sleep(0.5)  # and no more than owed
    assert len(trims) == expected, trims
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


def test_a_month_build_lets_go_of_the_index_it_replaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The month index opened before a compaction rebuilt it is not held (mapped, cached)
    past the build: it would weigh on the rest of the process's work, the sort and write of
    the next build first (the old file, renamed over, stays mapped as ``(deleted)``)."""
    from tests.factories import T0, attempt
    from web_index import WebIndex
    from web_index.models import SimplePageQuery
    from web_index.storage.backends import local

    # A folder's listing trusted at once, not 2 s after its last change: the index is stamped,
    # and a query takes its listing from it (which refers back to the index).
    monkeypatch.setattr(local, "_RACY_NS", 0)

    def deleted_index_maps() -> list[str]:
        with open("/proc/self/maps") as maps:
            return [line for line in maps if f"{tmp_path}/" in line and "(deleted)" in line]

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
        gc.disable()  # let go by reference counts, not by a collection of cycles that may not come
        try:
            index.compact()
            assert deleted_index_maps() == []
        finally:
            gc.enable()
        assert index.presence([SimplePageQuery(url=url) for url in urls]) == [True] * len(urls)


def test_an_index_let_go_while_read_keeps_nothing_against_the_budget(tmp_path: Path) -> None:
    """A reader still holding a month index that a build has let go (``forget_month_index``)
    does not keep its table whole: its bytes would count against the process's budget with
    no cache entry left to give them back."""
    from tests.factories import T0, attempt
    from web_index import WebIndex
    from web_index.models import RecordType
    from web_index.storage.backends import LocalBackend
    from web_index.storage.indexes import _month, _month_open

    with WebIndex(tmp_path / "s", create=True) as index:
        index.insert_many([attempt(f"https://a.example/{n}") for n in range(10)])
        index.flush()
        index.compact()
    backend = LocalBackend(tmp_path / "s")
    held = _month_open.open_month_index(backend, RecordType.GET, T0.year, T0.month)
    assert held is not None
    table = held.handle.read()
    _month_open.forget_month_index(backend, RecordType.GET, T0.year, T0.month)
    before = _month._TABLE_BYTES
    assert not held._keep(table)
    assert before == _month._TABLE_BYTES
    again = _month_open.open_month_index(backend, RecordType.GET, T0.year, T0.month)
    assert again is not None and again is not held and again._keep(again.handle.read())
