"""Bulk answering: a Parquet file of queries to a Parquet file of results, streamed."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.cli import app
from web_index.errors import InvalidRecordError
from web_index.models import (
    RESULT_SCHEMA,
    AttemptMetadata,
    Page,
    Query,
    SimplePageQuery,
    TimeAwarePageQuery,
    iter_queries,
    result_table,
    write_queries,
)
from web_index.query import Plan, _bulk, _spool
from web_index.storage import append_parquet
from web_index.urls import domain_of


def _store(root: Path) -> list[Query]:
    rng = random.Random(3)
    items = []
    for k in range(60):
        url = f"https://www.site{k % 7}.com/p/{k % 20}"
        state = "success" if rng.random() < 0.8 else "timeout"
        items.append(
            attempt(url, T0 + timedelta(days=k), state=state, hops=rng.choice([1, 2]), body=b"x" * k)
        )
    with WebIndex(root) as idx:
        keys = idx.insert_many(items)
        idx.flush()
        idx.compact()
    queries: list[Query] = list(keys)
    for k in keys:
        queries.append(SimplePageQuery(url=k.url, type="get-metadata"))
        queries.append(TimeAwarePageQuery(url=k.url, timestamp=k.timestamp + timedelta(days=2)))
        queries.append(SimplePageQuery(url=k.url + "/missing"))
    return queries


def _expected_row(i: int, q: Query, r: Page | AttemptMetadata | None) -> dict[str, Any]:
    row: dict[str, Any] = {"query": i, "type": q.type.value, "url": q.url, "found": r is not None}
    if isinstance(r, Page):
        row["request_id"] = r.request_id
        row["chain"] = [(x.request_url, x.status_code, x.data, dict(x.headers)) for x in r.responses]
    elif isinstance(r, AttemptMetadata):
        row["request_id"] = r.request_id
        row["state"] = r.state.value
    return row


def _file_rows(path: Path) -> list[dict[str, Any]]:
    table = pq.read_table(path)
    assert table.schema.equals(RESULT_SCHEMA, check_metadata=False)
    out = []
    for row in table.to_pylist():
        got: dict[str, Any] = {k: row[k] for k in ("query", "type", "url", "found")}
        if row["responses"] is not None:
            got["request_id"] = row["request_id"]
            got["chain"] = [
                (x["request_url"], x["status_code"], x["data"], dict(x["headers"])) for x in row["responses"]
            ]
        elif row["state"] is not None:
            got["request_id"] = row["request_id"]
            got["state"] = row["state"]
        out.append(got)
    return out


def test_query_file_writes_one_row_per_query_equal_to_query(tmp_path: Path) -> None:
    queries = _store(tmp_path / "s")
    write_queries(tmp_path / "q.parquet", queries)
    with WebIndex(tmp_path / "s", read_only=True) as idx:
        n = idx.query_file(tmp_path / "q.parquet", tmp_path / "r.parquet", batch_size=7)
        expected = [
            _expected_row(i, q, r) for i, (q, r) in enumerate(zip(queries, idx.query(queries), strict=True))
        ]
    assert n == len(queries)
    assert _file_rows(tmp_path / "r.parquet") == expected
    assert any(e["found"] for e in expected) and not all(e["found"] for e in expected)


def test_iter_query_pulls_one_batch_at_a_time(tmp_path: Path) -> None:
    queries = _store(tmp_path / "s")
    pulled = 0

    def source() -> Iterator[Query]:
        nonlocal pulled
        for q in queries:
            pulled += 1
            yield q

    with WebIndex(tmp_path / "s", read_only=True) as idx:
        stream = idx.iter_query(source(), batch_size=10)
        first = next(stream)
        assert pulled == 10  # not the whole input
        rest = list(stream)
        assert [q for q, _ in [first, *rest]] == queries
        assert [r for _, r in [first, *rest]] == idx.query(queries)


def test_cli_query_output_parquet(tmp_path: Path) -> None:
    queries = _store(tmp_path / "s")
    write_queries(tmp_path / "q.parquet", queries)
    result = CliRunner().invoke(
        app,
        [
            "query",
            "--store",
            str(tmp_path / "s"),
            "--from",
            str(tmp_path / "q.parquet"),
            "-o",
            str(tmp_path / "r.parquet"),
        ],
    )
    assert result.exit_code == 0, result.output
    with WebIndex(tmp_path / "s", read_only=True) as idx:
        expected = [
            _expected_row(i, q, r) for i, (q, r) in enumerate(zip(queries, idx.query(queries), strict=True))
        ]
    assert _file_rows(tmp_path / "r.parquet") == expected


# -- answering in partition order, merged back into input order ------------------------------


@pytest.fixture(scope="module")
def bulk_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Query]]:
    root = tmp_path_factory.mktemp("bulk")
    return root / "s", _store(root / "s")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    picks=st.lists(st.integers(min_value=0, max_value=10_000), min_size=0, max_size=120),
    batch_size=st.integers(min_value=1, max_value=40),
    window=st.integers(min_value=1, max_value=90),
    budget=st.sampled_from([1, 500, 1 << 28]),
    from_file=st.booleans(),
)
def test_answer_to_file_equals_query_in_input_order(
    bulk_store: tuple[Path, list[Query]],
    tmp_path_factory: pytest.TempPathFactory,
    picks: list[int],
    batch_size: int,
    window: int,
    budget: int,
    from_file: bool,
) -> None:
    """Whatever the batch, window and merge budget (1 byte: row groups of 16 rows),
    from a query file or from objects, the file holds exactly what ``query``
    answers, one row per query in input order."""
    root, pool = bulk_store
    queries = [pool[p % len(pool)] for p in picks]  # repeats and any order
    out = tmp_path_factory.mktemp("out") / "r.parquet"
    source: Any = iter(queries)
    if from_file:
        source = tmp_path_factory.mktemp("in") / "q.parquet"
        write_queries(source, queries)
    seen: list[int] = []
    with WebIndex(root, read_only=True) as idx, pytest.MonkeyPatch.context() as mp:
        mp.setattr(_spool, "_MERGE_BUDGET", budget)
        n = _bulk.answer_to_file(
            idx._answer_plans, source, out, batch_size=batch_size, window=window, on_progress=seen.append
        )
        answers = idx.query(queries)
        expected = [_expected_row(i, q, r) for i, (q, r) in enumerate(zip(queries, answers, strict=True))]
    assert n == len(queries)
    assert _file_rows(out) == expected
    assert seen == sorted(seen) and (not queries or seen[-1] == len(queries))
    assert [p.name for p in out.parent.iterdir()] == ["r.parquet"]  # no spool left behind


@given(positions=st.permutations(list(range(7))), lo=st.integers(min_value=0, max_value=50))
def test_a_merged_row_group_is_put_in_position_order_and_refused_when_not_each_once(
    positions: list[int], lo: int
) -> None:
    """The merge puts a row group's rows, gathered from every batch, in position order, and
    refuses rows that do not hold each of its positions once (a bug, never a wrong file)."""
    table = pa.table({"query": [lo + p for p in positions], "tag": [f"t{p}" for p in positions]})
    got = _spool._in_order(table, lo, lo + 7)
    assert got.column("query").to_pylist() == list(range(lo, lo + 7))
    assert got.column("tag").to_pylist() == [f"t{p}" for p in range(7)]
    twice = pa.table({"query": [lo + p for p in positions[:-1]] + [lo + positions[0]], "tag": ["x"] * 7})
    with pytest.raises(AssertionError, match="not each once"):
        _spool._in_order(twice, lo, lo + 7)
    outside = pa.table({"query": [lo + p for p in positions[:-1]] + [lo + 7], "tag": ["x"] * 7})
    with pytest.raises(AssertionError, match="outside"):
        _spool._in_order(outside, lo, lo + 7)
    with pytest.raises(AssertionError, match="6 rows"):
        _spool._in_order(table.slice(1), lo, lo + 7)


def test_answer_to_file_groups_batches_by_partition(
    bulk_store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    """The point of the window: a batch holds one run of domains, not a slice of the input."""
    root, pool = bulk_store
    queries = [q for q in pool if q.type.value == "get"][:40]
    random.Random(5).shuffle(queries)
    batches: list[set[str]] = []
    with WebIndex(root, read_only=True) as idx:

        def answer(batch: list[Plan]) -> list[Any]:
            batches.append({p.domain for p in batch})
            return idx._answer_plans(batch)

        _bulk.answer_to_file(answer, queries, tmp_path / "r.parquet", batch_size=10, window=1000)
    domains = sorted({domain_of(q.url) for q in queries})
    # Sorted by domain: each batch's domains are a contiguous run of the sorted list.
    for ds in batches:
        idxs = sorted(domains.index(d) for d in ds)
        assert idxs == list(range(idxs[0], idxs[-1] + 1))
    assert sum(len(ds) for ds in batches) <= len(domains) + len(batches) - 1


def test_query_file_bad_query_leaves_no_file(bulk_store: tuple[Path, list[Query]], tmp_path: Path) -> None:
    root, pool = bulk_store
    (tmp_path / "r.parquet").write_bytes(b"old results")

    def queries() -> Iterator[Query]:
        yield from pool[:30]
        raise InvalidRecordError("queries.jsonl:31", "not a query")

    with WebIndex(root, read_only=True) as idx, pytest.raises(InvalidRecordError, match="jsonl:31"):
        idx.query_file(queries(), tmp_path / "r.parquet", batch_size=7)
    assert (tmp_path / "r.parquet").read_bytes() == b"old results"  # untouched, not half-written
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]


def test_query_file_of_no_queries_is_an_empty_result_file(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s") as idx:
        assert idx.query_file([], tmp_path / "r.parquet") == 0
    table = pq.read_table(tmp_path / "r.parquet")
    assert table.num_rows == 0 and table.schema.equals(RESULT_SCHEMA, check_metadata=False)


def test_query_file_refuses_naive_timestamps(bulk_store: tuple[Path, list[Query]], tmp_path: Path) -> None:
    root, _ = bulk_store
    table = pa.table({"kind": ["time-aware"], "url": ["https://www.site1.com/p/1"]})
    table = table.append_column("timestamp", pa.array([datetime(2024, 8, 1)], pa.timestamp("us")))
    pq.write_table(table, tmp_path / "q.parquet")
    with pytest.raises(ValueError, match="column timestamp holds naive timestamps"):
        list(iter_queries(tmp_path / "q.parquet"))
    with WebIndex(root, read_only=True) as idx, pytest.raises(ValueError, match="naive"):
        idx.query_file(tmp_path / "q.parquet", tmp_path / "r.parquet")
    assert not (tmp_path / "r.parquet").exists()


def test_the_collector_is_off_while_a_batch_is_answered_and_made_rows(
    bulk_store: tuple[Path, list[Query]], tmp_path: Path
) -> None:
    """No collection runs while a batch is answered and its answers made rows: each would
    walk every object the process tracks, and a batch's allocations set off many."""
    import gc

    root, pool = bulk_store
    queries = pool * 50
    write_queries(tmp_path / "q.parquet", queries)
    rows = pq.read_table(tmp_path / "q.parquet")
    collections: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    with WebIndex(root, read_only=True) as idx:
        _bulk._answered(idx._answer_plans, rows, list(range(len(queries))), "q")  # warm: imports, caches
        gc.collect()
        gc.callbacks.append(seen)
        try:
            table = _bulk._answered(idx._answer_plans, rows, list(range(len(queries))), "q")
        finally:
            gc.callbacks.remove(seen)
        assert gc.isenabled()
    assert table.num_rows == len(queries)
    assert collections == []


