"""Bulk loads and WARC imports whose commits are written by worker processes (``jobs=2``):
the same store answers as with one process, and a worker that dies fails the load
with the store as it was."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.archive.test_import_warc import Warc
from tests.factories import T0, attempt, insertion_request
from web_index import WebIndex
from web_index import _insert_lines as insert_lines
from web_index.archive import _import_workers as import_workers
from web_index.archive import archive_files, import_warcs
from web_index.cli import app
from web_index.errors import StoreError, WarcError
from web_index.ingest import Limits
from web_index.models import (
    AttemptMetadata,
    Page,
    PageKey,
    RecordType,
    SimplePageQuery,
    TimeAwarePageQuery,
)
from web_index.storage import _load as load_module

ROOT = Path(__file__).resolve().parent.parent
_PAYLOADS = [f"payload {n} ".encode() * 40 for n in range(3)] + [b"short"]  # 400+ bytes: shared


def _spool_files(store: Path) -> list[Path]:
    return [p for p in (store / "_tmp").glob("*") if p.is_file()] if (store / "_tmp").exists() else []


def answers(index: WebIndex, urls: list[str], keys: list[PageKey]) -> dict[str, Any]:
    """What the store answers: every query kind for ``urls`` and ``keys``, every record scanned,
    every capture line and the response each line gives."""
    out: dict[str, Any] = {}
    for type in RecordType:
        out[f"scan {type}"] = [_plain(r) for r in index.scan(type)]
        simple = [SimplePageQuery(url=u, type=type) for u in urls]
        out[f"simple {type}"] = [_plain(r) for r in index.query(simple)]
        out[f"presence {type}"] = index.presence(simple)
        at = [
            TimeAwarePageQuery(
                url=u, timestamp=T0 + timedelta(days=40), type=type, not_after=T0 + timedelta(days=70)
            )
            for u in urls
        ]
        out[f"time-aware {type}"] = [_plain(r) for r in index.query(at)]
    out["keys"] = [_plain(r) for r in index.query(keys)]
    for type in (RecordType.GET, RecordType.HEAD):
        lines = [
            line
            for host in sorted({u.split("/")[2] for u in urls})
            for line in index.captures(f"https://{host}/", match="host", type=type)
        ]
        out[f"captures {type}"] = lines
        out[f"capture responses {type}"] = [_plain(index.capture_response(line)) for line in lines]
    # What the files hold, row by row in file order: a partition's batches merged, sorted,
    # each record once, its payloads shared (readers would hide a duplicate or a disorder).
    root = Path(index.location)
    for path in sorted(root.glob("*/*/*/*.parquet")):
        out[f"file {path.relative_to(root)}"] = pq.read_table(path).to_pylist()
    stats = index.stats()
    out["partitions"] = sorted(
        (p.type, p.year, p.month, p.domain, p.records, p.part_files) for p in stats.partitions
    )
    assert index.verify().ok
    return out


def _plain(result: object) -> object:
    return result.to_dict() if isinstance(result, Page | AttemptMetadata) else result


attempts = st.lists(
    st.tuples(
        st.sampled_from(["a.example.com", "b.example.org", "www.c.example.net", "d.example.com"]),
        st.integers(0, 5),  # path
        st.integers(0, 3),  # month (40 days apart)
        st.sampled_from(["get", "get", "head"]),
        st.sampled_from(["success", "success", "timeout"]),
        st.integers(1, 2),  # hops
        st.integers(0, len(_PAYLOADS) - 1),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=6, deadline=None)
@given(
    loads=st.lists(attempts, min_size=1, max_size=2),
    chunk=st.sampled_from([3, 1000]),
    seed=st.integers(0, 2**32),
)
def test_a_load_with_workers_answers_as_one_without(
    tmp_path_factory: pytest.TempPathFactory, loads: list[list[tuple[Any, ...]]], chunk: int, seed: int
) -> None:
    """Several partitions, months, types and repeated payloads; chunks spilled several
    times (a partition's batches merged); a second load that adds parts to partitions
    with files (compacted by the workers): the same answers, capture lines included."""
    tmp = tmp_path_factory.mktemp("jobs")
    rng = random.Random(seed)
    batches = []
    for load in loads:
        items, ids = [], []
        for domain, path, month, method, state, hops, payload in load:
            if items and rng.random() < 0.2:  # an attempt given again (a file imported twice): stored once
                again = rng.randrange(len(items))
                items.append(items[again])
                ids.append(ids[again])
                continue
            url = f"https://{domain}/p{path}"
            when = T0 + timedelta(days=40 * month, seconds=rng.randrange(86400))
            items.append(attempt(url, when, method=method, state=state, hops=hops, body=_PAYLOADS[payload]))
            ids.append(str(uuid.UUID(int=rng.getrandbits(128), version=4)))
        batches.append((items, ids))
    urls = sorted({item[1] for items, _ in batches for item in items})
    got = []
    for jobs in (1, 2):
        with WebIndex(tmp / f"s{jobs}") as index:
            keys = []
            for items, ids in batches:
                with index.bulk_load(chunk=chunk, jobs=jobs) as load:
                    for i in range(0, len(items), 4):  # spilled every few adds: a partition in several chunks
                        keys += load.add(items[i : i + 4], request_ids=ids[i : i + 4])
            got.append(answers(index, urls, keys))
        assert _spool_files(tmp / f"s{jobs}") == []
    assert got[0] == got[1]


events = st.lists(
    st.tuples(
        st.sampled_from(["capture", "capture", "revisit"]),
        st.sampled_from(["https://a.example.com/", "https://b.example.org/x", "http://c.example.net/p"]),
        st.integers(0, 1),  # month
        st.integers(0, 50),  # second
        st.integers(0, len(_PAYLOADS) - 1),
    ),
    min_size=1,
    max_size=14,
    unique_by=lambda e: (e[1], e[2], e[3]),
)


@settings(max_examples=12, deadline=None)
@given(
    files=st.lists(events, min_size=1, max_size=3),
    twice=st.booleans(),
    broken=st.none() | st.integers(0, 2),
    skip_invalid=st.booleans(),
    per_file=st.booleans(),
    small_bodies=st.booleans(),
)
def test_an_import_with_workers_answers_as_one_without(
    tmp_path_factory: pytest.TempPathFactory,
    files: list[list[tuple[Any, ...]]],
    twice: bool,
    broken: int | None,
    skip_invalid: bool,
    per_file: bool,
    small_bodies: bool,
) -> None:
    """Files read by the load's workers (jobs=2, more than one file; ``per_file``: each file a
    task, else one task for all) store and count what one process does: revisits of captures
    in the same file and in others, a file named twice (``twice``: its records counted already
    stored), a file cut short (``broken``: the records before the cut stored; without
    ``skip_invalid`` the files after it not, the problem raised), the store's limits
    (``small_bodies``: every body but the shortest refused)."""
    tmp = tmp_path_factory.mktemp("import-jobs")
    paths, urls = [], set()
    for n, file in enumerate(files):
        w = Warc()
        for kind, url, month, second, payload in file:
            when = T0 + timedelta(days=40 * month, seconds=second)
            urls.add(url)
            if kind == "capture":
                w.capture(url, _PAYLOADS[payload], when=when)
            else:  # of the capture a second before, if any: else not resolved
                w.revisit(url, when, refers_to=when - timedelta(seconds=1))
        paths.append(w.save(tmp / f"{n}.warc.gz"))
    if broken is not None and broken < len(paths):
        data = paths[broken].read_bytes()
        paths[broken].write_bytes(data[: len(data) * 2 // 3])
    if twice:
        paths.append(paths[0])
    limits = Limits(max_body_bytes=100) if small_bodies else None
    got = []
    for jobs in (1, 2):
        with pytest.MonkeyPatch.context() as patch, WebIndex(tmp / f"s{jobs}", limits=limits) as index:
            if per_file:
                patch.setattr(import_workers, "_TASK_BYTES", 1)
            got.append((_imported(index, paths, jobs, skip_invalid), answers(index, sorted(urls), [])))
        assert _spool_files(tmp / f"s{jobs}") == []
    assert got[0] == got[1]


def _imported(index: WebIndex, paths: list[Any], jobs: int, skip_invalid: bool = False) -> object:
    """What an import says: its report's counts, or the problem it raised."""
    try:
        report = import_warcs(index, paths, jobs=jobs, skip_invalid=skip_invalid)
    except WarcError as exc:
        return str(exc)
    return (
        report.stored,
        report.already_stored,
        report.skipped,
        report.records,
        [str(p) for p in report.problems],
    )


