"""Scale-out on Dask (docs/scale.md): a real two-process LocalCluster against a
SeaweedFS store answers batches and compacts exactly as one process does, and
survives a worker killed mid-batch. One cluster and one store for the module."""

from __future__ import annotations

import functools
import os
import random
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.factories import T0, attempt
from tests.servers import SeaweedFS, free_port, missing
from tests.test_staged import _compacted_footers
from web_index import FlushPolicy, WebIndex
from web_index.cli import app
from web_index.errors import MissingExtraError
from web_index.models import PageKey, Query, RecordType, SimplePageQuery, TimeAwarePageQuery, write_queries
from web_index.query import Plan
from web_index.storage._files import SUPERSEDED_KEY

try:
    import dask
    import distributed
except ImportError:  # pragma: no cover - CI installs every extra
    distributed = None

runner = CliRunner()
_POLICY = FlushPolicy(max_rows=1_000_000, max_age_s=1e9, compact_parts=0)  # flush and compact by hand


@pytest.fixture(scope="module")
def cluster(seaweed: SeaweedFS) -> Iterator[Any]:
    """Two worker processes of one thread, started after SeaweedFS so that they
    inherit its credentials and the local buffer's folder (XDG_CACHE_HOME)."""
    if distributed is None:
        missing("distributed (the dask extra)")
    import dask

    with (
        # A worker killed by a test is started again by its nanny; on two busy cores that can
        # take longer than the 15 s after which LocalCluster closes the nanny of a worker
        # that has not come back, leaving one worker for the rest of the module.
        dask.config.set({"distributed.deploy.lost-worker-timeout": "180s"}),
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as local,
        distributed.Client(local, set_as_default=False) as client,
    ):
        yield client


def _profiling(cluster: Any) -> dict[str, bool]:
    """Whether each worker runs Dask's statistical profiler, which can deadlock a worker
    before Python 3.12 (``web_index.query._profiler``)."""
    return cast(dict[str, bool], cluster.run(_has_profiler))


def _has_profiler(dask_worker: Any) -> bool:
    return sys.version_info < (3, 12) and "profile" in dask_worker.periodic_callbacks


def _items(rng: random.Random, n: int, days: int = 120) -> list[Any]:
    """Attempts over six sites (two hosts each), four months (``days``), get and head, some failed."""
    out = []
    for _ in range(n):
        url = f"https://{rng.choice(['www.', 'm.'])}site{rng.randrange(6)}.org/p/{rng.randrange(25)}"
        state = "success" if rng.random() < 0.85 else "timeout"
        method = "get" if rng.random() < 0.8 else "head"
        when = T0 + timedelta(days=rng.randrange(days), seconds=rng.randrange(86_400))
        out.append(
            attempt(url, when, method=method, state=state, calibre=rng.choice([10, 60]), body=os.urandom(8))
        )
    return out


@pytest.fixture(scope="module")
def store(seaweed: SeaweedFS) -> tuple[str, list[PageKey]]:
    """An s3:// store with compacted files, part files and buffered rows."""
    rng = random.Random(20)
    location = seaweed.new_store()
    keys: list[PageKey] = []
    with WebIndex(location, policy=_POLICY) as index:
        keys += index.insert_many(_items(rng, 250))
        index.flush()
        index.compact()
        keys += index.insert_many(_items(rng, 150))
        index.flush()  # part files beside the compacted ones
        keys += index.insert_many(_items(rng, 100))  # left in the buffer
    return location, keys


def _batch(keys: list[PageKey], n: int, seed: int) -> list[Query]:
    rng = random.Random(seed)
    out: list[Query] = []
    for _ in range(n):
        k = rng.choice(keys)
        kind = rng.randrange(7)
        if kind == 0:
            out.append(k)  # exact
        elif kind == 1:
            out.append(PageKey(url=k.url, timestamp=k.timestamp, request_id=str(uuid.uuid4()), type=k.type))
        elif kind == 2:
            out.append(
                SimplePageQuery(url=k.url, type=rng.choice(list(RecordType)), calibre=rng.choice([None, 60]))
            )
        elif kind == 3:
            out.append(
                TimeAwarePageQuery(url=k.url, timestamp=k.timestamp + timedelta(days=rng.randrange(-20, 20)))
            )
        elif kind == 4:
            lo = T0 + timedelta(days=rng.randrange(120))
            out.append(
                TimeAwarePageQuery(url=k.url, not_before=lo, not_after=lo + timedelta(days=15), type=k.type)
            )
        elif kind == 5:
            out.append(SimplePageQuery(url=k.url + "/missing"))
        else:
            out.append(SimplePageQuery(url=f"https://nowhere{rng.randrange(3)}.net/"))
    return out


