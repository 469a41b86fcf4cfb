"""The month key index: used when it covers a partition, never trusted blindly.

Each test compares the answers of a store whose index is in some state
(fresh, stale, tampered with, corrupt, missing) with the answers of the same
store read without any index; they must be equal, whatever the index says.
"""

from __future__ import annotations

import base64
import random
import shutil
import time
import uuid
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.factories import T0, attempt, rewrite_store_file
from web_index import FlushPolicy, WebIndex, WriteOptions
from web_index.models import PageKey, Query, RecordType, SimplePageQuery, TimeAwarePageQuery
from web_index.query import _find, _results
from web_index.storage._files import list_partition_files
from web_index.storage._schema import TS_COLUMN
from web_index.storage._store import Store
from web_index.storage.backends import LocalBackend
from web_index.storage.indexes import _month as _index
from web_index.storage.indexes import _month_build as _build
from web_index.storage.indexes import _month_format as _format
from web_index.storage.indexes import _month_open as _open

DOMAINS = ["alpha.com", "beta.org", "gamma.net", "delta.io"]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _populate(root: Path, seed: int, n: int = 120) -> list[PageKey]:
    rng = random.Random(seed)
    items = []
    for k in range(n):
        domain = rng.choice(DOMAINS)
        url = f"https://www.{domain}/p/{rng.randrange(25)}"
        ts = T0 + timedelta(days=rng.randrange(80), seconds=k)
        state = "success" if rng.random() < 0.85 else "timeout"
        method = "head" if rng.random() < 0.15 else "get"
        items.append(
            attempt(
                url,
                ts,
                method=method,
                state=state,
                calibre=rng.choice([10, 30, 60]),
                hops=rng.choice([1, 1, 2]),
            )
        )
    policy = FlushPolicy(max_rows=17, compact_parts=0)
    with WebIndex(root, policy=policy) as idx:
        keys = idx.insert_many(items)
    return keys


def _queries(keys: list[PageKey], seed: int) -> list[Query]:
    rng = random.Random(seed)
    out: list[Query] = []
    for key in keys:
        out.append(key)
        for type in ("get", "head", "get-metadata"):
            out.append(SimplePageQuery(type=type, url=key.url, calibre=rng.choice([None, 30])))
        out.append(
            TimeAwarePageQuery(
                type="get",
                url=key.url,
                timestamp=key.timestamp + timedelta(days=rng.randrange(-20, 20)),
                not_before=key.timestamp - timedelta(days=30),
                not_after=key.timestamp + timedelta(days=30),
            )
        )
    out.append(SimplePageQuery(type="get", url="https://www.alpha.com/never"))
    return out


def _describe(results: list[Any]) -> list[Any]:
    out = []
    for r in results:
        if r is None:
            out.append(None)
        elif hasattr(r, "responses"):
            out.append((r.request_id, [(x.request_url, x.data, x.status_code) for x in r.responses]))
        else:
            out.append((r.request_id, r.state))
    return out


def _answers(root: Path, queries: list[Query]) -> tuple[list[Any], list[bool]]:
    with WebIndex(root, read_only=True) as idx:
        return _describe(idx.query(queries)), idx.presence(queries)


def _without_index(root: Path, tmp_path: Path, queries: list[Query]) -> tuple[list[Any], list[bool]]:
    plain = tmp_path / "plain"
    shutil.copytree(root, plain)
    shutil.rmtree(plain / "_index", ignore_errors=True)
    return _answers(plain, queries)


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, list[Query]]:
    root = tmp_path / "store"
    keys = _populate(root, seed=1)
    with WebIndex(root) as idx:
        idx.flush()
        idx.compact()
    return root, _queries(keys, seed=2)


def test_compaction_writes_an_index_per_type_and_month(store: tuple[Path, list[Query]]) -> None:
    root, _ = store
    written = sorted(p.relative_to(root / "_index").as_posix() for p in (root / "_index").rglob("*.parquet"))
    months = sorted(
        f"{t.value}/{p.parent.name}/{p.name}"
        for t in RecordType
        for p in (root / t.value).glob("*/*")
        if any(p.iterdir())
    )
    assert [w.removesuffix(".parquet") for w in written] == months
    # One index row per stored record of the month, pointing at its rows.
    for path in (root / "_index" / "get-metadata").rglob("*.parquet"):
        year, month = path.parent.name, path.stem
        stored = sum(pq.read_metadata(f).num_rows for f in (root / "get-metadata" / year / month).iterdir())
        assert pq.read_metadata(path).num_rows == stored