def test_files_after_a_problem_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file cut short stops the import there, whatever the files after it would have done
    (here one removed after it was listed, and one read while the cut file was, whose records
    are not stored): its problem is what is raised, as with one process."""
    monkeypatch.setattr(import_workers, "_TASK_BYTES", 1)
    paths = []
    for n in range(4):
        w = Warc()
        w.capture(f"https://example.com/{n}", b"page %d " % n * 100)
        w.capture(f"https://example.com/{n}/b", b"other %d " % n * 100)
        paths.append(w.save(tmp_path / f"{n}.warc.gz"))
    paths[1].write_bytes(paths[1].read_bytes()[:-40])
    last = paths[2].read_bytes()
    urls = [f"https://example.com/{n}{end}" for n in range(4) for end in ("", "/b")]
    got = []
    for jobs in (1, 2):
        paths[2].write_bytes(last)
        files = archive_files(paths)
        paths[2].unlink()
        with WebIndex(tmp_path / f"s{jobs}") as index:
            got.append(
                (_imported(index, files, jobs), index.presence([SimplePageQuery(url=u) for u in urls]))
            )
    assert got[0] == got[1]
    assert "truncated" in str(got[0][0]) and got[0][1] == [True] * 4 + [False] * 4  # the cut: a request


def test_a_revisit_another_task_stored_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A revisit stored by one task with its capture, and the same record in a later file
    without it (held back there): stored once, counted once, as with one process."""
    monkeypatch.setattr(import_workers, "_TASK_BYTES", 1)
    w = Warc()
    w.capture("https://example.com/", _PAYLOADS[0], when=T0)
    start = len(w.buf.getvalue())
    digest = "sha1:" + base64.b32encode(hashlib.sha1(_PAYLOADS[0]).digest()).decode()  # its capture's
    w.revisit("https://example.com/", T0 + timedelta(seconds=5), refers_to=T0, digest=digest)
    whole = w.save(tmp_path / "a.warc.gz").read_bytes()
    alone = tmp_path / "b.warc.gz"
    alone.write_bytes(whole[start:])  # the revisit's own gzip member
    got = []
    for jobs in (1, 2):
        with WebIndex(tmp_path / f"s{jobs}") as index:
            got.append(
                (
                    _imported(index, [tmp_path / "a.warc.gz", alone], jobs),
                    answers(index, ["https://example.com/"], []),
                )
            )
    assert got[0] == got[1]
    assert got[0][0][:2] == (2, 1)