@pytest.fixture(scope="module")
def batch(
    store: tuple[str, list[PageKey]], tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, pa.Table]:
    """A random batch of queries and the one-process answers to it."""
    location, keys = store
    folder = tmp_path_factory.mktemp("batch")
    source = folder / "queries.parquet"
    write_queries(source, _batch(keys, 1_500, seed=7))
    with WebIndex(location, read_only=True) as index:
        index.query_file(source, folder / "local.parquet", batch_size=100)
    expected = pq.read_table(folder / "local.parquet")
    found = expected.column("found").to_pylist()
    assert any(found) and not all(found)
    return source, expected


def test_cluster_answers_equal_one_process_row_for_row(
    cluster: Any, store: tuple[str, list[PageKey]], batch: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    location, _ = store
    source, expected = batch
    with WebIndex(location, read_only=True) as index, distributed.get_task_stream(cluster) as tasks:
        n = index.query_file(
            source, tmp_path / "out.parquet", batch_size=100, scheduler=cluster.scheduler.address
        )
    assert n == expected.num_rows
    assert pq.read_table(tmp_path / "out.parquet").equals(expected)
    assert len(tasks.data) == 15  # one task a batch of 100, and they ran on the cluster
    assert {t["worker"] for t in tasks.data} == set(cluster.scheduler_info()["workers"])


def test_worker_processes_answer_an_object_store_as_one_process(
    store: tuple[str, list[PageKey]], batch: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    """``query_file(jobs=2)`` on the s3:// store (compacted files, parts, the buffer): the
    workers open it by its location, as a cluster's do."""
    location, _ = store
    source, expected = batch
    with WebIndex(location, read_only=True) as index:
        n = index.query_file(source, tmp_path / "out.parquet", batch_size=100, jobs=2)
    assert n == expected.num_rows
    assert pq.read_table(tmp_path / "out.parquet").equals(expected)


def _answer_or_die(location: str, marks: str, plans: list[Plan]) -> list[Any]:
    """On a worker: the third batch to start kills its worker process (once)."""
    from web_index import _on_cluster

    Path(marks, uuid.uuid4().hex).touch()
    if len(os.listdir(marks)) >= 3:
        try:
            os.close(os.open(Path(marks).parent / "killed", os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            pass
        else:
            os._exit(1)  # as a SIGKILL or an out-of-memory kill would
    return _on_cluster._answer(location, None, plans)


def test_a_worker_killed_mid_batch_loses_and_repeats_nothing(
    cluster: Any, store: tuple[str, list[PageKey]], batch: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    from web_index.query import answer_on_cluster

    location, _ = store
    source, expected = batch
    (tmp_path / "marks").mkdir()
    answer = functools.partial(_answer_or_die, location, str(tmp_path / "marks"))
    n = answer_on_cluster(
        cluster.scheduler.address, answer, source, tmp_path / "out.parquet", batch_size=60, window=400
    )
    assert (tmp_path / "killed").exists()  # the kill happened, the batch went on
    assert n == expected.num_rows
    out = pq.read_table(tmp_path / "out.parquet")
    assert out.column("query").to_pylist() == list(range(expected.num_rows))  # each answer once, in order
    assert out.equals(expected)


def test_the_cli_scheduler_option(
    cluster: Any, store: tuple[str, list[PageKey]], batch: tuple[Path, pa.Table], tmp_path: Path
) -> None:
    location, _ = store
    source, expected = batch
    args = ["query", "--store", location, "--from", str(source), "--output", str(tmp_path / "out.parquet")]
    with distributed.get_task_stream(cluster) as tasks:
        result = runner.invoke(app, [*args, "--scheduler", cluster.scheduler.address])
    assert result.exit_code == 0, result.stderr
    assert tasks.data  # answered on the cluster, not here
    assert pq.read_table(tmp_path / "out.parquet").equals(expected)


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:{port}", "nonsense://{port}"])
def test_a_bad_scheduler_is_one_line_and_exit_5(
    cluster: Any, store: tuple[str, list[PageKey]], batch: tuple[Path, pa.Table], tmp_path: Path, address: str
) -> None:
    location, _ = store
    source, _ = batch
    scheduler = address.format(port=free_port())
    args = ["--store", location, "--scheduler", scheduler]
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        queried = runner.invoke(
            app, ["query", *args, "--from", str(source), "--output", str(tmp_path / "o.parquet")]
        )
        compacted = runner.invoke(app, ["compact", *args])
    for result in (queried, compacted):
        assert result.exit_code == 5, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: no Dask scheduler at {scheduler}: "), lines
        assert "Traceback" not in result.output
    assert not (tmp_path / "o.parquet").exists()
    assert os.listdir(tmp_path) == [], "no staged file left behind"


def test_the_scheduler_answers_into_a_file_only(tmp_path: Path) -> None:
    args = ["query", "https://example.com/", "--store", str(tmp_path), "--scheduler", "tcp://127.0.0.1:1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: --scheduler answers into a file: give --output FILE.parquet"


def test_without_the_extra_it_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from web_index.query import answer_on_cluster

    monkeypatch.setitem(__import__("sys").modules, "distributed", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'web-index\[dask\]'"):
        answer_on_cluster("tcp://127.0.0.1:1", len, [], tmp_path / "o.parquet")  # type: ignore[arg-type]


def _fill_twice(seaweed: SeaweedFS) -> tuple[str, str]:
    """Two stores holding the same attempts (same request ids) in several part files a partition."""
    rng = random.Random(5)
    locations = seaweed.new_store(), seaweed.new_store()
    rounds = [_items(rng, 60, days=45) for _ in range(2)]
    ids = [[str(uuid.uuid4()) for _ in items] for items in rounds]
    for location in locations:
        with WebIndex(location, policy=_POLICY) as index:
            for items, rids in zip(rounds, ids, strict=True):
                index.insert_many(items, request_ids=rids)
                index.flush()
    return locations


def _contents(location: str) -> tuple[Any, ...]:
    with WebIndex(location, read_only=True) as index:
        records = {t: [r.to_dict() for r in index.scan(t)] for t in RecordType}
        stats = sorted(
            (p.type, p.year, p.month, p.domain, p.records, p.part_files, p.compacted)
            for p in index.stats().partitions
        )
        captures = [list(index.captures(f"https://site{k}.org/", match="domain")) for k in range(6)]
        assert index.verify().ok
    return records, stats, captures


def test_compaction_on_the_cluster_equals_compaction_here(cluster: Any, seaweed: SeaweedFS) -> None:
    here, there = _fill_twice(seaweed)
    with WebIndex(here) as index:
        partitions = len(index._store.method_partitions())
        changed_here = index.compact()
    with WebIndex(there) as index, distributed.get_task_stream(cluster) as tasks:
        changed_there = index.compact(scheduler=cluster.scheduler.address)
    assert len(tasks.data) == partitions  # one task a partition
    assert changed_there == changed_here > 0
    records, stats, captures = _contents(there)
    assert (records, stats, captures) == _contents(here)
    assert all(compacted and parts == 0 for *_, parts, compacted in stats)
    assert any(captures)


# -- WARC imports on the cluster (import_warcs(..., scheduler=), import-warc --scheduler) ---------


def _warc_files(folder: Path, seed: int, broken: bool = False) -> list[Path]:
    """Four WARC files over five sites and three months (so most partitions are in several
    files): GET and HEAD captures, and revisits of captures in other files, some of nothing."""
    from tests.archive.test_import_warc import T0 as W0
    from tests.archive.test_import_warc import Warc

    rng = random.Random(seed)
    made: list[tuple[str, Any]] = []
    paths = []
    for n in range(4):
        w = Warc()
        for _ in range(30):
            url = f"https://site{rng.randrange(5)}.org/p/{rng.randrange(20)}"
            when = W0 + timedelta(days=rng.randrange(75), seconds=rng.randrange(86_400))
            method = rng.choice(["GET", "GET", "HEAD"])
            w.capture(url, f"body {rng.randrange(6)}".encode(), when=when, method=method)
            made.append((url, when))
        for url, when in rng.sample(made, 4):
            refers_to = when + timedelta(seconds=rng.choice([0, 0, 7]))  # 7: a date that names nothing
            w.revisit(url, when + timedelta(days=2), refers_to=refers_to)
        paths.append(w.save(folder / f"{n}.warc.gz"))
    if broken:  # the last record of the third file cut short
        data = paths[2].read_bytes()
        paths[2].write_bytes(data[: len(data) - 40])
    return paths


def _staged_left(location: str) -> list[str]:
    from web_index.storage import open_backend

    backend = open_backend(location)
    if "://" not in location:
        return [str(p) for p in (Path(location) / "_tmp").rglob("*")]
    import obstore as obs

    # And no staging folder's lease (``storage/_staging.py``) left behind.
    return [
        m["path"]
        for prefix in ("_tmp", "_locks/stage")
        for batch in obs.list(backend.store, prefix)
        for m in batch
    ]  # type: ignore[attr-defined]


def _set_env(name: str, value: str) -> None:
    """On a worker (by reference: ``os.environ.__setitem__`` would carry this process's mapping)."""
    os.environ[name] = value


def _report(r: Any) -> tuple[Any, ...]:
    return (r.files, r.bytes, r.records, r.stored, r.already_stored, r.skipped, [str(p) for p in r.problems])


@pytest.mark.parametrize("where", ["s3", "local"])
def test_an_import_on_the_cluster_stores_what_a_local_import_does(
    cluster: Any, seaweed: SeaweedFS, tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.test_s3 import _reads_back
    from web_index.archive import import_warcs
    from web_index.storage import open_backend

    paths = _warc_files(tmp_path, seed=11)
    here = seaweed.new_store() if where == "s3" else str(tmp_path / "here")
    there = seaweed.new_store() if where == "s3" else str(tmp_path / "there")
    sources: list[Any] = list(paths)
    if where == "s3":  # one file read by the workers from the object store
        warcs = seaweed.new_store()
        open_backend(warcs).copy_in(paths[0], "in/0.warc.gz")
        sources[0] = f"{warcs}/in/0.warc.gz"
    with WebIndex(here) as index:
        local = import_warcs(index, paths)
    read_back = _reads_back(monkeypatch)  # by this process: the month's pass after the commit
    with WebIndex(there) as index, distributed.get_task_stream(cluster) as tasks:
        spread = import_warcs(index, sources, scheduler=cluster.scheduler.address)
    assert read_back == []  # every capture index written where its file was, from the bytes sent
    assert _report(spread) == _report(local)
    assert local.stored > 100 and local.skipped.get("revisit not resolved")
    assert _contents(there) == _contents(here)
    ran = {t["worker"] for t in tasks.data}
    assert ran == set(cluster.scheduler_info()["workers"])  # files, merges, compactions: on the cluster
    assert not any(_profiling(cluster).values())
    assert _staged_left(there) == []
    with WebIndex(there, read_only=True) as index:
        assert all(p.compacted and p.part_files == 0 for p in index.stats().partitions)
        absorbed = [SUPERSEDED_KEY in footer for footer in _compacted_footers(index)]
    # On an object store a partition without files is written compacted by its task, once;
    # on a shared folder (and where revisits added parts) compaction folds part files in.
    assert (not all(absorbed)) if where == "s3" else all(absorbed)


@pytest.mark.parametrize("crash_at", ["stage-while-writing", "staged-created"])
def test_a_worker_killed_mid_import_costs_nothing(
    cluster: Any, seaweed: SeaweedFS, tmp_path: Path, crash_at: str
) -> None:
    """A worker dies (as a SIGKILL) after staging one file of its WARC file (on an object
    store a file a record type; ``stage-while-writing``: the scheduler runs that WARC file
    again on a worker, which stages the same names), or right after it wrote a new
    partition's compacted file (``staged-created``: the task runs again, its staged rows
    still there, finds the file written and writes the same records as a part file, which
    the compaction after folds in). The import ends as one that nothing interrupted."""
    from web_index.archive import import_warcs

    paths = _warc_files(tmp_path, seed=12)
    here, there = seaweed.new_store(), seaweed.new_store()
    with WebIndex(here) as index:
        import_warcs(index, paths)
    pids = cluster.run(os.getpid)
    victim = sorted(pids)[0]
    cluster.run(_set_env, "WEB_INDEX_CRASH_AT", crash_at, workers=[victim])
    with WebIndex(there) as index:
        import_warcs(index, paths, scheduler=cluster.scheduler.address)
    cluster.wait_for_workers(2, timeout=180)
    # It died; its nanny started another, which runs without the profiler too.
    assert sorted(cluster.run(os.getpid).values()) != sorted(pids.values())
    assert not any(_profiling(cluster).values())
    assert _contents(there) == _contents(here)
    assert _staged_left(there) == []
    with WebIndex(there, read_only=True) as index:
        assert all(p.compacted and p.part_files == 0 for p in index.stats().partitions)


def test_a_broken_file_stops_itself_only_and_is_raised_after_the_commit(
    cluster: Any, seaweed: SeaweedFS, tmp_path: Path
) -> None:
    from web_index.archive import import_warcs
    from web_index.errors import WarcError

    paths = _warc_files(tmp_path, seed=13, broken=True)
    here, there = seaweed.new_store(), seaweed.new_store()
    with WebIndex(here) as index:
        skipping = import_warcs(index, paths, skip_invalid=True)  # the broken record was the last
    with WebIndex(there) as index, pytest.raises(WarcError, match=r"2\.warc\.gz"):
        import_warcs(index, paths, scheduler=cluster.scheduler.address)
    assert len(skipping.problems) == 1
    assert _contents(there) == _contents(here)
    assert _staged_left(there) == []


def test_import_warc_scheduler_on_the_command_line(cluster: Any, seaweed: SeaweedFS, tmp_path: Path) -> None:
    paths = _warc_files(tmp_path, seed=14)
    here, there = seaweed.new_store(), seaweed.new_store()
    args = [str(p) for p in paths]
    assert runner.invoke(app, ["import-warc", *args, "--store", here]).exit_code == 0
    with distributed.get_task_stream(cluster) as tasks:
        result = runner.invoke(
            app, ["import-warc", *args, "--store", there, "--scheduler", cluster.scheduler.address, "--json"]
        )
    assert result.exit_code == 0, result.output
    assert tasks.data
    assert _contents(there) == _contents(here)


def test_a_dead_imports_staging_folder_is_removed_by_its_own_machine_only(tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    from web_index.storage import open_backend

    code = "import os; print(os.getpid())"
    dead = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    with WebIndex(tmp_path / "s"):
        pass
    tmp = tmp_path / "s" / "_tmp"
    for name, host in (("mine", socket.gethostname()), ("theirs", "another-machine")):
        staged = tmp / f"{pid}-{name}" / "0" / "get" / "2024" / "05"
        staged.mkdir(parents=True)
        (staged / "example.com.parquet").write_bytes(b"x")
        (tmp / f"{pid}-{name}" / "owner").write_text(host)
    (tmp / f"{os.getpid()}-alive").mkdir()  # this process's: alive
    (tmp / f"{os.getpid()}-alive" / "owner").write_text(socket.gethostname())
    assert open_backend(str(tmp_path / "s")).remove_orphans() == 1
    assert sorted(p.name for p in tmp.iterdir()) == sorted([f"{pid}-theirs", f"{os.getpid()}-alive"])


def test_an_import_whose_file_cannot_be_read_leaves_the_store_as_it_was(
    cluster: Any, seaweed: SeaweedFS, tmp_path: Path
) -> None:
    from web_index.archive import import_warcs

    paths = _warc_files(tmp_path, seed=15)
    there = seaweed.new_store()
    with WebIndex(there) as index:
        before = _contents(there)
        with pytest.raises(FileNotFoundError, match=r"gone\.warc\.gz"):
            import_warcs(index, [*paths, tmp_path / "gone.warc.gz"], scheduler=cluster.scheduler.address)
    assert _contents(there) == before  # the other files' staged partitions were never named
    assert _staged_left(there) == []


def test_a_wacz_import_on_the_cluster_reads_the_members_in_place(
    cluster: Any, seaweed: SeaweedFS, tmp_path: Path
) -> None:
    from web_index.archive import export_wacz, import_wacz, import_warcs

    paths = _warc_files(tmp_path, seed=16)
    source, here, there = seaweed.new_store(), seaweed.new_store(), seaweed.new_store()
    with WebIndex(source) as index:
        import_warcs(index, paths)
        export_wacz(index, tmp_path / "crawl.wacz", max_file_bytes=20_000)  # several WARC members
    with WebIndex(here) as index:
        local = import_wacz(index, [tmp_path / "crawl.wacz"])
    with WebIndex(there) as index:
        spread = import_wacz(index, [tmp_path / "crawl.wacz"], scheduler=cluster.scheduler.address)
    assert local.files > 1 and _report(spread) == _report(local)
    assert _contents(there) == _contents(here)