def test_indexed_answers_equal_unindexed_and_skip_partition_reads(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, queries = store
    expected = _without_index(root, tmp_path, queries)
    calls: list[Any] = []
    original = _find._read_partition
    monkeypatch.setattr(_find, "_read_partition", lambda *a: calls.append(a) or original(*a))
    assert _answers(root, queries) == expected
    assert calls == []  # every partition was covered by its month's index
    assert sum(1 for a in expected[0] if a) > 50


@pytest.mark.parametrize("small_file", [0, 1 << 30])
def test_both_file_readers_give_the_same_answers(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_file: int
) -> None:
    root, queries = store
    expected = _without_index(root, tmp_path, queries)
    monkeypatch.setattr(_results, "_SMALL_FILE", small_file)
    assert _answers(root, queries) == expected


@pytest.mark.parametrize("budget", [1, 1 << 30])
def test_rows_read_from_many_row_groups_in_bounded_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int
) -> None:
    # Files of many small row groups, every file read by row group, and the
    # decoded groups turned into rows after every group (budget 1) or once.
    root = tmp_path / "store"
    rng = random.Random(5)
    items = [
        attempt(
            f"https://www.{rng.choice(DOMAINS)}/p/{k}",
            T0 + timedelta(days=rng.randrange(20), seconds=k),
            hops=rng.choice([1, 1, 2]),
        )
        for k in range(150)
    ]
    options = WriteOptions(row_group_rows=3, body_row_group_rows=3, group_min_bytes=0)
    with WebIndex(root, write_options=options, policy=FlushPolicy(max_rows=1 << 20, compact_parts=0)) as idx:
        keys = idx.insert_many(items)
        idx.flush()
        idx.compact()
    assert max(pq.read_metadata(f).num_rows for f in (root / "get").rglob("*.parquet")) > 20
    queries = _queries(keys, seed=6)
    expected = _without_index(root, tmp_path, queries)
    monkeypatch.setattr(_results, "_SMALL_FILE", 0)
    monkeypatch.setattr(_results, "_DECODED_BUDGET", budget)
    assert _answers(root, queries) == expected
    assert sum(1 for a in expected[0] if a) > 150


