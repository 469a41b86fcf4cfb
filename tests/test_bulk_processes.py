"""A query file answered by worker processes of this machine (``query_file(jobs=)``,
``query --jobs``): the same file as one process writes, whatever order the batches
come back in, a worker's death costing its batches again and nothing else."""

from __future__ import annotations

import functools
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.cli import _query, app
from web_index.errors import InvalidRecordError, StoreError
from web_index.models import Query, SimplePageQuery, TimeAwarePageQuery, write_queries
from web_index.query import _bulk, _processes, _spool
from web_index.storage import _workers, worker_processes


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Query]]:
    """A store with compacted records and, beside them, records still in its buffer."""
    root = tmp_path_factory.mktemp("processes") / "s"
    rng = random.Random(11)

    def items(first: int, count: int) -> list[Any]:
        return [
            attempt(
                f"https://www.site{k % 9}.org/p/{k % 23}",
                T0 + timedelta(days=k),
                state="success" if rng.random() < 0.8 else "timeout",
                hops=rng.choice([1, 2]),
                body=bytes([k % 256]) * (k * 37 % 3000),
            )
            for k in range(first, first + count)
        ]

    with WebIndex(root) as index:
        keys = index.insert_many(items(0, 120))
        index.flush()
        index.compact()
        keys += index.insert_many(items(120, 40))  # buffered: the workers must see them too
    queries: list[Query] = list(keys)
    for k in keys:
        queries.append(SimplePageQuery(url=k.url, type="get-metadata"))
        queries.append(TimeAwarePageQuery(url=k.url, timestamp=k.timestamp + timedelta(days=3)))
        queries.append(SimplePageQuery(url=k.url + "/missing"))
    random.Random(5).shuffle(queries)
    return root, queries