_HOSTS = [
    "example.com",
    "WWW.Example.CO.UK",
    "shop.bbc.co.uk.",
    "bücher.de",
    "[::1]",
    "127.0.0.1",
    "x",
    "a..b",
    "",
]
_URL_PARTS = st.tuples(
    st.sampled_from(["http://", "HTTPS://", "https://", "ftp://", ""]),
    st.sampled_from(["", "user:pw@", "@"]),
    st.sampled_from(_HOSTS),
    st.sampled_from(["", ":8080", ":443", ":"]),
    st.sampled_from(["", "/", "/p/a b?q=1", "?x", "#f", "/ü"]),
)


@settings(max_examples=200, deadline=None)
@given(
    parts=st.lists(_URL_PARTS, min_size=1, max_size=20),
    nulls=st.lists(st.booleans(), max_size=20),
    string=st.sampled_from([pa.string(), pa.large_string()]),
)
def test_a_windows_domains_are_each_urls_own(
    parts: list[tuple[str, ...]], nulls: list[bool], string: pa.DataType
) -> None:
    """Found a host at a time, the domains that order a window are what each URL's query
    is partitioned by; none for a URL whose query cannot be built."""
    from web_index.errors import InvalidURLError
    from web_index.urls import key_and_domain

    urls: list[str | None] = ["".join(p) for p in parts]
    urls = [None if i < len(nulls) and nulls[i] else u for i, u in enumerate(urls)]

    def expected(url: str | None) -> str | None:
        try:
            return None if url is None else key_and_domain(url)[1]
        except InvalidURLError:
            return None

    got = _bulk._domains(pa.chunked_array([urls[:3], urls[3:]], string)).to_pylist()
    assert got == [expected(u) for u in urls]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from([None, "get", "head", "get-metadata"]), _URL_PARTS, st.booleans()),
        min_size=1,
        max_size=30,
    ),
    as_dictionary=st.booleans(),
    chunked=st.booleans(),
)
def test_a_window_is_answered_by_type_then_domain_in_input_order_within(
    rows: list[tuple[str | None, tuple[str, ...], bool]], as_dictionary: bool, chunked: bool
) -> None:
    """The order a window's rows are answered in is a stable sort by type (none: ``get``)
    and partition domain (none: ``""``), whatever the columns' encoding and chunks."""
    from web_index.errors import InvalidURLError
    from web_index.urls import key_and_domain

    def domain(url: str | None) -> str:
        try:
            return "" if url is None else key_and_domain(url)[1]
        except InvalidURLError:
            return ""

    types = [t for t, _, _ in rows]
    urls = [None if null else "".join(parts) for _, parts, null in rows]
    type_column: Any = pa.array(types, pa.string())
    url_column: Any = pa.array(urls, pa.string())
    if as_dictionary:
        type_column, url_column = type_column.dictionary_encode(), url_column.dictionary_encode()
    if chunked:
        half = len(rows) // 2
        type_column = pa.chunked_array([type_column[:half], type_column[half:]])
        url_column = pa.chunked_array([url_column[:half], url_column[half:]])
    got = _bulk._partition_order(pa.table({"type": type_column, "url": url_column})).to_pylist()
    keys = [(t or "get", domain(u)) for t, u in zip(types, urls, strict=True)]
    assert got == sorted(range(len(rows)), key=lambda i: keys[i])


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"kind": "key", "url": "https://www.site1.com/p/1", "request_id": None}, "timestamp"),
        ({"kind": "simple", "url": None}, "url"),
    ],
)
def test_a_query_row_without_a_required_field_is_named_by_row(
    tmp_path: Path, row: dict[str, Any], field: str
) -> None:
    from web_index.models import queries_of

    good = {"kind": "simple", "url": "https://www.site1.com/p/2"}
    table = pa.Table.from_pylist([good, good, {**good, **row}])
    with pytest.raises(InvalidRecordError) as caught:
        queries_of(table, tmp_path / "q.parquet")
    assert str(caught.value).startswith(f"{tmp_path / 'q.parquet'}, row 2: ")
    assert field in str(caught.value)


