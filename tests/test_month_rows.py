"""A bulk load's month indexes built from the rows its commit made of each file as it
wrote it (``storage/indexes/_month_rows.py``): the very index a build reading the files
back writes, and no file read back but those it made no rows of."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.models import RecordType
from web_index.storage import _load as load_module
from web_index.storage.backends import LocalBackend
from web_index.storage.indexes import _month_build, _month_rows, build_month_index

_IGNORED = {b"web_index.index.listed", b"web_index.checksum"}  # when and how it was listed


def _month_indexes(store: Path) -> dict[str, tuple[pa.Table, dict[bytes, bytes]]]:
    found = {}
    for path in sorted((store / "_index").rglob("*.parquet")):
        meta = pq.read_metadata(path).metadata or {}
        found[str(path.relative_to(store))] = (
            pq.read_table(path),
            {k: v for k, v in meta.items() if k not in _IGNORED},
        )
    return found


def _rebuilt_from_files(store: Path) -> dict[str, tuple[pa.Table, dict[bytes, bytes]]]:
    backend = LocalBackend(store)
    for path in sorted((store / "_index").rglob("*.parquet")):
        type, year, month = path.relative_to(store / "_index").with_suffix("").parts
        path.unlink()
        path.with_suffix(".keys").unlink()
        assert build_month_index(backend, RecordType(type), int(year), int(month))
    return _month_indexes(store)


def _items(records: list[tuple[Any, ...]], seed: int) -> tuple[list[Any], list[str]]:
    rng = random.Random(seed)
    items, ids = [], []
    for domain, path, month, method, state, hops, *again in records:
        url = f"https://{domain}/p{path}"
        when = T0 + timedelta(days=40 * month, seconds=rng.randrange(86400))
        items.append(attempt(url, when, method=method, state=state, hops=hops, calibre=rng.choice([10, 20])))
        # A request id given to two attempts (a load takes the ids it is given): one record.
        same = bool(again and again[0] and ids)
        ids.append(ids[-1] if same else str(uuid.UUID(int=rng.getrandbits(128), version=4)))
    return items, ids


records = st.lists(
    st.tuples(
        st.sampled_from(["a.example.com", "b.example.org", "www.c.example.net"]),
        st.integers(0, 4),  # path: a URL fetched again
        st.integers(0, 2),  # month
        st.sampled_from(["get", "get", "head"]),
        st.sampled_from(["success", "success", "timeout"]),
        st.integers(1, 3),  # redirect hops: a record of several rows
        st.sampled_from([False] * 9 + [True]),  # the request id of the attempt before
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=25, deadline=None)
@given(
    loads=st.lists(records, min_size=1, max_size=2),
    jobs=st.sampled_from([1, 2]),
    commit_bytes=st.sampled_from([1, 1 << 30]),
    inline=st.sampled_from([0, 64 << 10]),
    seed=st.integers(0, 2**32),
)
def test_a_loads_month_indexes_are_the_ones_its_files_give(
    tmp_path_factory: pytest.TempPathFactory,
    loads: list[list[tuple[Any, ...]]],
    jobs: int,
    commit_bytes: int,
    inline: int,
    seed: int,
) -> None:
    """Chains of several rows, metadata types, months, commits of a chunk each (built in a
    process of their own) or one, rows sent inline or in a spool file of their own (this
    process's commits only: the workers are not patched), a request id given twice, a
    second load adding parts: the month indexes equal, row for row and cover for cover,
    those built from the files."""
    store = tmp_path_factory.mktemp("rows") / "s"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_month_rows, "_INLINE_BYTES", inline)
        with WebIndex(store) as index:
            for n, load_records in enumerate(loads):
                items, ids = _items(load_records, seed + n)
                with index.bulk_load(jobs=jobs, chunk=10, commit_bytes=commit_bytes) as load:
                    load.add(items, request_ids=ids)
    built = _month_indexes(store)
    assert built and built == _rebuilt_from_files(store)
    assert list((store / "_tmp").iterdir()) == []  # the rows' spool files removed


@pytest.mark.parametrize("merged", [False, True])
@pytest.mark.parametrize("jobs", [1, 2])
def test_the_files_a_load_made_rows_of_are_not_read_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int, merged: bool
) -> None:
    """A first load's months are built from the rows it made, reading no file; a partition
    merged as read (past ``GATHER_MAX``) has none made, and is read back; a file the rows
    no longer describe (compacted again since) is read back."""
    read: list[str] = []
    given: list[Any] = []
    real_read, real_build = _month_build.iter_records, _month_build.build_month_index

    def spied_read(backend: Any, type: RecordType, listing: dict[str, Any], *args: Any) -> Any:
        read.extend(f.name for files in listing.values() for f in files)
        return real_read(backend, type, listing, *args)

    def spied_build(*args: Any) -> bool:
        given.append(args[4])
        return real_build(*args)

    monkeypatch.setattr(_month_build, "iter_records", spied_read)
    monkeypatch.setattr(_month_build, "build_month_index", spied_build)
    monkeypatch.setattr(_month_rows.MonthRows, "remove", lambda self: None)  # kept, to be given again
    if merged:
        monkeypatch.setattr(load_module, "GATHER_MAX", 0)  # a load's workers take it from its commit
    store = tmp_path / "s"
    records = [("a.example.com", p, m, "get", "success", 2) for p in range(5) for m in range(2)]
    items, ids = _items(records, 1)
    with WebIndex(store) as index:
        with index.bulk_load(jobs=jobs) as load:
            load.add(items, request_ids=ids)
        stored = sorted(p.name for p in store.glob("get*/*/*/*.parquet"))
        assert len(stored) == 4  # get and get-metadata, two months
        if merged:
            assert sorted(read) == stored and given == [None] * 4
            return
        assert read == [] and len(given) == 4 and None not in given
        index.insert_many(items[:1], request_ids=[str(uuid.uuid4())])
        index.flush()
        index.compact()  # the month's files compacted again: a new version of each
    read.clear()
    built = _month_indexes(store)
    when = items[0][2]
    (store / "_index" / "get" / f"{when:%Y/%m}.parquet").unlink()
    (store / "_index" / "get" / f"{when:%Y/%m}.keys").unlink()
    assert real_build(LocalBackend(store), RecordType.GET, when.year, when.month, given[0])
    assert read == ["example.com.parquet"]
    assert _month_indexes(store) == built


def test_rows_are_made_of_canonical_request_ids_only(tmp_path: Path) -> None:
    """A request id the index's 16 bytes cannot give back exactly gets no rows (the build
    reads such a file, and finds it out), nor does a table whose ids are not 36 characters."""
    items, ids = _items([("a.example.com", 1, 0, "get", "success", 2)], 3)
    with WebIndex(tmp_path / "s") as index:
        index.insert_many(items, request_ids=ids)
        index.flush()
    path = next((tmp_path / "s").glob("get/*/*/*.parquet"))
    table = pq.read_table(path)
    backend = LocalBackend(tmp_path / "s")
    made = _month_rows.file_rows(backend, RecordType.GET, table, 1, "v")
    assert made is not None and made.records == 1 and made.path is None
    column = table.schema.get_field_index("request_id")
    for rid in (ids[0].upper(), ids[0].replace("-", ""), ids[0][:-1] + "g"):
        changed = table.set_column(column, "request_id", pa.array([rid] * table.num_rows))
        assert _month_rows.file_rows(backend, RecordType.GET, changed, 1, "v") is None


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_request_id_given_to_two_attempts_is_read_back(tmp_path: Path, jobs: int) -> None:
    """One request id on rows that are not side by side (the first attempt's second hop,
    then another URL's only response: a load takes the ids it is given): the build groups a
    file's rows by request id, so such a file gets no rows made, and is read back."""
    first, other = str(uuid.uuid4()), str(uuid.uuid4())
    items = [
        attempt("https://a.example.com/p1", T0, hops=2),
        attempt("https://a.example.com/p2", T0 + timedelta(seconds=1)),
        attempt("https://a.example.com/p3", T0 + timedelta(seconds=2)),
    ]
    with WebIndex(tmp_path / "s") as index, index.bulk_load(jobs=jobs) as load:
        load.add(items, request_ids=[first, other, first])
    built = _month_indexes(tmp_path / "s")
    assert built == _rebuilt_from_files(tmp_path / "s")