def test_a_reading_worker_killed_fails_the_import_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A worker killed as it hands over a file's chunks: the import fails naming the dead worker,
    stores none of the files, and leaves no spill file once its writers are gone."""
    paths = []
    for n in range(3):
        w = Warc()
        for i in range(5):
            w.capture(f"https://example.com/{n}/{i}", b"page %d " % i * 100)
        paths.append(w.save(tmp_path / f"{n}.warc.gz"))
    store = tmp_path / "s"
    code = (
        "import sys\nfrom web_index import WebIndex\nfrom web_index.archive import import_warcs\n"
        "if __name__ == '__main__':\n"
        "    with WebIndex(sys.argv[1]) as index:\n"
        "        import_warcs(index, sys.argv[2:], jobs=2)\n"
    )
    env = {**os.environ, "WEB_INDEX_CRASH_AT": "load-hand-over"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(store), *map(str, paths)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode != 0
    assert "a worker process of the bulk load died" in done.stderr
    _wait_for_writers(store)
    with WebIndex(store) as index:
        queries = [SimplePageQuery(url=f"https://example.com/{n}/{i}") for n in range(3) for i in range(5)]
        assert index.presence(queries) == [False] * 15
        index.compact()
        assert index.verify().ok
    assert _spool_files(store) == []


def _items(start: int, n: int, hosts: int = 7) -> list[Any]:
    return [
        attempt(f"https://www.d{i % hosts}.com/{i}", T0 + timedelta(days=40 * (i % 3)))
        for i in range(start, start + n)
    ]


def _urls(items: list[Any]) -> list[str]:
    return sorted({item[1] for item in items})


def test_a_worker_that_raises_fails_the_load_and_leaves_the_store_as_it_was(tmp_path: Path) -> None:
    """A worker's error is the load's (here: the spill files it reads are gone); nothing of
    the commit is named, and no spool file is left."""
    store = tmp_path / "s"
    first, second = _items(0, 20), _items(20, 30)
    with WebIndex(store) as index:
        with index.bulk_load(jobs=2) as load:
            load.add(first)
        before = answers(index, _urls(first + second), [])
        with pytest.raises(FileNotFoundError), index.bulk_load(chunk=10, jobs=2) as load:
            load.add(second)
            for path in _spool_files(store):  # read by path by the workers, not by this process
                path.unlink()
        assert answers(index, _urls(first + second), []) == before
    assert _spool_files(store) == []


def test_a_load_with_workers_builds_its_month_indexes_in_a_process_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A load of several commits, or of one big commit, never builds a month index in its own
    process (a build's memory stays with the process that ran it, docs/performance.md): with
    this process's builder broken, a load with workers still indexes every month it wrote (one
    process's load fails, and so does a small load of one commit, which builds here), and the
    index is the one this process builds from the same files."""
    from web_index import _bulk_load
    from web_index.storage.indexes import _month_build

    items = _items(0, 30)
    every = {"chunk": 10, "commit_bytes": 1}  # a commit a chunk: three
    with WebIndex(tmp_path / "s") as index:
        with index.bulk_load(jobs=2, **every) as load:
            load.add(items)
        written = sorted((tmp_path / "s" / "_index").rglob("*.parquet"))
        assert written and index.verify().ok
        apart = [pq.read_table(p) for p in written]
        for path in written:
            path.unlink()
            path.with_suffix(".keys").unlink()
        index.compact()  # the same months built in this process, from the same files
        assert [pq.read_table(p) for p in written] == apart

    # The last builds come after the final compaction, with no worker left idle beside them.
    workers_alive: list[bool] = []
    real = _month_build.build_month_indexes_apart

    def spied(backend: Any, months: Any, given: Any = None) -> None:
        workers_alive.append(load._spill.pool is not None and load._spill.pool._executor is not None)
        real(backend, months, given)

    monkeypatch.setattr(_month_build, "build_month_indexes_apart", spied)
    with WebIndex(tmp_path / "w") as index, index.bulk_load(jobs=2, **every) as load:
        load.add(items)
        load.add(_items(1000, 30))  # parts added to the partitions: a final compaction on workers
    assert workers_alive[0] and workers_alive[-1] is False, workers_alive
    monkeypatch.setattr(_month_build, "build_month_indexes_apart", real)

    def broken(*args: object) -> bool:
        raise RuntimeError("built in the loader")

    monkeypatch.setattr(_month_build, "build_month_index", broken)
    with WebIndex(tmp_path / "t") as index, index.bulk_load(jobs=2, **every) as load:
        load.add(items)
    assert sorted(p.name for p in (tmp_path / "t" / "_index").rglob("*.keys"))
    for name, options in (("u", {"jobs": 1, **every}), ("v", {"jobs": 2, "chunk": 10})):
        with (
            pytest.raises(RuntimeError, match="built in the loader"),
            WebIndex(tmp_path / name) as index,
            index.bulk_load(**options) as load,
        ):
            load.add(items)
    # One commit past _APART_BYTES (a big month's build would stay in this process) builds apart.
    monkeypatch.setattr(_bulk_load, "_APART_BYTES", 1)
    with WebIndex(tmp_path / "x") as index, index.bulk_load(jobs=2, chunk=10) as load:
        load.add(items)
    assert load.commits == 1 and sorted(p.name for p in (tmp_path / "x" / "_index").rglob("*.keys"))


