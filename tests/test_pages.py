"""One record, one read (issue 38): bodies read from their one data page.

Big ``get`` files are written with small body pages and the page index; a
lookup reads a body's page through ``storage/pages/_reader.py`` instead of its row
group. These tests hold that reader to pyarrow's (every body equal to what
pyarrow decodes from the row group), check that the files are still plain
Parquet for pyarrow and polars, and that a file without a page index, or of
another writer, is read by row group as before.
"""

from __future__ import annotations

import functools
import os
import random
import uuid
import weakref
from datetime import timedelta
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.factories import T0, attempt, judge_damage
from tests.servers import SeaweedFS
from web_index import FlushPolicy, WebIndex
from web_index.errors import CorruptFileError
from web_index.models import RecordType, SimplePageQuery
from web_index.storage import Partition, WriteOptions
from web_index.storage._files import outdated, read_superseded, write_partition_file
from web_index.storage._tables import columns_to_table
from web_index.storage.backends import LocalBackend, S3Backend
from web_index.storage.pages import _known, _reader
from web_index.storage.pages._checksum import CheckedFile
from web_index.storage.pages._reader import body_pages, read_group

PARTITION = Partition(RecordType.GET, 2024, 8, "a.com")


def _table(bodies: list[bytes]) -> pa.Table:
    n = len(bodies)
    urls = [f"https://a.com/{i:06d}" for i in range(n)]
    ts = [1722513600000000 + i for i in range(n)]
    return columns_to_table(
        RecordType.GET,
        dict(
            url_key=urls,
            url=urls,
            attempt_timestamp=ts,
            request_id=[str(uuid.UUID(int=i + 1)) for i in range(n)],
            chain_index=[0] * n,
            request_url=urls,
            status_code=[200] * n,
            headers=['{"content-type": "text/html"}'] * n,
            data=bodies,
            timestamp=ts,
            retry_attempt=[0] * n,
            is_final=[True] * n,
            fetcher_name=["t"] * n,
            fetcher_version=["1"] * n,
            fetcher_calibre=[10] * n,
        ),
    )


def _write(root: Path, bodies: list[bytes], options: WriteOptions) -> tuple[LocalBackend, pq.ParquetFile]:
    (root / "get" / "2024" / "08").mkdir(parents=True, exist_ok=True)
    backend = LocalBackend(root)
    write_partition_file(backend, PARTITION, _table(bodies), options, part=None)
    return backend, backend.open_parquet(PARTITION.compacted_path)


def _paged_bodies(handle: pq.ParquetFile) -> list[bytes | None]:
    """Every body of the file, each read on its own through the page path."""
    out: list[bytes | None] = []
    for g in range(handle.metadata.num_row_groups):
        for r in range(handle.metadata.row_group(g).num_rows):
            _table, bodies = read_group(handle, g, [r])
            assert bodies is not None, "read by row group, not by page"
            out.append(bodies[r])
    return out


def _pyarrow_bodies(handle: pq.ParquetFile) -> list[bytes | None]:
    groups = range(handle.metadata.num_row_groups)
    return [b for g in groups for b in handle.read_row_group(g, columns=["data"]).column(0).to_pylist()]


def _text(rng: random.Random, size: int) -> bytes:
    words = [b"<p>", b"the", b"web", b"index", b"page", b"</p>\n", b"\xc3\xa9t\xc3\xa9", b"body"]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


