"""Scale-out on Dask (docs/scale.md): a real two-process LocalCluster against a
SeaweedFS store answers batches and compacts exactly as one process does, and
survives a worker killed mid-batch. One cluster and one store for the module."""

from __future__ import annotations

import functools
import os
import random
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tests.factories import T0, attempt
from tests.servers import SeaweedFS, free_port, missing
from web_index import FlushPolicy, WebIndex
from web_index.cli import app
from web_index.errors import MissingExtraError
from web_index.models import PageKey, Query, RecordType, SimplePageQuery, TimeAwarePageQuery, write_queries

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
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
        ) as local,
        distributed.Client(local, set_as_default=False) as client,
    ):
        yield client


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


def _answer_or_die(location: str, marks: str, queries: list[Query]) -> list[Any]:
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
    return _on_cluster._answer(location, None, queries)


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