@pytest.fixture(scope="module")
def answered(
    store: tuple[Path, list[Query]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, pa.Table]:
    """The store's queries as a file, and the results one process writes for them."""
    root, queries = store
    tmp = tmp_path_factory.mktemp("answered")
    write_queries(tmp / "q.parquet", queries)
    return tmp / "q.parquet", _one_process(root, tmp / "q.parquet", tmp / "r.parquet", 1000)


def _one_process(root: Path, source: Path, out: Path, batch_size: int) -> pa.Table:
    with WebIndex(root, read_only=True) as index:
        index.query_file(source, out, batch_size=batch_size)
    return pq.read_table(out)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batch_size=st.integers(4, 60),
    window=st.integers(1, 400),
    seed=st.integers(0, 2**16),
    local=st.booleans(),
    jobs=st.integers(1, 4),
    group=st.sampled_from([5, 64, 4096]),
)
def test_batches_answered_elsewhere_in_any_order_make_the_same_file(
    store: tuple[Path, list[Query]],
    answered: tuple[Path, pa.Table],
    tmp_path_factory: pytest.TempPathFactory,
    batch_size: int,
    window: int,
    seed: int,
    local: bool,
    jobs: int,
    group: int,
) -> None:
    """Whatever order the workers send their batches back in, and however the stream is cut
    into windows and batches, the file is the one that one process writes: workers of this
    machine (``local``) spool their batches to files and merge them into pieces of the
    file, ``jobs`` a window, their rows in row groups of ``group``."""
    root, queries = store
    source, expected = answered
    out = tmp_path_factory.mktemp("order") / "r.parquet"

    def shuffled(fn: Callable[..., Any], tasks: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, Any]]:
        done = [(n, fn(*args)) for n, args in enumerate(tasks)]
        random.Random(seed).shuffle(done)
        yield from done

    with WebIndex(root, read_only=True) as index, pytest.MonkeyPatch.context() as mp:
        mp.setattr(_spool, "OUTPUT_ROWS", group)
        workers = _bulk.Workers(shuffled, index._answer_plans, local=local, jobs=jobs)
        n = _bulk.answer_to_file(
            index._answer_plans, source, out, batch_size=batch_size, window=window, workers=workers
        )
    assert n == len(queries)
    assert pq.read_table(out).equals(expected)
    assert [p.name for p in out.parent.iterdir()] == ["r.parquet"]  # no spool or piece left
    windows = -(-n // window)
    groups = pq.ParquetFile(out).metadata.num_row_groups
    if local and batch_size < window:  # every window merged in pieces of whole row groups
        assert groups == sum(-(-min(window, n - w * window) // group) for w in range(windows))


def test_worker_processes_write_what_one_process_writes(
    store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    root, queries = store
    write_queries(tmp_path / "q.parquet", queries)
    expected = _one_process(root, tmp_path / "q.parquet", tmp_path / "one.parquet", 13)
    assert expected.column("found").to_pylist().count(True) > len(queries) // 2
    workers: set[int] = set()

    def answered(n: int) -> None:
        workers.update(_pids())

    with WebIndex(root, read_only=True) as index:
        n = index.query_file(
            tmp_path / "q.parquet", tmp_path / "r.parquet", batch_size=13, jobs=2, on_progress=answered
        )
    assert n == len(queries)
    assert pq.read_table(tmp_path / "r.parquet").equals(expected)
    assert len(workers) == 2 and os.getpid() not in workers  # answered by two other processes
    assert _pids() == []  # stopped with the run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.parquet", "q.parquet", "r.parquet"]


_started: list[Any] = []


def _pids() -> list[int]:
    """The worker processes of the run going on (its executor's), if any."""
    executor = _started[-1]._executor if _started else None
    return [] if executor is None else list(executor._processes)


@pytest.fixture(autouse=True)
def _watch_processes(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    real = _processes.Processes.__enter__

    def enter(self: _processes.Processes) -> _processes.Processes:
        _started.append(self)
        return real(self)

    monkeypatch.setattr(_processes.Processes, "__enter__", enter)
    yield
    _started.clear()


def _pools_started(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the worker pools started from now on, in order."""
    pools: list[int] = []
    real = _processes.worker_processes

    def counted(jobs: int, preload: Any) -> Any:
        pools.append(jobs)
        return real(jobs, preload)

    monkeypatch.setattr(_processes, "worker_processes", counted)
    return pools


def test_a_worker_killed_midway_costs_its_batches_again(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, queries = store
    write_queries(tmp_path / "q.parquet", queries)
    expected = _one_process(root, tmp_path / "q.parquet", tmp_path / "one.parquet", 9)
    killed: list[int] = []
    pools = _pools_started(monkeypatch)

    def answered(n: int) -> None:
        if not killed:  # the first batch is back, the others are with the workers
            killed.append(_pids()[0])
            os.kill(killed[0], signal.SIGKILL)

    with WebIndex(root, read_only=True) as index:
        n = index.query_file(
            tmp_path / "q.parquet", tmp_path / "r.parquet", batch_size=9, jobs=2, on_progress=answered
        )
    assert killed and n == len(queries)
    assert pools == [2, 2]  # the workers started again after the death
    assert pq.read_table(tmp_path / "r.parquet").equals(expected)  # every answer once, none lost


def _merge_dying_once(*args: Any) -> None:
    """``_spool.merge_to_file`` in a worker that kills itself the first time, half-way
    through writing its piece (a marker file beside the piece says it did)."""
    path: Path = args[-1]
    marker = path.parent / "killed-once"
    if not marker.exists():
        marker.touch()
        path.write_bytes(b"PAR1 half a piece")
        os.kill(os.getpid(), signal.SIGKILL)
    _spool.merge_to_file(*args)


def test_a_worker_killed_while_merging_its_piece_merges_it_again(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The merge into pieces runs in the workers too: a death there costs that piece again
    (written whole by the retry), and the file is the one one process writes."""
    root, queries = store
    write_queries(tmp_path / "q.parquet", queries)
    expected = _one_process(root, tmp_path / "q.parquet", tmp_path / "one.parquet", 9)
    pools = _pools_started(monkeypatch)
    monkeypatch.setattr(_bulk, "merge_to_file", _merge_dying_once)
    with WebIndex(root, read_only=True) as index:
        n = index.query_file(tmp_path / "q.parquet", tmp_path / "r.parquet", batch_size=9, jobs=2)
    assert n == len(queries)
    assert pools == [2, 2]  # the workers started again after the death
    assert pq.read_table(tmp_path / "r.parquet").equals(expected)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.parquet", "q.parquet", "r.parquet"]


def test_deaths_are_counted_over_the_whole_run(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One death a window, in a run of several windows: the run's second death is one too many."""
    from web_index import _on_cluster

    root, queries = store
    write_queries(tmp_path / "q.parquet", queries)
    monkeypatch.setattr(_processes, "_DEATHS", 1)
    windows_killed: set[int] = set()

    def answered(n: int) -> None:
        window = (n - 1) // 200
        if window not in windows_killed:
            windows_killed.add(window)
            os.kill(_pids()[0], signal.SIGKILL)

    answer = functools.partial(_on_cluster._answer, str(root), None)
    with WebIndex(root, read_only=True) as index, _processes.Processes(2) as workers:
        _started.append(workers)
        pool = _bulk.Workers(workers.run, answer, workers.start)
        with pytest.raises(StoreError, match="died 2 times"):
            _bulk.answer_to_file(
                index._answer_plans,
                tmp_path / "q.parquet",
                tmp_path / "r.parquet",
                batch_size=20,
                window=200,
                on_progress=answered,
                workers=pool,
            )
    assert len(windows_killed) == 2 and not (tmp_path / "r.parquet").exists()


def test_no_more_workers_start_than_a_window_has_batches(
    store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    root, queries = store
    write_queries(tmp_path / "q.parquet", queries[:30])
    with WebIndex(root, read_only=True) as index:
        index.query_file(tmp_path / "q.parquet", tmp_path / "r.parquet", batch_size=15, jobs=4)
    assert [p._started for p in _started] == [2]


def test_workers_that_keep_dying_fail_the_run_and_write_nothing(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, queries = store
    write_queries(tmp_path / "q.parquet", queries)
    (tmp_path / "r.parquet").write_bytes(b"old results")
    monkeypatch.setattr(_processes, "_DEATHS", 0)

    killed: list[int] = []

    def answered(n: int) -> None:
        if not killed:
            killed.append(_pids()[0])
            os.kill(killed[0], signal.SIGKILL)

    with WebIndex(root, read_only=True) as index, pytest.raises(StoreError, match="died 1 times"):
        index.query_file(
            tmp_path / "q.parquet", tmp_path / "r.parquet", batch_size=9, jobs=2, on_progress=answered
        )
    assert (tmp_path / "r.parquet").read_bytes() == b"old results"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.parquet", "r.parquet"]


def test_a_bad_query_answered_by_a_worker_names_it_and_writes_nothing(
    store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    root, queries = store
    write_queries(tmp_path / "q.parquet", queries)
    table = pq.read_table(tmp_path / "q.parquet")
    urls = table.column("url").to_pylist()
    urls[len(urls) // 2] = "http://exa mple.com/"
    bad = table.set_column(table.schema.get_field_index("url"), "url", pa.array(urls, pa.string()))
    pq.write_table(bad, tmp_path / "bad.parquet")
    with WebIndex(root, read_only=True) as index, pytest.raises(InvalidRecordError) as caught:
        index.query_file(tmp_path / "bad.parquet", tmp_path / "r.parquet", batch_size=9, jobs=2)
    problem = "url: invalid host 'exa mple.com' (got 'http://exa mple.com/')"
    assert str(caught.value) == f"{tmp_path / 'bad.parquet'}, row {len(urls) // 2}: {problem}"
    assert not (tmp_path / "r.parquet").exists()


def test_cli_query_jobs_writes_what_one_process_writes(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, queries = store
    monkeypatch.setattr(_query, "_BULK_BATCH", 50)  # many batches, so that the workers start
    write_queries(tmp_path / "q.parquet", queries)
    files = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}.parquet"
        args = [
            "query",
            "--store",
            str(root),
            "--from",
            str(tmp_path / "q.parquet"),
            "-o",
            str(out),
            "--jobs",
            jobs,
        ]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        files[jobs] = pq.read_table(out)
        assert len(_started) == (jobs == "2")
    assert files["1"].num_rows == len(queries) and files["2"].equals(files["1"])


def test_workers_work_in_the_environment_of_when_they_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker is forked from a fork server started earlier, with the environment of then:
    what is set since (an object store's credentials) must reach it all the same."""
    first = worker_processes(1, ())
    first.shutdown()  # the fork server runs on
    monkeypatch.setenv("WEB_INDEX_TEST_SET_LATE", "here")
    workers = worker_processes(1, ())
    try:
        assert workers.submit(os.getenv, "WEB_INDEX_TEST_SET_LATE").result() == "here"
    finally:
        workers.shutdown()


def _die_halfway_through_an_answer() -> None:
    """In a worker: write the start of an answer to the pool's results pipe and die, as a
    worker killed while it wrote an answer bigger than one write has."""
    import struct
    import sys

    frame = sys._getframe()
    while "result_queue" not in frame.f_locals:  # the worker loop's (concurrent.futures.process)
        assert frame.f_back is not None
        frame = frame.f_back
    frame.f_locals["result_queue"]._writer._send(struct.pack("!i", 100_000))  # a length, no bytes
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_worker_dying_halfway_through_its_answer_fails_the_tasks_not_hangs() -> None:
    """The pool's manager thread, left reading the rest of that answer, never sees the death
    itself: the tasks fail as for any death, every one the pool held."""
    from concurrent.futures.process import BrokenProcessPool

    workers = worker_processes(2, ())
    stuck = _workers._watched(workers)
    dying = workers.submit(_die_halfway_through_an_answer)
    waiting = workers.submit(time.sleep, 60)
    try:
        for future in (dying, waiting):
            with pytest.raises(BrokenProcessPool):
                future.result(timeout=20)  # not a TimeoutError
    finally:
        if not waiting.done():  # broken code: unstick the pool, or this process hangs at exit
            _workers._break(stuck, set())
        workers.shutdown()


def test_a_dedicated_worker_reads_on_its_share_of_the_cores_and_keeps_its_memory(tmp_path: Path) -> None:
    """``dedicate(n)``, as a query file's workers are: local reader threads the cores over
    ``n`` (at least one), and a big batch's end gives no memory back (the next takes it)."""
    code = textwrap.dedent(
        """
        import os, sys
        from web_index import WebIndex
        from web_index.query import _pool

        released = []
        _pool.release_memory = lambda: released.append(1)
        with _pool.answering(5000):
            pass
        assert released == [1], released  # a process that does more than answer gives it back
        _pool.dedicate(int(sys.argv[2]))
        with _pool.answering(5000):
            pass
        assert released == [1], released
        with WebIndex(sys.argv[1]) as index:
            threads = _pool.reader_pool(index._store)._max_workers
        assert threads == max(1, (os.cpu_count() or 1) // int(sys.argv[2])), threads
        """
    )
    for processes in (2, 64):
        subprocess.run(
            [sys.executable, "-c", code, str(tmp_path / f"s{processes}"), str(processes)], check=True
        )