def test_a_month_build_that_dies_fails_the_load_and_the_next_compaction_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process building a load's month indexes killed: a StoreError naming the months, the
    commits stand (they were named before), and the next compaction builds the indexes."""
    items = _items(0, 30)
    monkeypatch.setenv("WEB_INDEX_CRASH_AT", "month-build")  # the workers take this process's environment
    with WebIndex(tmp_path / "s") as index:
        with (
            pytest.raises(StoreError, match=r"building the month indexes of get/\d{4}/\d{2}.* died"),
            index.bulk_load(jobs=2, chunk=10, commit_bytes=1) as load,
        ):
            load.add(items)
        monkeypatch.delenv("WEB_INDEX_CRASH_AT")
        index.compact()
        assert index.verify().ok
        assert index.presence([SimplePageQuery(url=i[1]) for i in items]) == [True] * len(items)


_LOAD = """
import os, sys, uuid
sys.path.insert(0, {root!r})
from tests.test_bulk_load_jobs import _items
from web_index import WebIndex
from web_index import _insert_lines as insert_lines
from web_index.errors import StoreError

if __name__ == "__main__":
    with WebIndex(sys.argv[1]) as index:
        with index.bulk_load(jobs=1) as load:
            load.add(_items(0, 20), request_ids=[str(uuid.UUID(int=i, version=4)) for i in range(20)])
        print("first", flush=True)
        if sys.argv[3] != "-":
            os.environ["WEB_INDEX_CRASH_AT"] = sys.argv[3]  # this load's, and its workers'
        if sys.argv[4] == "merged":  # every partition merged as read (as one past GATHER_MAX)
            from web_index.storage import _load
            _load.GATHER_MAX, _load.BATCH_BYTES = 0, 4096
        try:
            with index.bulk_load(jobs=int(sys.argv[2])) as load:
                ids = [str(uuid.UUID(int=i, version=4)) for i in range(20, 20 + {n})]
                load.add(_items(20, {n}, hosts={hosts}), request_ids=ids)  # new partitions and old
        except StoreError as exc:
            print(exc, flush=True)
            sys.exit(3)
        print("done", flush=True)
