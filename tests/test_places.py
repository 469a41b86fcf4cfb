"""Records read by their place: a capture index line holds the response and where its body is
(``storage/pages/_places.py``, docs/format.md), and ``WebIndex.capture_response`` reads it from
there alone. Against pyarrow's read of the same rows, for random stores (bodies from empty to
1 MiB, text and binary, redirect chains and HEAD responses, pages and row groups of many sizes,
records buffered, compacted and both); and a place that no longer holds its body (its file
compacted again, a byte of it flipped) is never a wrong answer."""

from __future__ import annotations

import random
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest.mock import patch

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import metadata
from web_index import WebIndex, WriteOptions
from web_index.errors import CorruptFileError
from web_index.models import Response, from_us
from web_index.storage import parse_capture_line

T0 = datetime(2024, 5, 1, tzinfo=UTC)
HOST = "https://example.com/"

_sizes = st.one_of(st.just(0), st.integers(1, 64), st.integers(65, 8 << 10), st.integers(8 << 10, 1 << 20))


def _text(rng: random.Random, size: int) -> bytes:
    words = [b"web", b"index", b"page", b"\xc3\xa9t\xc3\xa9", b"<p>", b"</p>\n"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def _chain(url: str, at: datetime, body: bytes | None, hops: int, n: int) -> list[Response]:
    return [
        Response(
            url=url,
            request_url=url if i == hops - 1 else f"{url}?hop={i}",
            status_code=200 if i == hops - 1 else 301,
            headers={"content-type": "text/html", "x-n": str(n)} if i == hops - 1 else {"location": url},
            timestamp=at + timedelta(milliseconds=i),
            data=None if body is None else (body if i == hops - 1 else b""),
            is_final=i == hops - 1,
            fetcher_name="test",
            fetcher_version="1.0",
            fetcher_calibre=10 + n % 3,
        )
        for i in range(hops)
    ]


def _insert(
    index: WebIndex, rng: random.Random, specs: list[tuple[int, bool, int, bool]], start: int
) -> None:
    for n, (size, binary, hops, head) in enumerate(specs, start=start):
        url = f"{HOST}p/{n % 7}" if n % 2 else f"https://www.example.com/q{n}"
        at = T0 + timedelta(days=n % 40, seconds=n)  # two months
        body = None if head else (rng.randbytes(size) if binary else _text(rng, size))
        chain = _chain(url, at, body, hops, n)
        index.insert("head" if head else "get", url, at, metadata(url, calibre=10 + n % 3), chain)


def _all_lines(index: WebIndex) -> list[tuple[str, str]]:
    return [
        (kind, line) for kind in ("get", "head") for line in index.captures(HOST, match="domain", type=kind)
    ]


def _pyarrow_row(store: Path, kind: str, line: str) -> Response:
    """The response a line names, as pyarrow reads its row from the compacted file."""
    _key, _stamp, where = parse_capture_line(line)
    start = from_us(where.attempt_us)
    path = store / kind / f"{start.year:04d}" / f"{start.month:02d}" / "example.com.parquet"
    rows = pq.read_table(path).to_pylist()
    (r,) = [r for r in rows if (r["request_id"], r["chain_index"]) == (where.request_id, where.position)]
    fields = ["url", "request_url", "status_code", "headers", "timestamp", "retry_attempt", "is_final"]
    fields += ["request_id", "fetcher_name", "fetcher_version", "fetcher_calibre"]
    return Response(**{name: r[name] for name in fields}, data=r.get("data"))


_specs = st.lists(
    st.tuples(_sizes, st.booleans(), st.integers(1, 3), st.just(False)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    first=_specs,
    heads=st.integers(0, 3),
    later=st.lists(st.tuples(_sizes, st.booleans(), st.integers(1, 2), st.just(False)), max_size=5),
    page_bytes=st.sampled_from([256, 4 << 10, 16 << 10, 64 << 10]),
    group_rows=st.sampled_from([1, 3, 128]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_record_read_by_its_place_is_what_pyarrow_reads(
    first: list[tuple[int, bool, int, bool]],
    heads: int,
    later: list[tuple[int, bool, int, bool]],
    page_bytes: int,
    group_rows: int,
    seed: int,
) -> None:
    rng = random.Random(seed)
    options = WriteOptions(body_row_group_rows=group_rows, group_min_bytes=0, body_page_bytes=page_bytes)
    first = first + [(0, False, 1, True)] * heads
    with tempfile.TemporaryDirectory() as tmp, WebIndex(Path(tmp) / "s", write_options=options) as index:
        _insert(index, rng, first, 0)
        buffered = {line: index.capture_response(line, type=kind) for kind, line in _all_lines(index)}
        index.flush()
        index.compact()
        # Both: records compacted, and more still buffered.
        _insert(index, rng, later, len(first))
        lines = _all_lines(index)
        placed = [(kind, line) for kind, line in lines if '"row":' in line]
        assert len(placed) == sum(hops for _s, _b, hops, _h in first)
        with patch.object(index, "query", side_effect=AssertionError("read by its page key")):
            for kind, line in placed:
                got = index.capture_response(line, type=kind)
                assert got == _pyarrow_row(Path(tmp) / "s", kind, line)
                # The same capture's response as it was read while buffered.
                assert got in buffered.values()
        for kind, line in lines:  # the buffered ones, by their page keys
            assert index.capture_response(line, type=kind) is not None


def test_a_place_in_a_file_compacted_again_is_read_the_older_way(tmp_path: Path) -> None:
    rng = random.Random(1)
    with WebIndex(tmp_path / "s", write_options=WriteOptions(body_page_bytes=1 << 10)) as index:
        _insert(index, rng, [(3000, False, 1, False)] * 30, 0)
        index.flush()
        index.compact()
        before = {line: index.capture_response(line) for _kind, line in _all_lines(index)}
        # More records of the partition: compacted again, every row moves, every page with it.
        _insert(index, rng, [(3000, True, 1, False)] * 30, 1000)
        index.flush()
        index.compact()
        for line, response in before.items():
            assert index.capture_response(line) == response  # stale place: by page key


def test_a_flipped_byte_of_a_body_page_is_never_a_wrong_body(tmp_path: Path) -> None:
    rng = random.Random(2)
    store = tmp_path / "s"
    with WebIndex(store, write_options=WriteOptions(body_page_bytes=1 << 10)) as index:
        _insert(index, rng, [(2000, False, 1, False)] * 40, 0)
        index.flush()
        index.compact()
        lines = [line for _kind, line in _all_lines(index)]
        expected = {line: index.capture_response(line) for line in lines}
    outcomes = {"right": 0, "error": 0}
    for path in sorted(store.glob("get/*/*/example.com.parquet")):
        raw = bytearray(path.read_bytes())
        for at in range(4, len(raw) // 2, 997):  # within the body pages, mostly
            raw[at] ^= 0x10
            path.write_bytes(bytes(raw))
            raw[at] ^= 0x10
            with WebIndex(store, read_only=True) as index:
                for line in lines[::5]:
                    try:
                        got = index.capture_response(line)
                    except CorruptFileError as exc:
                        assert exc.path.endswith("example.com.parquet")
                        outcomes["error"] += 1
                    else:
                        assert got == expected[line]
                        outcomes["right"] += 1
        path.write_bytes(bytes(raw))
    assert outcomes["right"] and outcomes["error"]


@pytest.mark.parametrize("size", [0, 1, 1 << 20])
def test_bodies_of_every_size_by_their_place(tmp_path: Path, size: int) -> None:
    with WebIndex(tmp_path / "s") as index:
        _insert(index, random.Random(size), [(size, True, 1, False)], 0)
        index.flush()
        index.compact()
        ((_kind, line),) = _all_lines(index)
        with patch.object(index, "query", side_effect=AssertionError("read by its page key")):
            got = index.capture_response(line)
        assert got is not None and got.data is not None and len(got.data) == size


def test_verify_finds_a_place_that_holds_another_body(tmp_path: Path) -> None:
    """An index whose lines parse and check but name a wrong place: verify says so (a
    problem), and lookups through it still give the right body (read the older way)."""
    from web_index.storage.indexes._captures_format import CaptureIndex, encode_index

    with WebIndex(tmp_path / "s", write_options=WriteOptions(body_page_bytes=1 << 10)) as index:
        _insert(index, random.Random(3), [(1500, False, 1, False)] * 12, 0)
        index.flush()
        index.compact()
        assert index.verify().ok
        expected = {line: index.capture_response(line) for _kind, line in _all_lines(index)}
        path = next((tmp_path / "s" / "_captures").rglob("*.cdxj.zst"))
        opened = CaptureIndex(str(path), path.read_bytes())
        lines = list(opened.lines((b"",)))
        # The first line's body placed far off: in another page, or none.
        original = lines[0]
        lines[0] = original.replace(b'"body":[', b'"body":[1', 1)
        meta = opened.meta
        path.write_bytes(encode_index(meta.covers, meta.size, meta.version, meta.superseded, lines))
    with WebIndex(tmp_path / "s") as index:
        report = index.verify()
        (problem,) = [p for p in report.problems if "capture" in p.message]
        assert "disagrees" in problem.message and path.name in problem.where
        for line, response in expected.items():
            assert index.capture_response(line) == response
        # The damaged line as the index now gives it: the body it names is not at its place.
        assert index.capture_response(lines[0]) == expected[original.decode()]


def test_a_damaged_index_block_is_read_around_by_lookups_and_batches(tmp_path: Path) -> None:
    """A block of a capture index is checked when read: a batch whose winners' lines are in it,
    and a lookup through it, give the right records from the files, and the index is let go."""
    from web_index.models import SimplePageQuery

    rng = random.Random(4)
    with WebIndex(tmp_path / "s") as index:
        _insert(index, rng, [(800, False, 1, False)] * 80, 0)
        index.flush()
        index.compact()
        queries = [SimplePageQuery(url=f"https://www.example.com/q{n}") for n in range(0, 80, 2)]
        expected = index.query(queries)
        responses = _responses(index)
        assert all(expected) and len(responses) == 80
    for path in (tmp_path / "s" / "_captures").rglob("*.cdxj.zst"):
        raw = bytearray(path.read_bytes())
        raw[-3] ^= 0x40  # in the last block's frame
        path.write_bytes(bytes(raw))
    with WebIndex(tmp_path / "s") as index:
        assert index.query(queries) == expected
        assert _responses(index) == responses
        assert index.query(queries) == expected  # the index let go: from the files


def _responses(index: WebIndex) -> dict[tuple[str, int], Response | None]:
    out = {}
    for kind, line in _all_lines(index):
        where = parse_capture_line(line)[2]
        out[(where.request_id, where.position)] = index.capture_response(line, type=kind)
    return out


@pytest.mark.parametrize("dense", [True, False])
def test_a_batch_spread_over_threads_reads_every_body_right(tmp_path: Path, dense: bool) -> None:
    """A batch's bodies read by place are spread over the reader threads (``_by_place._bodies``):
    each answer is the body its capture holds, the referring ones' included (a re-crawl of the
    same bodies a month later), whether their files are read whole as small and dense ones
    (``dense``) or each row by its place; and the reads did run on more than one thread."""
    import threading

    import web_index.query._by_place as by_place
    import web_index.query._results as results
    from web_index.models import SimplePageQuery, TimeAwarePageQuery
    from web_index.storage import Store

    bodies = _recrawled(tmp_path / "s", months=(5, 6))
    with WebIndex(tmp_path / "s") as index:
        latest = [SimplePageQuery(url=u) for u in bodies]
        first = [TimeAwarePageQuery(url=u, timestamp=datetime(2024, 5, 2, tzinfo=UTC)) for u in bodies]
        threads: set[str] = set()
        read = Store.bodies_by_place

        def spy(self: Store, wanted: list[tuple[str, object]]) -> list[bytes | None]:
            threads.add(threading.current_thread().name)
            return read(self, wanted)  # type: ignore[arg-type]

        many = 1 if dense else 1 << 30
        with (
            patch.object(by_place, "_SPREAD_BODIES", 2),
            patch.object(results, "_MANY_SMALL_FILES", many),
            patch.object(Store, "bodies_by_place", spy),
        ):
            # A fresh store has not shown a referring index yet: the dense files are read whole,
            # and the referring rows there given their bodies by place (payloads_by_place).
            assert not index._store.capture_indexes.seen_referring
            for batch in (latest, first):
                got = index.query(batch)
                assert [p.final.data if p else None for p in got] == list(bodies.values())  # type: ignore[union-attr]
    if results.reader_pool(index._store)._max_workers > 1:  # one core: all in this thread
        assert len(threads) > 1 and any(name.startswith("wi-read") for name in threads)
    refs = pq.read_table(
        next((tmp_path / "s" / "get" / "2024" / "06").glob("*.parquet")), columns=["payload_ref"]
    )
    assert all(refs.column("payload_ref").to_pylist())  # the second crawl's rows do refer


def _recrawled(root: Path, months: tuple[int, ...]) -> dict[str, bytes]:
    """A store of 8 small sites (registrable domains) of 5 pages, crawled once in each of
    ``months`` (2024) with the same bodies, compacted after each: the later crawls' rows
    refer to the first's payloads. Returns the bodies by URL."""
    rng = random.Random(5)
    bodies = {
        f"https://site{d}.example/p{p}": _text(rng, 9_000 + 700 * p) for d in range(8) for p in range(5)
    }
    with WebIndex(root) as index:
        for month in months:
            for n, (url, body) in enumerate(bodies.items()):
                at = datetime(2024, month, 2, tzinfo=UTC) + timedelta(seconds=n)
                index.insert("get", url, at, metadata(url, calibre=10 + n % 3), _chain(url, at, body, 1, n))
            index.flush()
            index.compact()
    return bodies


def test_referring_winners_of_small_files_are_read_by_place(tmp_path: Path) -> None:
    """A batch reads small files dense in its winners whole, but not for winners that
    refer to another month's payload, which are read by place whatever reads their rows:
    once the store has shown an index with such rows, their files are not read whole. A
    store without references never opens those files' indexes to learn it."""
    import web_index.query._results as results
    from web_index.models import SimplePageQuery, TimeAwarePageQuery
    from web_index.storage.indexes import CaptureIndexes

    read_whole: list[str] = []
    read_small_files = results.read_small_files

    def spy(backend: object, paths: list[str]) -> object:
        read_whole.extend(paths)
        return read_small_files(backend, paths)  # type: ignore[arg-type]

    opened = CaptureIndexes.get
    got_index: list[str] = []

    def spy_get(self: CaptureIndexes, partition: object, covered: object) -> object:
        got_index.append(str(partition))
        return opened(self, partition, covered)  # type: ignore[arg-type]

    bodies = _recrawled(tmp_path / "once", months=(5,))
    with (
        patch.object(results, "_MANY_SMALL_FILES", 1),
        patch.object(results, "read_small_files", spy),
        patch.object(CaptureIndexes, "get", spy_get),
        WebIndex(tmp_path / "once", read_only=True) as index,
    ):
        got = index.query([SimplePageQuery(url=u) for u in bodies])
        assert [p.final.data if p else None for p in got] == list(bodies.values())  # type: ignore[union-attr]
        assert len(read_whole) == 8 and not got_index  # every file whole, no index opened
        assert not index._store.capture_indexes.seen_referring

    _recrawled(tmp_path / "twice", months=(5, 6))
    latest = [SimplePageQuery(url=u) for u in bodies]
    first = [TimeAwarePageQuery(url=u, timestamp=datetime(2024, 5, 2, tzinfo=UTC)) for u in bodies]
    with (
        patch.object(results, "_MANY_SMALL_FILES", 1),
        patch.object(results, "read_small_files", spy),
        WebIndex(tmp_path / "twice", read_only=True) as index,
    ):
        for round in range(2):
            read_whole.clear()
            got = index.query(latest)
            assert [p.final.data if p else None for p in got] == list(bodies.values())  # type: ignore[union-attr]
            june = [p for p in read_whole if "/2024/06/" in p]
            # The first batch learns that the store refers (the files read whole tell it);
            # from then on the June files, whose every winner refers, are not read whole.
            assert len(june) == (8 if round == 0 else 0) and index._store.capture_indexes.seen_referring
        read_whole.clear()
        got = index.query(first)  # the May rows hold their bodies: read whole, as before
        assert [p.final.data if p else None for p in got] == list(bodies.values())  # type: ignore[union-attr]
        assert len(read_whole) == 8 and all("/2024/05/" in p for p in read_whole)


def test_chains_of_mixed_files_are_answered_whole(tmp_path: Path) -> None:
    """Chains of two responses, a redirect whose body is new and a final page, in files
    where some finals refer to the month before's payload and some hold a new body: every
    chain is answered whole and right, and once the store has shown a referring index,
    exactly the chains with a referring row are answered by place (the rest with their
    files read whole)."""
    import web_index.query._by_place as by_place
    import web_index.query._results as results
    from web_index.models import SimplePageQuery

    rng = random.Random(7)
    urls = [f"https://site{d}.example/p{p}" for d in range(8) for p in range(6)]
    first = {u: _text(rng, 9_000 + 500 * (i % 5)) for i, u in enumerate(urls)}
    expected, refer = {}, set()
    with WebIndex(tmp_path) as index:
        for month in (5, 6):
            for n, url in enumerate(urls):
                at = datetime(2024, month, 2, tzinfo=UTC) + timedelta(seconds=n)
                final = first[url] if month == 5 or n % 3 else _text(rng, 9_100)
                hop = _text(rng, 3_000) if month == 6 else b""
                fetcher = {"fetcher_name": "test", "fetcher_version": "1.0", "fetcher_calibre": 10}
                redirect = Response(
                    url=url, request_url=f"{url}?hop", status_code=301, headers={"location": url},
                    timestamp=at, data=hop, **fetcher,
                )  # fmt: skip
                page = Response(
                    url=url, request_url=url, status_code=200, headers={"content-type": "text/html"},
                    timestamp=at + timedelta(milliseconds=1), data=final, is_final=True, **fetcher,
                )  # fmt: skip
                chain = [redirect, page]
                index.insert("get", url, at, metadata(url, calibre=10), chain)
                if month == 6:
                    expected[url] = [hop, final]
                    if final == first[url]:
                        refer.add(url)
            index.flush()
            index.compact()
    placed: list[int] = []
    answer = by_place.answer_by_place

    def spy(*args: object, **kwargs: object) -> set[int]:
        done = answer(*args, **kwargs)  # type: ignore[arg-type]
        placed.append(len(done))
        return done

    with (
        patch.object(results, "_MANY_SMALL_FILES", 1),
        patch.object(results, "answer_by_place", spy),
        WebIndex(tmp_path, read_only=True) as index,
    ):
        for _ in range(3):
            got = index.query([SimplePageQuery(url=u) for u in urls])
            assert [[r.data for r in p.responses] if p else None for p in got] == [expected[u] for u in urls]
    assert 0 < len(refer) < len(urls) and placed == [0, len(refer), len(refer)]


@settings(max_examples=25, deadline=None)
@given(
    bodies=st.lists(st.none() | _sizes.map(lambda n: min(n, 64 << 10)), min_size=1, max_size=60),
    page_bytes=st.sampled_from([256, 4 << 10, 16 << 10]),
    group_rows=st.sampled_from([1, 3, 128]),
    required=st.booleans(),
)
def test_places_from_the_bodies_lengths_are_those_read_from_the_pages(
    bodies: list[int | None], page_bytes: int, group_rows: int, required: bool
) -> None:
    """A writer's places, learnt from its bodies' lengths and the pages' headers, are those
    learnt by decompressing every page (nulls, empty bodies, pages of one value or many), and
    no page is decompressed for them: in an optional column, and in a required one, as a
    store's ``data`` column is (its pages have no definition levels)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from web_index.storage.pages import CheckedFile, _places, body_places

    if required:
        bodies = [n or 0 for n in bodies]
    column = pa.array([None if n is None else b"x" * n for n in bodies], type=pa.large_binary())
    data = pa.field("data", pa.large_binary(), nullable=not required)
    schema = pa.schema([data, pa.field("n", pa.int64())])
    table = pa.table({"data": column, "n": pa.array(range(len(bodies)))}, schema=schema)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.parquet"
        pq.write_table(
            table,
            path,
            compression={"data": "zstd", "n": "lz4"},
            row_group_size=group_rows,
            data_page_size=page_bytes,
            write_batch_size=1,
            use_dictionary=False,
        )
        assert (pq.ParquetFile(path).schema.column(0).max_definition_level == 0) == required
        sizes = pc.binary_length(column).to_pylist()
        with pa.OSFile(str(path), "rb") as source:
            handle = CheckedFile(source, path="get/2024/05/example.com.parquet")
            first = 0
            for g in range(handle.metadata.num_row_groups):
                rows = handle.metadata.row_group(g).num_rows
                read = body_places(handle, g)
                assert read is not None
                with patch.object(_places, "_decompress", side_effect=AssertionError("a page decompressed")):
                    assert body_places(handle, g, sizes[first : first + rows]) == read
                first += rows