def test_new_parts_after_the_index_are_read_from_their_files(
    store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    root, queries = store
    more = _populate(root, seed=3, n=40)  # flushed into part files the index does not cover
    queries = queries + _queries(more, seed=4)
    assert _answers(root, queries) == _without_index(root, tmp_path, queries)


@pytest.mark.parametrize("small_file", [0, 1 << 30])
@pytest.mark.parametrize("column", ["row", "rows"])
def test_a_tampered_index_is_caught_by_the_row_check(
    store: tuple[Path, list[Query]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    column: str,
    small_file: int,
) -> None:
    root, queries = store
    expected = _without_index(root, tmp_path, queries)
    monkeypatch.setattr(_results, "_SMALL_FILE", small_file)
    # Same covers (so every partition looks covered) but every pointer wrong:
    # other rows, or chains one row too long. (An index whose covers match the files is trusted
    # for which records exist and when: that is what the covers check is for.)
    for path in (root / "_index").rglob("*.parquet"):
        table = pq.read_table(path)
        values = table.column(column).to_pylist()
        values = [v + 1 for v in values]
        i = table.schema.get_field_index(column)
        table = table.set_column(i, column, pa.array(values, type=table.schema.field(i).type))
        rewrite_store_file(path, table)
    assert _answers(root, queries) == expected


@pytest.mark.parametrize("damage", ["garbage", "truncated", "deleted"])
def test_a_damaged_or_missing_index_costs_speed_not_answers(
    store: tuple[Path, list[Query]], tmp_path: Path, damage: str
) -> None:
    root, queries = store
    expected = _without_index(root, tmp_path, queries)
    for path in (root / "_index").rglob("*.parquet"):
        if damage == "garbage":
            path.write_bytes(b"not parquet at all" * 10)
        elif damage == "truncated":
            path.write_bytes(path.read_bytes()[:-40])
        else:
            path.unlink()
    assert _answers(root, queries) == expected


def test_an_incremental_rebuild_equals_a_fresh_one(store: tuple[Path, list[Query]], tmp_path: Path) -> None:
    root, _ = store
    _populate(root, seed=5, n=30)
    with WebIndex(root) as idx:
        idx.flush()
        idx.compact()  # rebuilds from the old index, rereading changed domains only
    incremental = {p.relative_to(root): _rows(p) for p in (root / "_index").rglob("*.parquet")}
    shutil.rmtree(root / "_index")
    _open._OPEN.clear()
    with WebIndex(root) as idx:
        idx.compact()
    fresh = {p.relative_to(root): _rows(p) for p in (root / "_index").rglob("*.parquet")}
    assert incremental == fresh


def test_small_files_read_in_runs_of_any_size_give_the_same_index(
    store: tuple[Path, list[Query]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build reads small files as one frame a run of them (``_BATCH_BYTES``, so that a
    month of thousands is not one frame): a file a run builds what one run of all does."""
    root, _ = store
    assert any(p.stat().st_size <= _build._SMALL_FILE for p in (root / "get-metadata").rglob("*.parquet"))
    built = {p.relative_to(root): _rows(p) for p in (root / "_index").rglob("*.parquet")}
    monkeypatch.setattr(_build, "_BATCH_BYTES", 1)
    shutil.rmtree(root / "_index")
    _open._OPEN.clear()
    with WebIndex(root) as idx:
        idx.compact()
    assert {p.relative_to(root): _rows(p) for p in (root / "_index").rglob("*.parquet")} == built


def _rows(path: Path) -> list[tuple[Any, ...]]:
    # File numbers are positions in the covers list, which both builds order alike.
    table = pq.read_table(path)
    return sorted(zip(*(table.column(n).to_pylist() for n in table.schema.names), strict=True))


def test_an_unchanged_month_is_not_rewritten(store: tuple[Path, list[Query]]) -> None:
    root, _ = store
    before = {p: p.stat().st_mtime_ns for p in (root / "_index").rglob("*.parquet")}
    with WebIndex(root) as idx:
        idx.compact()
    assert {p: p.stat().st_mtime_ns for p in (root / "_index").rglob("*.parquet")} == before


@pytest.mark.parametrize(("budget", "rows_a_step"), [(0, 64), (1 << 30, 10**9), (1 << 30, 0)])
def test_one_query_at_a_time_equals_a_batch_through_every_lookup_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, budget: int, rows_a_step: int
) -> None:
    # Small index row groups, so that a single query reads a few of them; after
    # a few such reads the whole index is kept in memory, if the budget allows.
    monkeypatch.setattr(_format, "INDEX_ROW_GROUP", 8)
    root = tmp_path / "store"
    keys = _populate(root, seed=6, n=200)
    with WebIndex(root) as idx:
        idx.flush()
        idx.compact()
    queries = _queries(keys, seed=7)
    expected = _without_index(root, tmp_path, queries)
    for keys_file in root.rglob("*.keys"):  # the Parquet index's own lookups (test_month_keys: the other)
        keys_file.unlink()
    monkeypatch.setattr(_open, "_OPEN", {})
    monkeypatch.setattr(_index, "_TABLE_BUDGET", budget)
    monkeypatch.setattr(_index, "_TABLE_BYTES", 0)
    monkeypatch.setattr(_index, "_ROWS_A_STEP", rows_a_step)  # kept: filtered (10**9), bisected (0)
    with WebIndex(root, read_only=True) as idx:
        answers = [_describe(idx.query([q]))[0] for q in queries]
        presence = [idx.presence([q])[0] for q in queries]
    assert (answers, presence) == expected
    opened = list(_open._OPEN.values())
    assert any(len(ix._groups) > 4 and ix._point_reads > 1 for ix in opened)  # row-group lookups ran
    kept = [ix for ix in opened if ix._table is not None]
    assert bool(kept) == bool(budget)
    assert all(ix._keys is not None for ix in kept)  # written in key order: bisectable
    assert sum(ix._table.nbytes for ix in kept if ix._table is not None) == _index._TABLE_BYTES


def test_a_kept_index_out_of_key_order_is_filtered_not_bisected(
    store: tuple[Path, list[Query]], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = store
    monkeypatch.setattr(_open, "_OPEN", {})
    monkeypatch.setattr(_index, "_TABLE_BYTES", 0)
    monkeypatch.setattr(_index, "_ROWS_A_STEP", 0)  # bisect whenever it may
    first = min((root / "_index" / "get").rglob("*.parquet"))  # get/<yyyy>/<mm>.parquet
    ix = _open.open_month_index(LocalBackend(root), RecordType.GET, int(first.parent.name), int(first.stem))
    assert ix is not None
    rows = ix.handle.read(columns=list(_index.LOOKUP_COLUMNS))
    keys = {h: f"key{n}" for n, h in enumerate(rows.column("key_hash").to_pylist()[:5])}
    assert ix._keep(rows) and ix._keys is not None
    in_order = sorted(ix.lookup(keys), key=lambda hit: (hit.url_key, hit.request_id))
    assert len(in_order) >= len(keys)
    _open.forget_month_index(LocalBackend(root), RecordType.GET, int(first.parent.name), int(first.stem))
    ix = _open.open_month_index(LocalBackend(root), RecordType.GET, int(first.parent.name), int(first.stem))
    assert ix is not None
    assert ix._keep(rows.take(list(range(rows.num_rows - 1, -1, -1))))  # reversed: as a hand-made one
    assert ix._keys is None
    assert sorted(ix.lookup(keys), key=lambda hit: (hit.url_key, hit.request_id)) == in_order


def test_a_stamped_index_spares_the_month_listing_until_the_folder_changes(
    store: tuple[Path, list[Query]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, queries = store
    before = {p: _rows(p) for p in (root / "_index").rglob("*.parquet")}
    time.sleep(2.1)  # the month folders are no longer "racy" (see LocalBackend.folder_version)
    with WebIndex(root) as idx:
        idx.compact()  # nothing to compact: stamps the indexes, rows unchanged
    assert {p: _rows(p) for p in (root / "_index").rglob("*.parquet")} == before
    backend = LocalBackend(root)
    for path in (root / "_index").rglob("*.parquet"):
        assert b"web_index.index.listed" in (pq.read_metadata(path).metadata or {})
        type, year, month = RecordType(path.parent.parent.name), int(path.parent.name), int(path.stem)
        index = _open.open_month_index(backend, type, year, month)
        assert index is not None
        # What the index says the folder holds is what a listing finds.
        listed = list_partition_files(backend, index.folder, type, year, month)
        covered = index.current_listing(backend)
        assert covered is not None
        assert {d: sorted(f) for d, f in covered.items()} == {d: sorted(f) for d, f in listed.items()}

    expected = _without_index(root, tmp_path / "a", queries)
    listings: list[Any] = []
    original = Store.month_files
    monkeypatch.setattr(Store, "month_files", lambda *a: listings.append(a) or original(*a))
    assert _answers(root, queries) == expected
    assert listings == []

    more = _populate(root, seed=3, n=40)
    with WebIndex(root) as idx:
        idx.flush()  # new part files: the folders change
    queries = queries + _queries(more, seed=4)
    assert _answers(root, queries) == _without_index(root, tmp_path / "b", queries)
    assert listings != []


def test_index_rows_are_the_stored_records_under_their_key_hashes(store: tuple[Path, list[Query]]) -> None:
    root, _ = store
    for path in (root / "_index").rglob("*.parquet"):
        type = RecordType(path.parent.parent.name)
        stored: set[tuple[bytes, int, bytes]] = set()
        for f in (root / type.value / path.parent.name / path.stem).iterdir():
            table = pq.read_table(f, columns=["url_key", TS_COLUMN[type], "request_id"])
            for key, ts, rid in zip(*(c.to_pylist() for c in table.columns), strict=True):
                ts_us = (ts - _EPOCH) // timedelta(microseconds=1)
                stored.add((_format.key_hash(key), ts_us, uuid.UUID(rid).bytes))
        table = pq.read_table(path)
        rows = list(
            zip(*(table.column(n).to_pylist() for n in ("key_hash", "ts_us", "request_id")), strict=True)
        )
        assert set(rows) == stored and len(rows) == len(stored)
        assert rows == sorted(rows)  # sorted by hash: a key's records are together


def test_a_month_with_a_request_id_the_index_cannot_hold_gets_no_index(
    store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    root, queries = store
    expected = _without_index(root, tmp_path, queries)
    # A hand-made file (the store only writes lower-case UUIDs): its ids in upper case.
    target = next(p for p in sorted((root / "get-metadata").rglob("*.parquet")))
    table = pq.read_table(target)
    i = table.schema.get_field_index("request_id")
    upper = pa.array([r.upper() for r in table.column(i).to_pylist()], type=table.schema.field(i).type)
    rewrite_store_file(target, table.set_column(i, "request_id", upper))
    index = root / "_index" / "get-metadata" / target.parent.parent.name / f"{target.parent.name}.parquet"
    index.unlink()
    _open._OPEN.clear()
    with WebIndex(root) as idx:
        idx.compact()
    assert not index.exists()
    queries = [
        *queries,
        *[
            PageKey(type="get-metadata", url=k.url, timestamp=k.timestamp, request_id=k.request_id.upper())
            for k in queries
            if isinstance(k, PageKey)
        ],
    ]
    expected = _without_index(root, tmp_path / "b", queries)
    assert _answers(root, queries) == expected
    assert any(expected[1][len(queries) // 2 :])  # some upper-case keys found their records


def test_an_index_of_an_older_format_is_ignored_reported_and_rebuilt(store: tuple[Path, list[Query]]) -> None:
    root, queries = store
    expected = _answers(root, queries)
    paths = sorted((root / "_index").rglob("*.parquet"))
    for path in paths:
        table = pq.read_table(path)
        meta = dict(table.schema.metadata or {})
        meta[b"web_index.index.version"] = b"2"
        rewrite_store_file(path, table.replace_schema_metadata(meta))
    _open._OPEN.clear()
    assert _answers(root, queries) == expected
    with WebIndex(root) as idx:
        notes = [f.message for f in idx.verify().notes]
        said = "month index of format 2, not " + _format.VERSION.decode()
        assert sum(said in n for n in notes) == len(paths)
        idx.compact()
        assert not any("month index" in f.message for f in idx.verify().notes)
    assert all(pq.read_metadata(p).metadata[b"web_index.index.version"] == _format.VERSION for p in paths)


def test_covers_in_any_order_and_foreign_names_give_the_same_answers(
    store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    root, queries = store
    expected = _without_index(root, tmp_path, queries)
    time.sleep(2.1)  # old enough folders: compact() stamps the indexes, so queries use their listings
    with WebIndex(root) as idx:
        idx.compact()
    rng = random.Random(9)
    for path in (root / "_index").rglob("*.parquet"):
        # Shuffle the covers list (a build writes it sorted by domain), keep
        # the rows pointing at the same files, and add a name no store file has.
        table = pq.read_table(path)
        meta = dict(table.schema.metadata or {})
        covers = _format.decode_covers(zlib.decompress(base64.b64decode(meta[_format.COVERS_KEY])))
        order = list(range(len(covers)))
        rng.shuffle(order)
        foreign = _format.Covered("not-a-store-file.txt", 3, covers[0].domain, "1-1", 0)
        shuffled = [covers[n] for n in order] + [foreign]
        where = {old: new for new, old in enumerate(order)}
        i = table.schema.get_field_index("file_no")
        numbers = pa.array([where[n] for n in table.column(i).to_pylist()], type=pa.uint32())
        meta[_format.COVERS_KEY] = base64.b64encode(zlib.compress(_format.encode_covers(shuffled)))
        rewrite_store_file(path, table.set_column(i, "file_no", numbers).replace_schema_metadata(meta))
    _open._OPEN.clear()
    assert _answers(root, queries) == expected
    backend = LocalBackend(root)
    for path in (root / "_index").rglob("*.parquet"):
        type, year, month = RecordType(path.parent.parent.name), int(path.parent.name), int(path.stem)
        index = _open.open_month_index(backend, type, year, month)
        assert index is not None
        covered = index.current_listing(backend)
        assert covered is not None  # the folder is unchanged: its stamp still holds
        listed = list_partition_files(backend, index.folder, type, year, month)
        assert {d: sorted(f) for d, f in covered.items()} == {d: sorted(f) for d, f in listed.items()}