_sizes = st.one_of(
    st.just(0),
    st.integers(1, 64),
    st.integers(65, 8 << 10),
    st.integers(8 << 10, 1 << 20),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    specs=st.lists(st.tuples(_sizes, st.booleans()), min_size=1, max_size=60),
    group_rows=st.sampled_from([1, 3, 128]),
    page_bytes=st.sampled_from([1 << 10, 16 << 10, 64 << 10]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_body_read_by_page_is_what_pyarrow_reads_from_its_row_group(
    tmp_path_factory: pytest.TempPathFactory,
    specs: list[tuple[int, bool]],
    group_rows: int,
    page_bytes: int,
    seed: int,
) -> None:
    rng = random.Random(seed)
    bodies = [rng.randbytes(size) if binary else _text(rng, size) for size, binary in specs]
    options = WriteOptions(
        body_row_group_rows=group_rows, group_min_bytes=0, body_page_bytes=page_bytes, paged_min_bytes=0
    )
    _backend, handle = _write(tmp_path_factory.mktemp("pages"), bodies, options)
    assert body_pages(handle) is not None
    expected = _pyarrow_bodies(handle)
    assert expected == bodies
    assert _paged_bodies(handle) == expected
    # Several rows of a group at once, in any order, give the same bodies,
    # by page, and through read_group (by page, or by row group when they
    # span more than a third of the group's pages).
    pages = body_pages(handle)
    assert pages is not None
    start = 0
    for g in range(handle.metadata.num_row_groups):
        n = handle.metadata.row_group(g).num_rows
        rows = rng.sample(range(n), rng.randint(1, n))
        got = pages.read(g, rows)
        assert {r: got[r] for r in rows} == {r: expected[start + r] for r in rows}
        table, paged = read_group(handle, g, rows)
        bodies = paged if paged is not None else dict(enumerate(table.column("data").to_pylist()))
        assert {r: bodies[r] for r in rows} == {r: expected[start + r] for r in rows}
        start += n


def test_an_empty_body_and_one_of_64_mib_read_by_page(tmp_path: Path) -> None:
    big = os.urandom(64 << 20)  # the largest body the issue asks the page path to carry
    bodies = [b"", b"x" * 3000, big, b"", b"tail"]
    _backend, handle = _write(tmp_path, bodies, WriteOptions(paged_min_bytes=0))
    assert _paged_bodies(handle) == bodies


def test_big_files_carry_the_page_index_and_small_ones_do_not(tmp_path: Path) -> None:
    options = WriteOptions()
    _b, small = _write(tmp_path / "small", [b"<p>small</p>" * 10] * 20, options)
    _b, big = _write(tmp_path / "big", [os.urandom(2000) for _ in range(600)], options)
    assert not small.metadata.row_group(0).column(8).has_offset_index
    assert body_pages(small) is None
    meta = big.metadata
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            assert meta.row_group(g).column(c).has_offset_index
    assert body_pages(big) is not None
    # Pages of about body_page_bytes: many in a row group, none of megabytes.
    pages = body_pages(big)
    assert pages is not None
    index = pages._index(0)
    assert len(index) > 5
    assert max(p.size for p in index) <= 1.6 * options.body_page_bytes


def test_small_files_spend_no_bytes_on_dictionaries_unused_statistics_or_an_empty_list(
    tmp_path: Path,
) -> None:
    # Most partition files hold tens of rows: their footers are a large share
    # of the store (docs/format.md). A dictionary page, statistics no read uses
    # and an empty superseded list cost bytes in each of them.
    options = WriteOptions()
    names = _table([b""]).column_names
    for rows, dictionary in ((20, False), (options.dictionary_min_rows, True)):
        bodies = [b"<p>%d</p>" % i for i in range(rows)]
        _b, handle = _write(tmp_path / str(rows), bodies, options)
        meta = handle.metadata
        for c, name in enumerate(names):
            column = meta.row_group(0).column(c)
            assert column.is_stats_set == (name == "url_key"), name
            expected = dictionary and name in ("fetcher_name", "fetcher_version")
            assert column.has_dictionary_page == expected, (rows, name)
        assert b"web_index.superseded" not in (meta.metadata or {})
        assert handle.read().select(names).to_pylist() == _table(bodies).select(names).to_pylist()
    (tmp_path / "list" / "get" / "2024" / "08").mkdir(parents=True)
    backend = LocalBackend(tmp_path / "list")
    absorbed = str(uuid.UUID(int=5))
    write_partition_file(backend, PARTITION, _table([b"x"]), options, part=None, superseded=[absorbed])
    handle = backend.open_parquet(PARTITION.compacted_path)
    assert read_superseded(handle, PARTITION.compacted_path) == {absorbed}


def test_a_compactions_stream_gets_pages_of_the_page_size(tmp_path: Path) -> None:
    # A compaction writes row groups as they come; its page size follows the
    # mean body of the first two, whatever the dictionary rule makes of them.
    options = WriteOptions()
    rng = random.Random(5)
    first, second = (_table([rng.randbytes(8 << 10) for _ in range(128)]) for _ in range(2))
    (tmp_path / "get" / "2024" / "08").mkdir(parents=True)
    backend = LocalBackend(tmp_path)
    write_partition_file(backend, PARTITION, [first, second], options, part=None)
    handle = backend.open_parquet(PARTITION.compacted_path)
    pages = body_pages(handle)
    assert pages is not None
    sizes = [p.size for g in range(2) for p in pages._index(g)]
    assert max(sizes) <= 1.6 * options.body_page_bytes, sizes


def test_outdated_is_what_a_rewrite_would_change_and_nothing_else(tmp_path: Path) -> None:
    options = WriteOptions()
    line = options.paged_min_bytes
    unpaged = WriteOptions(paged_min_bytes=1 << 62)
    cases = {
        "just under the line, as written now": ([b"x" * (line - 20)], options, None, False),
        "over the line, unpaged": ([b"x" * (line + 4096)], unpaged, None, True),
        "over the line, paged": ([b"x" * (line + 4096)], options, None, False),
        "format 2": ([b"x"], options, b"2", True),
        "format 3 (no payload references: nothing to rewrite)": ([b"x"], options, b"3", False),
        "a newer format": ([b"x" * (line + 4096)], unpaged, b"5", False),
        "another writer's": ([b"x" * (line + 4096)], unpaged, b"", False),
    }
    for name, (bodies, written_with, format, expected) in cases.items():
        _b, handle = _write(tmp_path / name.replace(" ", "-"), bodies, written_with)
        meta = handle.metadata
        if format is not None:  # the same file, as that writer would have labelled it
            path = tmp_path / "relabelled.parquet"
            labels = {} if not format else {b"web_index.format": format}
            pq.write_table(handle.read().replace_schema_metadata(labels), path)
            meta = pq.read_metadata(path)
        assert outdated(meta, RecordType.GET, options) is expected, name
    no_body = pq.read_metadata(_relabel(tmp_path, _table([b"x" * (line + 4096)]).drop_columns(["data"])))
    assert outdated(no_body, RecordType.GET, options) is False


def _relabel(tmp_path: Path, table: pa.Table) -> Path:
    path = tmp_path / "no-body.parquet"
    pq.write_table(table.replace_schema_metadata({b"web_index.format": b"3"}), path)
    return path


def test_a_page_reader_does_not_keep_its_file_open(tmp_path: Path) -> None:
    # Readers are kept per open file, weakly: a file read by page must close
    # (and a local store's mapping of it go) when its last user lets it go.
    bodies = [os.urandom(3000) for _ in range(200)]
    _b, handle = _write(tmp_path, bodies, WriteOptions(paged_min_bytes=0))
    pages = body_pages(handle)
    assert pages is not None and pages.read(0, [3])[3] == bodies[3]
    gone = weakref.ref(handle)
    del handle, pages
    assert gone() is None


def test_the_files_are_still_plain_parquet_for_pyarrow_and_polars(tmp_path: Path) -> None:
    bodies = [os.urandom(random.Random(i).randrange(0, 9000)) for i in range(500)] + [b""]
    _backend, handle = _write(tmp_path, bodies, WriteOptions(paged_min_bytes=0))
    assert body_pages(handle) is not None
    path = tmp_path / PARTITION.compacted_path
    assert pq.read_table(path).column("data").to_pylist() == bodies
    assert pq.ParquetFile(path, page_checksum_verification=True).read().num_rows == len(bodies)
    frame = pl.read_parquet(path)
    assert frame["data"].to_list() == bodies
    assert frame["url_key"].to_list() == _table(bodies).column("url_key").to_pylist()
    duckdb = pytest.importorskip("duckdb")  # a dev dependency (the benches' peer)
    rows = duckdb.sql(f"SELECT data FROM read_parquet('{path}')").fetchall()
    assert [r[0] for r in rows] == bodies


def test_rows_on_many_pages_of_a_group_are_read_by_row_group(tmp_path: Path) -> None:
    bodies = [os.urandom(3000) for _ in range(300)]
    options = WriteOptions(
        paged_min_bytes=0, body_row_group_rows=300, group_max_bytes=1 << 40, body_page_bytes=16 << 10
    )
    _backend, handle = _write(tmp_path, bodies, options)
    pages = body_pages(handle)
    assert pages is not None and len(pages._index(0)) > 30
    table, paged = read_group(handle, 0, [1, 2])
    assert paged is not None and paged[1] == bodies[1] and "data" not in table.column_names
    table, paged = read_group(handle, 0, range(0, 300, 3))  # every page
    assert paged is None and table.column("data").to_pylist() == bodies


def test_a_file_without_a_page_index_is_read_by_row_group(tmp_path: Path) -> None:
    bodies = [os.urandom(3000) for _ in range(300)]
    _backend, handle = _write(tmp_path, bodies, WriteOptions(paged_min_bytes=1 << 40))
    assert not handle.metadata.row_group(0).column(8).has_offset_index
    assert body_pages(handle) is None
    table, paged = read_group(handle, 0, [5])
    assert paged is None and table.column("data")[5].as_py() == bodies[5]


def _foreign(tmp_path: Path, **options: object) -> CheckedFile:
    """The store's rows written by plain pyarrow with other settings, opened as the store would."""
    bodies = [b"", *(os.urandom(500 + i) for i in range(200))]
    table = _table(bodies)
    path = tmp_path / "foreign.parquet"
    pq.write_table(table, path, write_page_index=True, data_page_size=2048, write_batch_size=2, **options)  # type: ignore[arg-type]
    return CheckedFile(pa.BufferReader(path.read_bytes()), path="foreign.parquet")


def test_another_writers_dictionary_encoded_bodies_are_read_by_row_group(tmp_path: Path) -> None:
    handle = _foreign(tmp_path, use_dictionary=True)
    assert body_pages(handle) is None
    table, paged = read_group(handle, 0, [3])
    assert paged is None and table.num_rows == 201


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("compression", ["zstd", "snappy", "none"])
def test_another_writers_pages_v1_and_v2_optional_column_read_by_page(
    tmp_path: Path, version: str, compression: str
) -> None:
    # pyarrow infers no schema here: the body column is optional, with
    # definition levels; no CRCs (not a store file). Nulls in a run of 35 and
    # scattered between values: level runs of both forms (RLE and bit-packed).
    rng = random.Random(5)
    bodies: list[bytes | None] = [b"", None, *(os.urandom(500 + i) for i in range(200))]
    bodies[40:75] = [None] * 35
    for i in rng.sample(range(80, len(bodies)), 30):
        bodies[i] = None
    plain = pa.table(
        {"request_id": [str(i) for i in range(len(bodies))], "data": pa.array(bodies, pa.binary())}
    )
    path = tmp_path / "foreign.parquet"
    pq.write_table(
        plain,
        path,
        write_page_index=True,
        data_page_size=2048,
        write_batch_size=2,
        use_dictionary=False,
        data_page_version=version,
        compression=compression,
    )
    handle = CheckedFile(pa.BufferReader(path.read_bytes()), path="foreign.parquet")
    assert handle.schema.column(1).max_definition_level == 1
    assert len(body_pages(handle)._index(0)) > 10  # type: ignore[union-attr]
    assert _paged_bodies(handle) == _pyarrow_bodies(handle) == bodies


def _big_store(root: Path) -> tuple[WebIndex, list[SimplePageQuery], list[object]]:
    idx = WebIndex(root, policy=FlushPolicy(compact_parts=0, max_age_s=10**6))
    rng = random.Random(7)
    urls = [f"https://shop.example.com/p{i}" for i in range(150)]
    for round in range(2):
        idx.insert_many(
            attempt(url, T0 + timedelta(days=round, minutes=i), hops=1 + i % 2, body=rng.randbytes(2000 + i))
            for i, url in enumerate(urls)
        )
        idx.flush()
    idx.compact()
    queries = [SimplePageQuery(url=u) for u in urls[::10]]
    return idx, queries, idx.query(queries)


def test_compact_with_min_parts_0_gives_a_big_file_of_an_older_version_its_pages(tmp_path: Path) -> None:
    root = tmp_path / "store"
    rng = random.Random(3)
    urls = [f"https://shop.example.com/p{i}" for i in range(150)]
    items = [attempt(url, T0 + timedelta(minutes=i), body=rng.randbytes(3000)) for i, url in enumerate(urls)]
    small = [attempt("https://other.example.org/", T0, body=b"<p>small</p>")]
    # As a version without body pages wrote it: one big compacted file, no page index.
    unpaged = WriteOptions(paged_min_bytes=1 << 62)
    with WebIndex(root, write_options=unpaged, policy=FlushPolicy(compact_parts=0)) as idx:
        idx.insert_many([*items, *small])
        idx.flush()
        idx.compact()
        before = idx.query([SimplePageQuery(url=u) for u in [*urls, "https://other.example.org/"]])

    def files() -> dict[str, tuple[int, bool]]:
        out = {}
        for path in sorted((root / "get").rglob("*.parquet")):
            meta = pq.read_metadata(path)
            out[path.name] = (path.stat().st_ino, meta.row_group(0).column(8).has_offset_index)
        return out

    old = files()
    assert [paged for _ino, paged in old.values()] == [False, False]
    with WebIndex(root, policy=FlushPolicy(compact_parts=0)) as idx:
        notes = [n.where.rsplit("/", 1)[-1] for n in idx.verify().notes if "--min-parts 0" in n.message]
        assert notes == ["example.com.parquet"]
        assert idx.compact() == 0 and files() == old  # no parts: nothing to do
        assert idx.compact(min_parts=0) == 1  # the big file; the small one is as it would be written now
        new = files()
        assert (
            new["example.com.parquet"][1] and new["example.com.parquet"][0] != old["example.com.parquet"][0]
        )
        assert new["example.org.parquet"] == old["example.org.parquet"]
        assert idx.query([SimplePageQuery(url=u) for u in [*urls, "https://other.example.org/"]]) == before
        assert idx.verify().problems == []
        assert idx.compact(min_parts=0) == 0  # nothing is outdated now
        assert not [n for n in idx.verify().notes if "--min-parts 0" in n.message]
    # A small file of an older format (2: no payload digests) is rewritten too.
    path = next((root / "get").rglob("example.org.parquet"))
    table = pq.read_table(path).drop_columns(["payload_sha1", "payload_sha256"])
    pq.write_table(table.replace_schema_metadata({b"web_index.format": b"2"}), path)
    with WebIndex(root, policy=FlushPolicy(compact_parts=0)) as idx:
        assert idx.compact(min_parts=0) == 1
        assert (pq.read_metadata(path).metadata or {})[b"web_index.format"] == b"4"
        assert "payload_sha1" in pq.read_schema(path).names
        assert idx.query([SimplePageQuery(url=u) for u in [*urls, "https://other.example.org/"]]) == before
        assert idx.verify().problems == []


def test_queries_read_bodies_by_page_and_answer_as_by_row_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    idx, queries, answers = _big_store(tmp_path / "store")
    target = next((tmp_path / "store" / "get").rglob("*.parquet"))
    rel = target.relative_to(tmp_path / "store").as_posix()
    handle = idx._store.backend.open_parquet(rel)
    assert body_pages(handle) is not None
    assert all(a is not None for a in answers)
    # The same queries with the page path turned off answer the same.
    monkeypatch.setattr(_reader, "body_pages", lambda handle: None)
    assert idx.query(queries) == answers
    idx.close()


def test_a_flipped_bit_in_a_paged_file_is_an_error_naming_it_or_the_right_answer(tmp_path: Path) -> None:
    idx, queries, expected = _big_store(tmp_path / "store")
    target = next((tmp_path / "store" / "get").rglob("*.parquet"))
    rel = target.relative_to(tmp_path / "store").as_posix()
    data = target.read_bytes()
    handle = idx._store.backend.open_parquet(rel)
    pages = body_pages(handle)
    assert pages is not None
    meta = handle.metadata
    # The bytes only the page path reads: body pages (headers and values) of the
    # row groups the queries hit, and the body column's offset indexes.
    spots: list[int] = []
    for g in range(meta.num_row_groups):
        for p in pages._index(g):
            spots += [p.offset, p.offset + 1, p.offset + 5, p.offset + p.size // 2, p.offset + p.size - 1]
        where = pages._locate(g, meta.row_group(g).column(pages.column))
        assert where is not None
        spots += range(where[0], where[0] + where[1])
    rng = random.Random("paged-flips")
    outcomes = {"right": 0, "error": 0}
    try:
        for pos in sorted(set(spots)):
            bit = rng.randrange(8)
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            _replace(target, bytes(flipped))
            _known.KNOWN.clear()  # what the intact file taught would hide a damaged offset index
            ask = functools.partial(idx.query, queries)
            judge_damage(ask, expected, rel, outcomes, f"byte {pos} bit {bit}")
    finally:
        _replace(target, data)
    assert idx.query(queries) == expected
    idx.close()
    assert outcomes["error"] > 0, outcomes
    print("paged flips", outcomes)


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".flip")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def test_on_s3_a_body_is_one_small_ranged_read_pinned_to_the_version(
    seaweed: SeaweedFS, tmp_path: Path
) -> None:
    loc = seaweed.new_store()
    idx, _queries, answers = _big_store(loc)  # type: ignore[arg-type]
    local, _q, local_answers = _big_store(tmp_path / "store")
    # The same bodies (request ids differ from store to store).
    assert [[r.data for r in a.responses] for a in answers] == [  # type: ignore[union-attr]
        [r.data for r in a.responses]  # type: ignore[union-attr]
        for a in local_answers
    ]
    backend = S3Backend(loc, tail_bytes=64 << 10)  # the body pages not in the first read of the tail
    name = next(f.name for f in backend.list_files("get/2024/08") if f.name.endswith(".parquet"))
    handle = backend.open_parquet(f"get/2024/08/{name}")
    pages = body_pages(handle)
    assert pages is not None
    expected = handle.read_row_group(0, columns=["data"]).column(0)[7].as_py()
    chunk = handle.metadata.row_group(0).column(pages.column)
    body_start, body_end = chunk.data_page_offset, chunk.data_page_offset + chunk.total_compressed_size
    fetched: list[tuple[int, int]] = []
    real = backend.get_range

    def counting(path: str, start: int, end: int, etag: str | None) -> bytes:
        assert etag is not None  # every range pinned to the version opened
        fetched.append((start, end))
        return real(path, start, end, etag)

    backend.get_range = counting  # type: ignore[method-assign]
    _table, bodies = read_group(handle, 0, [7])
    assert bodies is not None and bodies[7] == expected
    # Of the body chunk's bytes, one read of one page (the other columns and
    # the offset index lie outside it).
    body_reads = [e - s for s, e in fetched if s < body_end and e > body_start]
    assert len(body_reads) == 1 and body_reads[0] <= 1.6 * WriteOptions().body_page_bytes, fetched
    assert body_end - body_start > 5 * body_reads[0]
    idx.close()
    local.close()


def test_a_big_file_written_before_is_read_by_row_group_and_paged_by_its_next_compaction(
    tmp_path: Path,
) -> None:
    root = tmp_path / "store"
    urls = [f"https://shop.example.com/p{i}" for i in range(200)]
    rng = random.Random(3)
    policy = FlushPolicy(compact_parts=0, max_age_s=10**6)
    old_settings = WriteOptions(paged_min_bytes=1 << 62)  # as files were written before
    with WebIndex(root, policy=policy, write_options=old_settings) as idx:
        idx.insert_many(
            attempt(u, T0 + timedelta(minutes=i), body=rng.randbytes(3000)) for i, u in enumerate(urls)
        )
        idx.flush()
        idx.compact()
        path = next(p for p in idx._store.backend.list_files("get/2024/08") if p.name.endswith(".parquet"))
        rel = f"get/2024/08/{path.name}"
        assert body_pages(idx._store.backend.open_parquet(rel)) is None
        queries = [SimplePageQuery(url=u) for u in urls[::7]]
        before = idx.query(queries)
        assert all(a is not None for a in before)
    with WebIndex(root, policy=policy) as idx:
        assert idx.query(queries) == before  # read by row group
        idx.insert_many([attempt("https://shop.example.com/new", T0, body=b"new")])
        idx.flush()
        assert idx.compact() >= 1
        assert body_pages(idx._store.backend.open_parquet(rel)) is not None
        assert idx.query(queries) == before  # now by page


def test_on_s3_a_page_of_an_object_replaced_since_its_open_is_gone_not_a_body(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    idx, _queries, _answers = _big_store(loc)  # type: ignore[arg-type]
    backend = S3Backend(loc, tail_bytes=64 << 10)
    name = next(f.name for f in backend.list_files("get/2024/08") if f.name.endswith(".parquet"))
    path = f"get/2024/08/{name}"
    handle = backend.open_parquet(path)
    pages = body_pages(handle)
    assert pages is not None
    _known.KNOWN.clear()
    backend.put(path, b"another version")  # as a compaction's commit would replace it
    # Gone (the reader lists again), never bytes of another version: the page's
    # range is fetched with If-Match on the ETag the handle opened.
    with pytest.raises(FileNotFoundError):
        pages.read(0, [7])
    with pytest.raises(FileNotFoundError):
        read_group(handle, 0, [7])
    idx.close()


def test_a_damaged_body_page_is_an_error_naming_the_file_and_the_record(tmp_path: Path) -> None:
    bodies = [os.urandom(3000) for _ in range(200)]
    backend, handle = _write(tmp_path, bodies, WriteOptions(paged_min_bytes=0))
    pages = body_pages(handle)
    assert pages is not None
    page = pages._index(0)[0]
    path = tmp_path / PARTITION.compacted_path
    data = bytearray(path.read_bytes())
    data[page.offset + page.size - 100] ^= 0x10  # inside the page's compressed values
    _replace(path, bytes(data))
    _known.KNOWN.clear()
    fresh = backend.open_parquet(PARTITION.compacted_path)
    with pytest.raises(CorruptFileError) as caught:
        read_group(fresh, 0, [0])
    assert caught.value.path == PARTITION.compacted_path
    assert str(uuid.UUID(int=1)) in caught.value.problem and "checksum" in caught.value.problem