_PLAN_URLS = [
    "https://www.site1.com/p/1",
    "https://WWW.Site1.COM:443/p/1#frag",
    "http://exämple.de/ä?b=2&a=1",
    "https://192.168.0.1/x",
    "https://[::1]/",
    "https://",
    "ftp://site1.com/",
    "https://site1.com/a b",
    None,
]
_DATETIME = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
)
_WHEN = st.none() | _DATETIME
_QUERY_FIELDS = ("kind", "type", "url", "request_id", "timestamp", "not_before", "not_after", "calibre")
_QUERY_FIELDS += ("calibre_strict",)
_ANY_ROW = st.fixed_dictionaries(
    {
        "kind": st.sampled_from([None, "key", "simple", "time-aware", "latest"]),
        "type": st.sampled_from([None, "get", "head", "get-metadata", "head-metadata", "GET"]),
        "url": st.sampled_from(_PLAN_URLS),
        "request_id": st.sampled_from([None, "", "01a228ca-2d5d-7006-8314-f3c640fec18c"]),
        "timestamp": _WHEN,
        "not_before": _WHEN,
        "not_after": _WHEN,
        "calibre": st.sampled_from([None, 0, 30, 100, 101, 255]),
        "calibre_strict": st.sampled_from([None, False, True]),
    }
)