"""


def _load(
    store: Path, jobs: int, crash_at: str = "-", *, merged: bool = False, **popen: Any
) -> subprocess.Popen[str]:
    code = _LOAD.format(root=str(ROOT), n=_SECOND[0], hosts=_SECOND[1])
    how = "merged" if merged else "gathered"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(store), str(jobs), crash_at, how],
        stdout=subprocess.PIPE,
        text=True,
        **popen,
    )


_SECOND = (1500, 200)  # the second load: attempts, hosts (its partitions: 3 months of each)


def _wait_for_writers(store: Path) -> None:
    """Wait until the processes that wrote the spool files are gone (the loader's workers
    exit once they see it died, and are then reaped)."""
    deadline = time.monotonic() + 30
    for pid in {int(p.name.split("-", 1)[0]) for p in _spool_files(store)}:
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def _whole_partitions(store: Path) -> int:
    """Check that each partition of the second load is all there or not at all; return how many
    of its attempts are stored (0: the store as it was; 200: the load complete)."""
    items = _items(20, *_SECOND)
    with WebIndex(store) as index:
        stored = 0
        for type in (RecordType.GET, RecordType.GET_METADATA):
            there = index.presence([SimplePageQuery(url=i[1], type=type) for i in items])
            by_partition: dict[tuple[str, int], set[bool]] = {}
            for item, found in zip(items, there, strict=True):
                by_partition.setdefault((item[1].split("/")[2], item[2].month), set()).add(found)
            assert all(len(found) == 1 for found in by_partition.values()), by_partition
            stored = sum(there)
        assert index.presence([SimplePageQuery(url=i[1]) for i in _items(0, 20)]) == [True] * 20
        # The next compaction removes what dead processes left and writes the capture
        # indexes a commit killed before them did not.
        _wait_for_writers(store)
        index.compact()
        # A commit is atomic per partition, not across them (storage/_load.py): killed between
        # a page's data and its metadata partition, the data stays without its metadata
        # until the load is run again.
        problems = index.verify().problems
        assert all("data without a metadata record" in p.message for p in problems), problems
    assert _spool_files(store) == []
    return stored


@pytest.mark.parametrize("merged", [False, True], ids=["gathered", "merged"])
def test_a_worker_killed_fails_the_load_with_the_store_as_it_was(tmp_path: Path, merged: bool) -> None:
    store = tmp_path / "s"
    proc = _load(store, 2, "load-worker", merged=merged)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out
    assert "a worker process of the bulk load died" in out
    assert _spool_files(store)  # the dead worker's file, until a writer removes it
    assert _whole_partitions(store) == 0


@pytest.mark.parametrize("merged", [False, True], ids=["gathered", "merged"])
@pytest.mark.parametrize("point", ["load-before-naming", "load-while-naming", "load-before-capture-indexes"])
def test_a_parallel_commit_killed_at_each_step(tmp_path: Path, point: str, merged: bool) -> None:
    store = tmp_path / "s"
    proc = _load(store, 2, point, merged=merged)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 137, f"the crash point {point} was never reached: {out}"
    stored = _whole_partitions(store)
    if point == "load-before-naming":
        assert stored == 0
    elif point == "load-before-capture-indexes":
        assert stored == _SECOND[0]


@pytest.fixture(scope="module")
def load_seconds(tmp_path_factory: pytest.TempPathFactory) -> float:
    """How long the second load takes here, from its start to its end."""
    proc = _load(tmp_path_factory.mktemp("timed") / "s", 2)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "first"
    started = time.monotonic()
    assert proc.stdout.readline().strip() == "done"
    proc.wait()
    return time.monotonic() - started


@pytest.mark.parametrize("seed", range(4))
def test_a_parallel_load_killed_at_a_random_time(tmp_path: Path, seed: int, load_seconds: float) -> None:
    """The loader and its workers SIGKILLed together (a process group, as the OOM killer or a
    lost machine would) at a random time of the load: each of its partitions whole or absent,
    nothing left behind once the next writer has tidied."""
    store = tmp_path / "s"
    proc = _load(store, 2, start_new_session=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "first"
    time.sleep(random.Random(seed).uniform(0.3, 1.0) * load_seconds)  # the spill is the first 30%
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    _whole_partitions(store)


def test_bad_input_under_jobs_is_one_line_and_exit_2(tmp_path: Path) -> None:
    w = Warc()
    for i in range(3):
        w.capture(f"https://example.com/{i}", b"page %d " % i * 100, pair=False)
    path = w.save(tmp_path / "a.warc.gz")
    data = path.read_bytes()
    path.write_bytes(data[:-40])
    store = str(tmp_path / "s")
    broken = CliRunner().invoke(app, ["import-warc", "--jobs", "2", "--store", store, str(path)])
    assert broken.exit_code == 2
    [line] = broken.stderr.strip().splitlines()
    assert line.startswith(f"error: {path}@") and "truncated" in line
    with WebIndex(store) as index:  # every record before it stored, as with one process
        assert index.presence([SimplePageQuery(url=f"https://example.com/{i}") for i in range(3)]) == [
            True,
            True,
            False,
        ]
    lines = tmp_path / "in.jsonl"
    lines.write_text("{}\n")
    bad = CliRunner().invoke(app, ["insert", "--bulk", "--jobs", "2", "--store", store, str(lines)])
    assert bad.exit_code == 2
    [line] = bad.stderr.strip().splitlines()
    assert line.startswith(f"error: {lines}:1")


def test_the_commands_print_their_totals_as_json_under_jobs(tmp_path: Path) -> None:
    import json

    w = Warc()
    for i in range(3):
        w.capture(f"https://example.com/{i}", b"page %d " % i * 100, pair=False)
    path = w.save(tmp_path / "a.warc.gz")
    store = str(tmp_path / "s")
    done = CliRunner().invoke(app, ["import-warc", "--jobs", "2", "--json", "--store", store, str(path)])
    assert done.exit_code == 0, done.output
    totals = json.loads(done.stdout)
    assert (totals["files"], totals["stored"], totals["already_stored"]) == (1, 3, 0)
    assert totals["bytes"] == path.stat().st_size and totals["seconds"] > 0 and totals["problems"] == []
    lines = tmp_path / "in.jsonl"
    lines.write_text(
        json.dumps(
            {
                "type": "get",
                "url": "https://example.org/",
                "timestamp": "2024-08-01T12:00:00Z",
                "metadata": {"state": "timeout", "url": "https://example.org/", "fetcher_name": "f"}
                | {"fetcher_version": "1", "fetcher_calibre": 10},
            }
        )
        + "\n"
    )
    done = CliRunner().invoke(
        app, ["insert", "--bulk", "--jobs", "2", "--json", "--store", store, str(lines)]
    )
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) | {"seconds": 0} == {"stored": 1, "skipped": 0, "seconds": 0}


def _placeless(out: dict[str, Any]) -> dict[str, Any]:
    """``out`` with each capture line's body place left out: a partition merged as read is
    written in other row groups and pages than one gathered whole, the same rows."""
    place = re.compile(r',"body":\[[0-9,]*\]')
    return {
        k: [place.sub("", line) for line in v] if k.startswith("captures ") else v for k, v in out.items()
    }


@settings(max_examples=5, deadline=None)
@given(loads=st.lists(attempts, min_size=1, max_size=2), seed=st.integers(0, 2**32))
def test_a_partition_merged_as_read_answers_as_one_gathered(
    tmp_path_factory: pytest.TempPathFactory, loads: list[list[tuple[Any, ...]]], seed: int
) -> None:
    """Every partition past the commit's limit (0 bytes here), spilled in batches of a row
    or two, merged as read in the loader and in workers: the same rows, answers and capture
    lines (but for the bodies' places) as partitions gathered whole."""
    tmp = tmp_path_factory.mktemp("merged")
    rng = random.Random(seed)
    batches = []
    given: list[tuple[str, Any, str, str, int, str]] = []
    for load in loads:
        items, ids = [], []
        for domain, path, month, method, state, hops, payload in load:
            if given and rng.random() < 0.3:
                # A record given again, its body changed or not: the copy kept is the same either way.
                url, when, method, state, hops, rid = given[rng.randrange(len(given))]
            else:
                when = T0 + timedelta(days=40 * month, seconds=rng.randrange(86400))
                url = f"https://{domain}/p{path}"
                rid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                given.append((url, when, method, state, hops, rid))
            items.append(attempt(url, when, method=method, state=state, hops=hops, body=_PAYLOADS[payload]))
            ids.append(rid)
        batches.append((items, ids))
    urls = sorted({item[1] for items, _ in batches for item in items})
    got = {}
    with pytest.MonkeyPatch.context() as patch:
        for name, limit, jobs in (("gathered", None, 1), ("merged", 0, 1), ("merged-jobs", 0, 2)):
            if limit is not None:
                patch.setattr(load_module, "GATHER_MAX", limit)
                patch.setattr(load_module, "BATCH_BYTES", 600)
            with WebIndex(tmp / name) as index:
                keys = []
                for items, ids in batches:
                    with index.bulk_load(chunk=3, jobs=jobs) as load:
                        for i in range(0, len(items), 4):
                            keys += load.add(items[i : i + 4], request_ids=ids[i : i + 4])
                got[name] = _placeless(answers(index, urls, keys))
            assert _spool_files(tmp / name) == []
    assert got["merged"] == got["gathered"]
    assert got["merged-jobs"] == got["gathered"]


_LINES = st.lists(
    st.one_of(
        st.tuples(st.just("valid"), st.integers(0, 30), st.sampled_from(["success", "timeout"])),
        st.tuples(st.just("json"), st.integers(0, 30), st.just("")),  # not JSON
        st.tuples(st.just("field"), st.integers(0, 30), st.just("")),  # JSON, a field wrong
        st.tuples(st.just("blank"), st.integers(0, 30), st.just("")),
    ),
    min_size=1,
    max_size=40,
)


def _request_line(kind: str, n: int, state: str) -> str:
    url = f"https://h{n % 4}.example.com/{n}"
    if kind == "valid":
        return json.dumps(insertion_request(*attempt(url, T0 + timedelta(days=40 * (n % 3)), state=state)))
    if kind == "json":
        return '{"type": "get", "url": '
    if kind == "field":
        return json.dumps({"type": "get", "url": url, "timestamp": "yesterday", "metadata": {}})
    return "   "


@settings(max_examples=10, deadline=None)
@example(  # an invalid line while the ranges after it are read: those are not stored
    lines=[("valid", 1, "success"), ("json", 2, ""), *[("valid", n, "success") for n in range(3, 9)]],
    skip_invalid=False,
    range_bytes=1,
    batch=1,
)
@given(
    lines=_LINES,
    skip_invalid=st.booleans(),
    range_bytes=st.sampled_from([1, 300, 1 << 20]),
    batch=st.sampled_from([1, 3, 1000]),
)
def test_insert_bulk_read_by_workers_does_what_one_process_does(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[tuple[str, int, str]],
    skip_invalid: bool,
    range_bytes: int,
    batch: int,
) -> None:
    """``insert --bulk --jobs 2`` of a file, its lines read by the load's workers a range each
    (``range_bytes``: a line a range, a few, all in one): the same exit, messages (line
    numbers, what was skipped, what was stored before an invalid line) and records as
    ``--jobs 1``, whose one process reads every line."""
    tmp = tmp_path_factory.mktemp("insert-jobs")
    source = tmp / "in.jsonl"
    source.write_text("\n".join(_request_line(*line) for line in lines) + "\n")
    got = []
    for jobs in (1, 2):
        store = tmp / f"s{jobs}"
        args = [
            "insert",
            "--bulk",
            "--jobs",
            str(jobs),
            "--batch",
            str(batch),
            "--store",
            str(store),
            str(source),
        ]
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(insert_lines, "_RANGE_BYTES", range_bytes)
            patch.setattr(insert_lines, "_MIN_RANGE_BYTES", 1)
            done = CliRunner().invoke(app, args + (["--skip-invalid"] if skip_invalid else []))
        with WebIndex(store) as index:
            records = {
                str(type): sorted(json.dumps(_without_ids(_plain(r)), default=str) for r in index.scan(type))
                for type in RecordType
            }
            assert index.verify().ok
        got.append((done.exit_code, done.stderr, records))
        assert _spool_files(store) == []
    assert got[0] == got[1]


def _without_ids(value: object) -> object:
    """A record as the store answers it, without the request ids it gave (they differ run to run)."""
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in sorted(value.items()) if k != "request_id"}
    if isinstance(value, list):
        return [_without_ids(v) for v in value]
    return value


