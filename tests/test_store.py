"""Store behaviour: small files, visibility across processes, concurrency, corruption."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.crashcheck import ROOT, parse_keys
from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex, read_only
from web_index.errors import StoreError
from web_index.models import Page, PageKey, RecordType, SimplePageQuery, TimeAwarePageQuery
from web_index.storage._layout import parse_file_name


def files_of(store: Path, type: str = "get") -> list[Path]:
    return sorted((store / type).rglob("*.parquet"))


def test_ten_thousand_single_inserts_do_not_make_ten_thousand_files(store_path: Path) -> None:
    with WebIndex(store_path, durable=False) as index:
        for n in range(10_000):
            index.insert(*attempt(f"https://one.example.com/p{n % 500}", T0 + timedelta(seconds=n)))
        assert files_of(store_path) == []  # all in the buffer, yet visible:
        assert index.presence([SimplePageQuery(url="https://one.example.com/p7")]) == [True]
        index.flush()
        assert len(files_of(store_path)) == 1 and len(files_of(store_path, "get-metadata")) == 1
        assert index.stats().records == 20_000 and index.stats().buffered_attempts == 0


def test_size_threshold_flushes_and_part_count_compacts(store_path: Path) -> None:
    policy = FlushPolicy(max_rows=10, compact_parts=4)
    url = "https://a.example.com/x"
    with WebIndex(store_path, policy=policy) as index:
        keys = index.insert_many([attempt(url, T0 + timedelta(seconds=n)) for n in range(9)])
        assert files_of(store_path) == []  # below the threshold: still buffered
        keys.append(index.insert(*attempt(url, T0)))
        assert len(files_of(store_path)) == 1  # the 10th row flushed the partition
        for n in range(2, 4):
            keys += index.insert_many([attempt(url, T0 + timedelta(seconds=s)) for s in range(10)])
            assert len(files_of(store_path)) == n
        keys += index.insert_many([attempt(url, T0 + timedelta(seconds=s)) for s in range(10)])
        names = [p.name for p in files_of(store_path)]
        assert names == ["example.com.parquet"], names  # the 4th part triggered compaction
        assert all(r is not None for r in index.query(keys))


def test_inserts_are_visible_at_once_to_other_processes(store_path: Path) -> None:
    with WebIndex(store_path) as index:
        key = index.insert(*attempt("https://a.example.com/x"))
        code = (
            "from web_index.read_only import query; from web_index.models import SimplePageQuery;"
            "r = query([SimplePageQuery(url='https://a.example.com/x')]);"
            "print(r[0].request_id if r[0] else None)"
        )
        out = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "WEB_INDEX_STORE": str(store_path)},
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        assert out.stdout.strip() == key.request_id


def test_read_only_default_store_comes_from_the_environment(
    store_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with WebIndex(store_path) as index:
        index.insert(*attempt("https://a.example.com/x"))
    monkeypatch.setenv("WEB_INDEX_STORE", str(store_path))
    assert read_only.default_store() == str(store_path)
    assert read_only.presence([SimplePageQuery(url="https://a.example.com/x")]) == [True]
    monkeypatch.delenv("WEB_INDEX_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert read_only.default_store() == str(tmp_path / "xdg" / "web-index" / "store")
    with pytest.raises(StoreError, match="no store"):
        read_only.query([SimplePageQuery(url="https://a.example.com/x")])


def test_async_api(index: WebIndex, store_path: Path) -> None:
    key = index.insert(*attempt("https://a.example.com/x"))
    queries = [key, SimplePageQuery(url="https://nope.example.com/")]

    async def run() -> tuple[list[object], list[bool], list[object]]:
        return (
            await index.async_query(queries),
            await index.async_presence(queries),
            await read_only.async_query(queries, store=store_path),
        )

    got, present, ro = asyncio.run(run())
    assert [g is not None for g in got] == present == [True, False]
    assert [getattr(r, "request_id", None) for r in ro] == [key.request_id, None]


def test_presence_never_reads_bodies(index: WebIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = index.insert_many([attempt(f"https://a.example.com/{n}") for n in range(5)])
    index.flush()
    index.insert(*attempt("https://a.example.com/buffered"))
    import web_index.query._engine as engine
    import web_index.query._results as results

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("presence read a body")

    monkeypatch.setattr(engine, "load_results", boom)
    monkeypatch.setattr(results, "_read_rows", boom)
    queries = [
        *keys,
        SimplePageQuery(url="https://a.example.com/buffered"),
        SimplePageQuery(url="https://x.com/"),
    ]
    assert index.presence(queries) == [True] * 6 + [False]


def test_results_in_input_order_and_duplicates_answered_once(index: WebIndex) -> None:
    a = index.insert(*attempt("https://a.example.com/a"))
    b = index.insert(*attempt("https://b.example.com/b"))
    miss = SimplePageQuery(url="https://c.example.com/")
    results = index.query([b, miss, a, b, a])
    ids = [getattr(r, "request_id", None) for r in results]
    assert ids == [b.request_id, None, a.request_id, b.request_id, a.request_id]
    assert results[0] is results[3]


def test_corrupt_file_is_an_error_not_an_empty_answer(store_path: Path) -> None:
    with WebIndex(store_path) as index:
        key = index.insert(*attempt("https://a.example.com/x"))
        index.flush()
        part = files_of(store_path)[0]
        part.write_bytes(b"PAR1 this is not parquet PAR1")
        with pytest.raises(Exception, match=r"(?i)parquet|corrupt|magic|invalid"):
            index.query([key])
        report = index.verify()
        assert not report.ok and any(part.name in p.where for p in report.problems)


def test_several_writer_processes_and_a_compactor(store_path: Path) -> None:
    WebIndex(store_path).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests._worker", "once", str(store_path), str(seed), "40"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in (11, 12, 13)
    ]
    compactor = subprocess.Popen(
        [sys.executable, "-m", "tests._worker", "compact", str(store_path)], cwd=ROOT
    )
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    compactor.kill()
    compactor.wait()
    assert all(p.returncode == 0 for p in procs)
    keys = parse_keys([line for out in outputs for line in out.splitlines()])
    assert len(keys) == 240
    with WebIndex(store_path, read_only=True) as index:
        results = index.query([k for k, _ in keys])
        assert all(
            r is not None and len(r.responses) == hops  # type: ignore[union-attr]
            for r, (_, hops) in zip(results, keys, strict=True)
            if isinstance(r, Page) or r is None
        )
        assert index.verify().ok


def test_readers_never_miss_a_record_during_compaction(store_path: Path) -> None:
    with WebIndex(store_path, policy=FlushPolicy(max_rows=5, compact_parts=0)) as index:
        keys = index.insert_many(
            [
                attempt(f"https://a.example.com/{n % 7}", T0 + timedelta(hours=n), hops=1 + n % 3)
                for n in range(60)
            ]
        )
        stop = threading.Event()
        failures: list[str] = []

        def read() -> None:
            with WebIndex(store_path, read_only=True) as reader:
                while not stop.is_set():
                    for key, got in zip(keys, reader.query(keys), strict=True):
                        if got is None or got.request_id != key.request_id:
                            failures.append(f"missed {key}")
                    latest = reader.query(
                        [
                            TimeAwarePageQuery(
                                url="https://a.example.com/0", not_after=T0 + timedelta(hours=59)
                            )
                        ]
                    )
                    if latest[0] is None:
                        failures.append("time-aware miss")

        thread = threading.Thread(target=read)
        thread.start()
        for n in range(60, 120):
            index.insert(*attempt(f"https://a.example.com/{n % 7}", T0 + timedelta(hours=n)))
            if n % 10 == 0:
                index.compact()
        stop.set()
        thread.join()
        assert failures == []


def test_page_key_touches_one_partition(index: WebIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    for month in range(6):
        index.insert(*attempt("https://a.example.com/x", T0 + timedelta(days=31 * month)))
    key = index.insert(*attempt("https://a.example.com/x", T0 + timedelta(days=62, hours=1)))
    index.flush()
    store = index._store
    seen: list[tuple[object, ...]] = []
    original = store.month_files
    monkeypatch.setattr(store, "month_files", lambda *a: seen.append(a) or original(*a))
    assert index.query([key])[0] is not None
    assert seen == [(key.type, key.timestamp.year, key.timestamp.month)]


def test_simple_query_stops_at_the_newest_month_that_answers(
    index: WebIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    for month in range(6):
        index.insert(*attempt("https://a.example.com/x", T0 + timedelta(days=31 * month)))
    index.flush()
    store = index._store
    seen: list[tuple[object, ...]] = []
    original = store.month_files
    monkeypatch.setattr(store, "month_files", lambda *a: seen.append(a) or original(*a))
    assert index.query([SimplePageQuery(url="https://a.example.com/x")])[0] is not None
    assert len(seen) == 1


_ = PageKey


def test_latest_in_a_window_is_not_settled_by_an_older_buffered_record(index: WebIndex) -> None:
    # Regression: a buffered July record must not stop the search before the
    # August file holding a later record inside the window is read.
    url = "https://b.example.com/"
    newer = index.insert(*attempt(url, T0.replace(day=1, hour=0, minute=1), state="timeout"))
    index.insert(*attempt(url, T0.replace(month=10), state="timeout"))
    index.flush()  # files for August and October; the July record stays buffered
    index.insert(*attempt(url, T0.replace(month=7, day=31, hour=23, minute=0), state="timeout"))
    q = TimeAwarePageQuery(url=url, not_after=newer.timestamp + timedelta(seconds=1), type="get-metadata")
    assert index.query([q])[0].request_id == newer.request_id  # type: ignore[union-attr]


def test_a_reused_month_listing_sees_every_later_change(store_path: Path) -> None:
    # Month listings are reused while the folder's mtime stays put, and only
    # once that mtime is old enough that no change can share its clock tick.
    import time

    url = "https://a.example.com/x"
    policy = FlushPolicy(compact_parts=0)
    with WebIndex(store_path, policy=policy) as idx:
        idx.insert(*attempt(url, T0))
        idx.flush()
        time.sleep(2.2)
        store = idx._store
        first = store.month_files(RecordType.GET, 2024, 8)
        assert store.month_files(RecordType.GET, 2024, 8) is first  # unchanged folder: reused
        for k in range(1, 4):  # changes right after the reuse, within one tick of each other
            newer = idx.insert(*attempt(url, T0 + timedelta(hours=k)))
            idx.flush()
            assert idx.query([SimplePageQuery(url=url)])[0].request_id == newer.request_id  # type: ignore[union-attr]
        idx.compact()
        assert len(store.month_files(RecordType.GET, 2024, 8)["example.com"]) == 1
        assert idx.query([SimplePageQuery(url=url)])[0].request_id == newer.request_id  # type: ignore[union-attr]


def test_files_written_with_the_arrow_schema_still_compact_with_new_ones(store_path: Path) -> None:
    # Format 1 files first stored the Arrow schema in the footer (large_binary,
    # large_string); newer ones do not. Both kinds must mix in one partition.
    import pyarrow as pa
    import pyarrow.parquet as pq

    from web_index.storage._schema import SCHEMAS

    url = "https://a.example.com/x"
    with WebIndex(store_path, policy=FlushPolicy(compact_parts=0)) as idx:
        old = idx.insert(*attempt(url, T0, hops=2))
        idx.flush()
        for path in files_of(store_path) + files_of(store_path, "get-metadata"):
            kind = RecordType.GET if path in files_of(store_path) else RecordType.GET_METADATA
            table = pq.read_table(path).cast(SCHEMAS[kind])
            metadata = pq.read_metadata(path).metadata or {}
            metadata = {k: v for k, v in metadata.items() if k != b"web_index.checksum"}  # older still
            pq.write_table(table.replace_schema_metadata(metadata), path, compression="zstd")
            assert pq.read_schema(path).field("data" if kind is RecordType.GET else "logs").type in (
                pa.large_binary(),
                pa.large_string(),
            )
            assert b"ARROW:schema" in (pq.read_metadata(path).metadata or {})
        new = idx.insert(*attempt(url, T0 + timedelta(hours=1)))
        idx.flush()
        assert idx.compact() == 2  # get and get-metadata
        assert idx.verify().problems == []
        got = idx.query([old, new, SimplePageQuery(url=url)])
        assert [p.request_id for p in got] == [old.request_id, new.request_id, new.request_id]  # type: ignore[union-attr]
        assert got[0].responses[1].data == b"<html>ok</html>"  # type: ignore[union-attr]


# The file-name grammar as first written (one regex per form, part tried first):
# the fast parser must agree with it on every name.
_REF_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_REF_DOMAIN = r"(?P<domain>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)"
_REF_PART = re.compile(rf"^{_REF_DOMAIN}\.(?P<part>{_REF_UUID})\.parquet$")
_REF_COMPACTED = re.compile(rf"^{_REF_DOMAIN}\.parquet$")


def _reference_parse(name: str) -> tuple[str, str | None] | None:
    match = _REF_PART.match(name)
    part = match.group("part") if match is not None else None
    if match is None:
        match = _REF_COMPACTED.match(name)
    if match is None or ".." in match.group("domain"):
        return None
    return match.group("domain"), part


_name_parts = st.one_of(
    st.text(alphabet="abz09.-_A", max_size=12),
    st.uuids().map(str),
    st.uuids().map(lambda u: str(u).upper()),
    st.sampled_from([".", "..", ".parquet", "parquet", ""]),
)


@given(st.lists(_name_parts, max_size=5).map("".join), st.booleans())
def test_file_names_parse_as_the_reference_grammar(name: str, suffix: bool) -> None:
    name = name + ".parquet" if suffix else name
    assert parse_file_name(name) == _reference_parse(name)


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("www.example.com.parquet", ("www.example.com", None)),
        (
            "example.com.0f8fad5b-d9cb-469f-a165-70867728950e.parquet",
            ("example.com", "0f8fad5b-d9cb-469f-a165-70867728950e"),
        ),
        (
            "a-.0f8fad5b-d9cb-469f-a165-70867728950e.parquet",
            ("a-.0f8fad5b-d9cb-469f-a165-70867728950e", None),
        ),
        ("..parquet", None),
        ("x..y.parquet", None),
        ("Example.com.parquet", None),
        ("example.com.parquet.tmp", None),
    ],
)
def test_file_name_examples(name: str, parsed: tuple[str, str | None] | None) -> None:
    assert parse_file_name(name) == parsed == _reference_parse(name)