@st.composite
def _query_row(draw: st.DrawFn) -> dict[str, Any]:
    """A query's row, of its kind's form but for one value in ten drawn from anything."""
    row: dict[str, Any] = dict.fromkeys(_QUERY_FIELDS)
    kind = draw(st.sampled_from(["key", "simple", "time-aware", None]))
    row |= {"kind": kind, "type": draw(st.sampled_from([None, "get", "head-metadata"]))}
    row["url"] = draw(st.sampled_from(_PLAN_URLS[:5]))
    calibre = {"calibre": draw(st.sampled_from([None, 0, 30, 100])), "calibre_strict": draw(st.booleans())}
    if kind == "key" or (kind is None and draw(st.booleans())):
        row |= {"timestamp": draw(_DATETIME), "request_id": "01a228ca-2d5d-7006-8314-f3c640fec18c"}
    elif kind == "simple" or kind is None:
        row |= calibre
    else:
        times = sorted(draw(st.lists(_DATETIME, min_size=3, max_size=3)))
        if draw(st.integers(0, 9)) == 0:
            times.reverse()  # an empty window
        row |= calibre | {"not_before": draw(st.sampled_from([None, times[0]])), "timestamp": times[1]}
        row["not_after"] = draw(st.sampled_from([None, times[2]]))
    if draw(st.integers(0, 9)) == 0:
        name = draw(st.sampled_from(sorted(row)))
        row[name] = draw(_ANY_ROW)[name]
    return row


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(_query_row(), min_size=1, max_size=6),
    dropped=st.sets(st.sampled_from(["kind", "type", "calibre", "calibre_strict", "not_after"])),
    extra=st.booleans(),
    iso=st.booleans(),
    far=st.booleans(),
    twice=st.booleans(),
)
def test_plans_of_rows_are_the_plans_of_their_queries(
    rows: list[dict[str, Any]], dropped: set[str], extra: bool, iso: bool, far: bool, twice: bool
) -> None:
    """A batch's plans made from its columns are the plans of the queries its rows make,
    and a table with an invalid row raises what making its queries raises, naming it."""
    from web_index.errors import InvalidURLError
    from web_index.models import queries_of
    from web_index.query._plan import plan, plans_of

    ts = pa.timestamp("us", tz="UTC")
    types = {
        "calibre": pa.uint8(),
        "calibre_strict": pa.bool_(),
        "timestamp": ts,
        "not_before": ts,
        "not_after": ts,
    }
    table = pa.Table.from_pylist(rows, schema=pa.schema([(k, types.get(k, pa.string())) for k in rows[0]]))
    table = table.drop_columns(sorted(dropped))
    if extra:
        table = table.append_column("note", pa.array(["x"] * table.num_rows))
    at = table.schema.get_field_index("timestamp")
    if iso:  # times as the standard writes them: the queries' own path
        table = table.set_column(at, "timestamp", pa.array([_iso(r["timestamp"]) for r in rows], pa.string()))
    elif far:  # past what a datetime holds, as Arrow's microseconds can be: moved to its end
        micros = pc.add(table.column(at).cast(pa.int64()), 1 << 60)
        table = table.set_column(at, "timestamp", micros.cast(ts))
    for name in ("not_before", "not_after"):  # a column of no value: typed null, not timestamp
        if name in table.column_names and table.column(name).null_count == table.num_rows and far:
            table = table.set_column(table.schema.get_field_index(name), name, pa.nulls(table.num_rows))
    if twice:  # a column given twice: a row's last value that is not null counts
        table = table.append_column("calibre", pa.nulls(table.num_rows, pa.uint8()))
    numbers = [n * 2 + 7 for n in range(table.num_rows)]

    def outcome(make: Any) -> object:
        try:
            return make()
        except (InvalidRecordError, InvalidURLError) as exc:
            return (type(exc), str(exc))

    expected = outcome(lambda: [plan(q) for q in queries_of(table, "q.parquet", numbers)])
    event("planned" if isinstance(expected, list) else "refused")
    assert outcome(lambda: plans_of(table, "q.parquet", numbers)) == expected