@pytest.mark.timeout(120)  # read again by a worker, a named pipe would wait for a writer forever
def test_insert_bulk_of_a_pipe_reads_it_in_one_process(tmp_path: Path) -> None:
    """A named pipe cannot be read again by the workers: its lines are read here, all stored."""
    lines = [_request_line("valid", n, "success") for n in range(20)]
    fifo = tmp_path / "in.fifo"
    os.mkfifo(fifo)

    def write() -> None:
        with open(fifo, "w") as f:
            f.write("\n".join(lines) + "\n")

    writer = threading.Thread(target=write)
    writer.start()
    store = tmp_path / "s"
    done = CliRunner().invoke(
        app, ["insert", "--bulk", "--jobs", "2", "--json", "--store", str(store), str(fifo)]
    )
    writer.join(timeout=30)
    assert done.exit_code == 0, done.stderr
    assert json.loads(done.stdout)["stored"] == 20


def test_a_range_that_cannot_be_read_stops_the_input_as_one_process_does(tmp_path: Path) -> None:
    """A worker's read that fails (here: a folder where the file was) ends the input with the
    input's error, not the store's: the ranges before it stored."""
    store = tmp_path / "s"
    WebIndex(store).close()
    done = insert_lines._insert_range(
        str(store), None, Limits(), str(tmp_path), "in.jsonl", 10, False, (0, 100, 1)
    )
    assert done.error is None and done.stored == 0
    assert done.stopped is not None and done.stopped.startswith("cannot read in.jsonl: ")
    assert done.chunks is not None and done.chunks.files == ()


def test_a_script_without_the_main_guard_is_told_of_it(tmp_path: Path) -> None:
    """A worker imports the script that started it again (``forkserver``): an unguarded one
    starts a load there, which multiprocessing refuses, and the worker dies. The load's error
    names that cause beside a kill, and the store holds nothing of the load."""
    script = tmp_path / "load.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parents[1])!r})\n"
        "from tests.test_bulk_load_jobs import _items\n"
        "from web_index import WebIndex\n"
        "with WebIndex(sys.argv[1]) as index:\n"
        "    with index.bulk_load(jobs=2) as load:\n"
        "        load.add(_items(0, 20))\n"
    )
    store = tmp_path / "s"
    done = subprocess.run(
        [sys.executable, str(script), str(store)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert 'a script without the `if __name__ == "__main__":` guard?' in done.stderr, done.stderr[-2000:]
    _wait_for_writers(store)
    with WebIndex(store) as index:
        assert index.presence([SimplePageQuery(url=i[1]) for i in _items(0, 20)]) == [False] * 20