_TIME_COLUMNS = ("timestamp", "not_before", "not_after")


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(min_value=1, max_value=120),
    batches=st.integers(min_value=1, max_value=6),
    pieces=st.integers(min_value=1, max_value=5),
    start=st.integers(min_value=0, max_value=30),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    budget=st.sampled_from([1, 3_000, 10**9]),
)
def test_pieces_merged_apart_and_appended_are_the_file_one_merge_writes(
    bulk_store: tuple[Path, list[Query]],
    tmp_path: Path,
    count: int,
    batches: int,
    pieces: int,
    start: int,
    seed: int,
    budget: int,
) -> None:
    """Workers of this machine merge a window's spooled batches into pieces, each its own
    Parquet file, appended in order to the result file: byte for byte the file one merge
    writes, whatever the batches, their record batches and the cuts."""
    root, pool = bulk_store
    rng = random.Random(seed)
    queries = [rng.choice(pool) for _ in range(count)]
    with WebIndex(root, read_only=True) as idx:
        answers = idx.query(queries)
    positions = list(range(start, start + count))
    rng.shuffle(positions)
    cuts = sorted(rng.sample(range(1, count), min(batches, count) - 1)) if count > 1 else []
    work = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis may run an example twice
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_spool, "OUTPUT_ROWS", 7)  # many row groups of few rows
        with _spool.Spool(work / "here.arrow", len(cuts) + 1) as spooled:
            spooled.budget = budget
            for n, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, count], strict=True)):
                mine = sorted(positions[lo:hi])
                table = result_table(
                    (p, queries[p - start].type, queries[p - start].url, answers[p - start]) for p in mine
                )
                if n % 2:
                    spooled.add(table)  # answered here
                else:
                    path = work / f"batch-{n}.arrow"
                    spooled.add_file(path, _spool.spool_file(table, path, spooled.budget))
            with _spool.result_writer(work / "one.parquet") as writer:
                spooled.merge(start, count, writer)
            parts = spooled.pieces(start, count, pieces)
            bounds = [(lo, hi) for *_, lo, hi in parts]
            assert [lo for lo, _ in bounds] == [start] + [hi for _, hi in bounds[:-1]]  # contiguous
            assert bounds[-1][1] == start + count and all((lo - start) % 7 == 0 for lo, _ in bounds)
            assert len(parts) == min(pieces, -(-count // 7))
            paths = [work / f"piece-{n}.parquet" for n in range(len(parts))]
            for part, path in zip(parts, paths, strict=True):
                _spool.merge_to_file(*part, path)
    append_parquet(paths[0], paths[1:])
    assert paths[0].read_bytes() == (work / "one.parquet").read_bytes()
    got = pq.read_table(paths[0])
    assert got.column("query").to_pylist() == list(range(start, start + count))
    assert pq.ParquetFile(paths[0]).metadata.num_row_groups == -(-count // 7)
