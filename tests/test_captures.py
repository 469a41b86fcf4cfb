"""Captures by SURT key (``WebIndex.captures``, what CDX queries read): inserts,
flushes, compactions and damaged or missing capture indexes, against a list of
every stored response with its SURT key computed by the ``surt`` package."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest.mock import patch

import msgspec
import pytest
import surt
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from msgspec.structs import replace

from tests.factories import metadata
from web_index import WebIndex
from web_index.errors import InvalidRecordError
from web_index.models import STORED_END_US, RecordType, Response
from web_index.storage import CaptureFields, MethodPartition, parse_capture_line
from web_index.storage.indexes._capture_lines import line_row
from web_index.storage.indexes._captures import CaptureIndexes
from web_index.storage.indexes._captures_format import BLOCK_LINES, CaptureIndex, encode_index

# Hosts of one registrable domain (example.com) and of another (example.org).
URLS = [
    "http://example.com/a",
    "https://www.example.com/a",
    "https://www.example.com/a/b?y=2&x=1",
    "http://sub.example.com/",
    "http://example.org/a",
]
# The last second of July: a chain begun then ends in August.
TIMES = [datetime(2024, 7, 31, 23, 59, 59, tzinfo=UTC), datetime(2024, 9, 2, 12, tzinfo=UTC)]
QUERIES = [(u, m) for u in ("https://example.com/a", "http://sub.example.com/x") for m in ("exact", "prefix")]
QUERIES += [("http://www.example.com/", "host"), ("http://example.com/", "domain"), (URLS[4], "domain")]
Row = tuple[str, str, str, str, str, int]  # key, 14-digit time, url, status, request id, position


def partition_domain(url: str) -> str:
    return "example.org" if "example.org" in url else "example.com"


def matches(key: str, query_url: str, match: str) -> bool:
    wanted = surt.surt(query_url)
    host = wanted.split(")", 1)[0]
    return {
        "exact": key == wanted,
        "prefix": key.startswith(wanted),
        "host": key.startswith(host + ")"),
        "domain": key.startswith((host + ")", host + ",")),
    }[match]


def views(lines: list[str]) -> list[tuple[str, str, CaptureFields]]:
    """What a capture's line says wherever it was read from (an index's line says more)."""
    return [parse_capture_line(line) for line in lines]


def newest_first(lines: list[str]) -> list[str]:
    """Lines in key order as ``captures(reverse=True)`` gives them: by key and second
    descending, the captures of one key in one second (ties) still in key order."""
    tied = [line[: line.index(" ") + 15] for line in lines]
    return [
        line for _, _, line in sorted(zip(tied, range(0, -len(lines), -1), lines, strict=True), reverse=True)
    ]


def rows_of(lines: list[str]) -> list[Row]:
    out = []
    for line in lines:
        key, stamp, rest = line.split(" ", 2)
        fields = json.loads(rest)
        out.append((key, stamp, fields["url"], fields["status"], fields["request_id"], fields["position"]))
    return out


class Captures(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.index = WebIndex(self.dir / "s", create=True)
        # Another handle, as a server beside a crawler: it must see what the first one inserts.
        self.reader = WebIndex(self.dir / "s", read_only=True)
        # (type, partition domain, row) of every stored response
        self.stored: list[tuple[str, str, Row]] = []
        self.n = 0

    def teardown(self) -> None:
        self.index.close()
        self.reader.close()
        shutil.rmtree(self.dir)

    @rule(
        start=st.sampled_from(URLS),
        hops=st.lists(st.sampled_from(URLS[:4]), max_size=2),
        at=st.sampled_from(TIMES),
        method=st.sampled_from(["get", "head"]),
    )
    def insert(self, start: str, hops: list[str], at: datetime, method: str) -> None:
        self.n += 1
        at += timedelta(seconds=self.n % 3)  # some captures share a second
        urls = [start, *hops]
        chain = [
            Response(
                url=start,
                request_url=u,
                status_code=200 if i == len(urls) - 1 else 301,
                headers={"Content-Type": "text/html; charset=utf-8"},
                timestamp=at + timedelta(seconds=i),
                data=None if method == "head" else f"{u} {i}".encode(),
                is_final=i == len(urls) - 1,
                fetcher_name="test",
                fetcher_version="1.0",
                fetcher_calibre=10,
            )
            for i, u in enumerate(urls)
        ]
        key = self.index.insert(method, start, at, metadata(start), chain)
        for i, r in enumerate(chain):
            stamp = r.timestamp.strftime("%Y%m%d%H%M%S")
            row = (surt.surt(r.request_url), stamp, r.request_url, str(r.status_code), key.request_id, i)
            self.stored.append((method, partition_domain(start), row))

    @rule()
    def flush(self) -> None:
        self.index.flush()

    @rule()
    def compact(self) -> None:
        self.index.compact()

    @rule()
    def age_the_folders(self) -> None:
        age_folders(self.dir / "s")

    @rule(data=st.data())
    def damage_an_index(self, data: st.DataObject) -> None:
        indexes = sorted((self.dir / "s" / "_captures").rglob("*.cdxj.zst"))
        if indexes:
            path = data.draw(st.sampled_from(indexes))
            raw = bytearray(path.read_bytes())
            raw[-2] ^= 1  # in the last block: the index's CRC no longer matches
            # Replaced, as every store file is written (one mapped already keeps its content).
            path.with_suffix(".tmp").write_bytes(bytes(raw))
            path.with_suffix(".tmp").replace(path)

    @rule(data=st.data())
    def lose_an_index(self, data: st.DataObject) -> None:
        indexes = sorted((self.dir / "s" / "_captures").rglob("*.cdxj.zst"))
        if indexes:
            data.draw(st.sampled_from(indexes)).unlink()

    @invariant()
    def every_query_finds_its_captures(self) -> None:
        for method in ("get", "head"):
            for url, match in QUERIES:
                expected = sorted(
                    row
                    for kind, domain, row in self.stored
                    if kind == method and domain == partition_domain(url) and matches(row[0], url, match)
                )
                for index in (self.index, self.reader):
                    lines = list(index.captures(url, match=match, type=method))
                    found = rows_of(lines)
                    assert sorted(found) == expected, (method, url, match)
                    assert [r[:2] for r in found] == sorted(r[:2] for r in found)
                    # Newest first: an exact match reads month by month (a chain crosses July's end).
                    backwards = list(index.captures(url, match=match, type=method, reverse=True))
                    assert backwards == newest_first(lines), (method, url, match)

    @invariant()
    def a_window_keeps_its_captures(self) -> None:
        # From the first second of August: the hops of a chain begun in July.
        start, end = datetime(2024, 8, 1, tzinfo=UTC), datetime(2024, 9, 2, 12, 0, 1, tzinfo=UTC)
        expected = sorted(
            row
            for kind, domain, row in self.stored
            if kind == "get" and domain == "example.com" and "20240801000000" <= row[1] <= "20240902120001"
        )
        lines = self.index.captures("http://example.com/", match="domain", start=start, end=end)
        found = rows_of(list(lines))
        assert sorted(found) == expected


def age_folders(root: Path, then: float | None = None) -> None:
    """Every folder of the store changed at ``then`` (10 s ago by default): past
    the margin after which a listing may be reused (see LocalBackend.folder_version)."""
    then = time.time() - 10 if then is None else then
    for folder in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        os.utime(folder, (then, then))


def test_captures_against_reference() -> None:
    run_state_machine_as_test(
        Captures, settings=settings(max_examples=30, stateful_step_count=14, deadline=None)
    )


def _response(url: str, at: datetime, data: bytes = b"x") -> Response:
    """A final 200 response of ``url`` at ``at``."""
    return Response(
        url=url,
        request_url=url,
        status_code=200,
        headers={},
        timestamp=at,
        data=data,
        is_final=True,
        fetcher_name="test",
        fetcher_version="1.0",
        fetcher_calibre=10,
    )


def _chain_index(tmp_path: Path) -> WebIndex:
    index = WebIndex(tmp_path / "s", create=True)
    for n in range(300):
        url = f"https://example.com/p/{n:03d}"
        at = TIMES[1] + timedelta(minutes=n)
        index.insert("get", url, at, metadata(url), [_response(url, at)])
    index.flush()
    index.compact()
    return index


def test_compaction_writes_one_index_per_compacted_file(tmp_path: Path) -> None:
    with _chain_index(tmp_path) as index:
        (path,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
        assert path.parent.relative_to(tmp_path / "s") == Path("_captures/get/2024/09")
        opened = CaptureIndex(str(path), path.read_bytes())
        meta = opened.meta
        assert meta.covers == "example.com.parquet" and meta.lines == 300 and meta.rows == 300
        assert meta.blocks == len(opened._block_ends()) == -(-300 // BLOCK_LINES)
        # The file is a zstd stream of the lines (its header a skippable frame).
        with path.open("rb") as fh:
            text = zstandard.ZstdDecompressor().stream_reader(fh, read_across_frames=True).read()
        assert text.splitlines() == list(opened.lines((b"",))) and len(text.splitlines()) == 300
        # Each row of the file has its line, found by its row.
        by_row = [opened.row_line(r) or b"" for r in range(300)]
        assert sorted(by_row) == text.splitlines() and [line_row(line) for line in by_row] == list(range(300))
        # A prefix ending between two sampled lines, and one after the last line.
        found = list(index.captures("https://example.com/p/07", match="prefix"))
        assert [line.split(" ", 1)[0] for line in found] == [f"com,example)/p/{n:03d}" for n in range(70, 80)]
        assert list(index.captures("https://example.com/q", match="prefix")) == []
        assert len(list(index.captures("https://example.com/p/299"))) == 1


def test_a_compaction_replaces_the_index_of_the_file_it_rewrites(tmp_path: Path) -> None:
    with _chain_index(tmp_path) as index:
        (before,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
        index.insert(*_one("https://example.com/p/new"))
        index.flush()
        # The new part is read directly, beside the index of the compacted file.
        assert len(list(index.captures("https://example.com/p/", match="prefix"))) == 301
        index.compact()
        (after,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
        assert after != before and not before.exists()
        assert len(list(index.captures("https://example.com/p/", match="prefix"))) == 301


def test_compact_writes_the_indexes_a_store_lacks(tmp_path: Path) -> None:
    with _chain_index(tmp_path) as index:
        shutil.rmtree(tmp_path / "s" / "_captures")
        assert len(list(index.captures("https://example.com/", match="host"))) == 300  # from the file
        index.compact()
        assert len(list((tmp_path / "s" / "_captures").rglob("*.cdxj.zst"))) == 1


def test_bad_questions_name_their_field(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        with pytest.raises(InvalidRecordError) as err:
            index.captures("https://example.com/", match="everything")
        assert err.value.field == "match"
        with pytest.raises(InvalidRecordError) as err:
            index.captures("https://example.com/", type="get-metadata")
        assert err.value.field == "type"


def _one(url: str) -> tuple[str, str, datetime, object, list[Response]]:
    at = TIMES[1] + timedelta(days=1)
    return ("get", url, at, metadata(url), [_response(url, at, b"y")])


def test_a_damaged_index_is_read_around(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with _chain_index(tmp_path) as index:
        expected = list(index.captures("https://example.com/p/", match="prefix"))
    (path,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
    raw = bytearray(path.read_bytes())
    raw[-2] ^= 1
    path.write_bytes(bytes(raw))
    with WebIndex(tmp_path / "s") as index:
        assert views(list(index.captures("https://example.com/p/", match="prefix"))) == views(expected)
    assert "capture index damaged" in caplog.text


def test_a_latest_lookup_reads_around_a_damaged_block(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A latest lookup takes a month's lines of its key at once (not through the merged
    stream): a damaged block of the index is read around there too, never a missing answer."""
    urls = [f"https://example.com/p/{n:03d}" for n in (0, 150, 299)]
    with _chain_index(tmp_path) as index:
        expected = {url: views(list(index.captures(url, reverse=True))) for url in urls}
    assert all(len(lines) == 1 for lines in expected.values())
    (path,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
    raw = bytearray(path.read_bytes())
    raw[-2] ^= 1  # the last block's: p/299's line
    path.write_bytes(bytes(raw))
    with WebIndex(tmp_path / "s") as index:
        # Read from the file once the index is refused: the fields of a line, not its place.
        assert {url: views(list(index.captures(url, reverse=True))) for url in reversed(urls)} == expected
    assert "capture index damaged" in caplog.text


def _index_bytes(lines: list[bytes], covers: str = "x.parquet", size: int = 1, version: str = "v") -> bytes:
    return encode_index(covers, size, version, [], lines)


def test_lines_of_prefixes_of_any_lengths() -> None:
    lines = sorted(f"{k} 2024{n:010d} {{}}".encode() for k in ("a", "ab", "ac", "b", "x1") for n in range(70))
    index = CaptureIndex("i", _index_bytes(lines))
    for prefixes in [(b"a",), (b"ab",), (b"a", b"ab"), (b"x", b"ab"), (b"ac ", b"b "), (b"c",)]:
        assert list(index.lines(prefixes)) == [line for line in lines if line.startswith(prefixes)]


@settings(max_examples=150, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=1, max_size=6).map(lambda b: b.hex().encode()), max_size=60),
    copies=st.integers(1, 30),
    probes=st.lists(st.binary(max_size=4).map(lambda b: b.hex().encode()), min_size=1, max_size=10),
    block=st.sampled_from([1, 3, 8, 64]),
)
def test_the_bisection_finds_the_first_line_not_below_a_key(
    keys: list[bytes], copies: int, probes: list[bytes], block: int
) -> None:
    """Lines of any lengths, many sharing a key, over blocks of any size: from the first line
    not below each key, exactly the lines that start with it, and each row's line by its row."""
    from web_index.storage.indexes import _captures_format

    lines = sorted(f"{k.decode()} 2024{n:010d} {{}}".encode() for n, k in enumerate(keys * copies))
    with patch.object(_captures_format, "BLOCK_LINES", block):
        index = CaptureIndex("i", _index_bytes(lines))
    for key in [*probes, *keys[:5]]:
        for prefix in (key, key + b" "):  # a prefix, and an exact key (its filter asked first)
            assert list(index.lines((prefix,))) == [line for line in lines if line.startswith(prefix)]
    rowed = sorted(f'{k.decode()} 2024{n:010d} {{"row":{n}}}'.encode() for n, k in enumerate(keys * copies))
    with patch.object(_captures_format, "BLOCK_LINES", block):
        index = CaptureIndex("i", _index_bytes(rowed))
    by_row = {int(line.rsplit(b":", 1)[1][:-1]): line for line in rowed}
    assert [index.row_line(r) for r in range(len(rowed) + 1)] == [
        by_row.get(r) for r in range(len(rowed) + 1)
    ]


def test_a_key_an_index_does_not_hold_reads_no_block() -> None:
    lines = sorted(f"com,example)/p/{n} 2024{n:010d} {{}}".encode() for n in range(0, 4000, 2))
    index = CaptureIndex("i", _index_bytes(lines))
    read: list[int] = []
    real = index._text
    with patch.object(index, "_text", lambda b: read.append(b) or real(b)):
        absent = [n for n in range(1, 4000, 2) if not list(index.lines((f"com,example)/p/{n} ".encode(),)))]
        assert len(absent) == 2000 and len(read) < 0.05 * 2000  # ~1% of them pass the filter
        read.clear()
        assert all(list(index.lines((f"com,example)/p/{n} ".encode(),))) for n in range(0, 4000, 2))
        assert read  # present keys: read, never refused by the filter


def _damaged(data: bytes, at: int) -> bytes:
    raw = bytearray(data)
    raw[at] ^= 1
    return bytes(raw)


_GOOD = _index_bytes([b'a 1 {"row":0}', b'b 2 {"row":1}'])


def _section_start(data: bytes, section: str) -> int:
    """Where a section of the index ``data``'s header starts in it (format 3)."""
    import struct

    from web_index.storage.indexes._captures_format import IndexMeta

    (length,) = struct.unpack_from("<I", data, 4)
    meta_end = data.index(b"\n", 8)
    meta = msgspec.json.decode(data[8 + len(b"!meta ") : meta_end], type=IndexMeta)
    blocks = meta_end + 1
    rows = blocks + 2 * meta.blocks * meta.row_bytes + meta.heads_bytes
    bloom = rows + meta.rows * meta.row_bytes
    assert bloom + meta.bloom_bits // 8 == 8 + length
    return {"heads": rows - 1, "rows": rows, "bloom": bloom}[section]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"!meta {}\nx 1 {}\n", "no header frame"),
        (_GOOD[:8] + b"!meta {not json" + _GOOD[8 + 15 :], "unreadable !meta"),
        (_damaged(_GOOD, _section_start(_GOOD, "heads")), "CRC-32 of its blocks' entries"),
        (_damaged(_GOOD, _section_start(_GOOD, "rows")), "CRC-32 of its row table"),
        (_damaged(_GOOD, _section_start(_GOOD, "bloom")), "CRC-32 of its key filter"),
        (_damaged(_GOOD, 9), "no !meta line"),
        (_GOOD[:-1], "do not fill the file"),
        (_GOOD[:8] + _GOOD[8:].replace(b'"blocks":1', b'"blocks":2'), "sections of other sizes"),
        (b"a 1 {}\n", "no header frame"),
    ],
)
def test_a_damaged_index_is_refused(data: bytes, problem: str) -> None:
    from web_index.errors import CorruptFileError

    with pytest.raises(CorruptFileError, match=problem):
        CaptureIndex("i", data).check()


def test_a_large_index_is_read_by_block_from_its_open_file(tmp_path: Path) -> None:
    """An index of 64 KiB or more is kept open: its header alone is held in memory and
    its blocks are read as needed, with the answers of the same index read whole, also
    once its file was replaced by another (an index written again keeps its name)."""
    import random

    from web_index.storage.indexes import _captures

    rng = random.Random(5)
    lines = sorted(
        f'com,example)/p/{n:05d} 2024{n:010d} {{"row":{n},"x":"{rng.getrandbits(128):032x}"}}'.encode()
        for n in range(3000)
    )
    data = _index_bytes(lines)
    path = tmp_path / "i.cdxj.zst"
    path.write_bytes(data)
    assert len(data) >= _captures._OPEN_MIN
    whole, kept = CaptureIndex("i", data), CaptureIndex("i", _captures._opened(path))
    assert kept.file_backed and not whole.file_backed
    assert kept.held < len(data) // 4 and whole.held == len(data)
    other = tmp_path / "other"
    other.write_bytes(_index_bytes(lines[:10]))
    other.replace(path)  # as a store replaces a file: the open one is still the one read
    for prefix in (b"com,example)/p/0", b"com,example)/p/02999 ", b"com,example)/p/1234", b"com,example)/q"):
        assert list(kept.lines((prefix,))) == list(whole.lines((prefix,)))
    assert [kept.row_line(r) for r in range(0, 3000, 7)] == [whole.row_line(r) for r in range(0, 3000, 7)]


def test_a_batch_reads_each_rows_own_line(tmp_path: Path) -> None:
    """Lines by row for a batch (``row_lines``): each row's own line, whatever the rows
    asked (one a block or many, rows in no order of their lines, lines of any lengths),
    from an index read whole and from one kept open; a row without a line is left out."""
    import random

    from web_index.storage.indexes import _captures

    rng = random.Random(7)
    order = list(range(3000))
    rng.shuffle(order)
    pads = [f"{rng.getrandbits(4 * w):0{w}x}" for w in (rng.randrange(1, 300) for _ in range(3000))]
    lines = [
        f'com,example)/p/{n:05d} 2024{n:010d} {{"row":{order[n]},"x":"{pad}"}}'.encode()
        for n, pad in enumerate(pads)
    ]
    by_row = {order[n]: line for n, line in enumerate(lines)}
    data = _index_bytes(lines)
    path = tmp_path / "i.cdxj.zst"
    path.write_bytes(data)
    assert len(data) >= _captures._OPEN_MIN
    whole, kept = CaptureIndex("i", data), CaptureIndex("i", _captures._opened(path))
    assert kept.file_backed
    for size in (1, 2, 40, 700, 3000):
        for _ in range(3):
            rows = rng.sample(range(3000), size)
            for index in (whole, kept):
                assert dict(index.row_lines([*rows, -1, 3000])) == {r: by_row[r] for r in rows}


def test_each_section_is_checked_when_first_used() -> None:
    """Opening decodes the !meta line only (its cost does not grow with the index); a
    section is checked by its CRC-32 the first time a read needs it, so a damaged one
    is an error there, and the sections a read does not need cost nothing."""
    from web_index.errors import CorruptFileError

    lines = sorted(f"k{n:03d} 2024{n:010d} {{}}".encode() for n in range(100))
    data = _index_bytes(lines)
    rowed = _index_bytes([line.replace(b"{}", b'{"row":%d}' % n) for n, line in enumerate(lines)])
    rows = CaptureIndex("i", _damaged(rowed, _section_start(rowed, "rows")))  # opened
    assert [line[:15] for line in rows.lines((b"k05",))] == [line[:15] for line in lines[50:60]]
    with pytest.raises(CorruptFileError, match="row table"):
        rows.line_number(0)
    bloom = CaptureIndex("i", _damaged(data, _section_start(data, "bloom")))
    assert list(bloom.lines((b"k05",))) == lines[50:60]  # a prefix asks no filter
    with pytest.raises(CorruptFileError, match="key filter"):
        list(bloom.lines((b"k050 ",)))
    heads = CaptureIndex("i", _damaged(data, _section_start(data, "heads")))
    with pytest.raises(CorruptFileError, match="blocks' entries"):
        list(heads.lines((b"k05",)))


def test_a_damaged_block_is_an_error_when_read() -> None:
    """A block is checked when it is read (its zstd checksum, line count and head), not when
    the index is opened: a lookup that meets a damaged one fails naming the index (its
    callers then read the partition instead: test_a_damaged_index_is_read_around)."""
    from web_index.errors import CorruptFileError

    lines = sorted(f"k{n:03d} 2024{n:010d} {{}}".encode() for n in range(100))
    data = _index_bytes(lines)
    index = CaptureIndex("i", _damaged(data, len(data) - 3))  # the last block's frame
    assert list(index.lines((b"k000",))) == [lines[0]]
    with pytest.raises(CorruptFileError, match="block"):
        list(index.lines((b"k099",)))


def test_threads_opening_one_index_count_it_once(tmp_path: Path) -> None:
    import threading

    from web_index.storage._layout import Partition

    with _chain_index(tmp_path) as index:
        store = index._store
        (covered,) = store.month_files(RecordType.GET, 2024, 9)["example.com"]
        partition = Partition(RecordType.GET, 2024, 9, "example.com")
        for _ in range(20):
            cache = CaptureIndexes(store.backend)
            start = threading.Barrier(8)

            def open_it(cache: CaptureIndexes = cache, start: threading.Barrier = start) -> None:
                start.wait()
                assert cache.get(partition, covered) is not None

            threads = [threading.Thread(target=open_it) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert cache._held == sum(i.held for i in cache._opened.values()) > 0


def test_an_index_that_cannot_be_written_fails_no_compaction(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web_index.storage.indexes import _captures_build

    def full_disk(*args: object, **kwargs: object) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_captures_build, "write_capture_index", full_disk)
    with _chain_index(tmp_path) as index:  # flushes and compacts
        assert not (tmp_path / "s" / "_captures").exists()
        assert len(list(index.captures("https://example.com/", match="host"))) == 300
    assert "no capture index for get/2024/09/example.com" in caplog.text
    monkeypatch.undo()
    with WebIndex(tmp_path / "s") as index:
        index.compact()
    assert len(list((tmp_path / "s" / "_captures").rglob("*.cdxj.zst"))) == 1


def test_an_unusable_index_is_warned_of_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with _chain_index(tmp_path):
        pass
    (path,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
    path.write_bytes(b"!meta {}\n")
    with WebIndex(tmp_path / "s") as index:
        for _ in range(3):
            assert len(list(index.captures("https://example.com/", match="host"))) == 300
    assert caplog.text.count("unusable") == 1


def test_verify_reports_capture_indexes(tmp_path: Path) -> None:
    with _chain_index(tmp_path) as index:
        assert index.verify().ok and not [n for n in index.verify().notes if "capture" in n.message]
        (path,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
        opened = CaptureIndex(str(path), path.read_bytes())
        # An index that parses and checks but lost a line: answers from it would be wrong.
        lines = list(opened.lines((b"",)))
        meta = opened.meta
        path.write_bytes(encode_index(meta.covers, meta.size, meta.version, meta.superseded, lines[1:]))
        report = index.verify()
        lines_problem, rows_problem = sorted(
            (p for p in report.problems if "capture" in p.message), key=lambda p: "row table" in p.message
        )
        assert "1 capture(s) missing" in lines_problem.message and "delete" in lines_problem.message
        assert "row table" in rows_problem.message and "delete" in rows_problem.message
        path.unlink()
        report = index.verify()
        assert report.ok and any("no capture index" in n.message for n in report.notes)


def test_an_index_not_read_for_a_passing_fault_is_tried_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web_index.storage.indexes import _captures

    real = _captures.open_capture_index
    calls: list[str] = []

    def flaky(backend: object, path: str) -> object:
        calls.append(path)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return real(backend, path)  # type: ignore[arg-type]

    with _chain_index(tmp_path):
        pass
    monkeypatch.setattr(_captures, "open_capture_index", flaky)
    with WebIndex(tmp_path / "s") as index:
        for _ in range(3):
            assert len(list(index.captures("https://example.com/", match="host"))) == 300
    assert len(calls) == 2  # failed once, then opened and kept


def test_compact_removes_the_index_a_failed_build_left_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from web_index.storage.indexes import _captures_build

    with _chain_index(tmp_path) as index:
        (first,) = (tmp_path / "s" / "_captures").rglob("*.cdxj.zst")
        index.insert(*_one("https://example.org/other"))  # a domain whose index stays right
        index.flush()
        index.compact()
        (other,) = (tmp_path / "s" / "_captures").rglob("example.org.*.cdxj.zst")
        index.insert(*_one("https://example.com/p/new"))
        index.flush()

        def full_disk(*args: object, **kwargs: object) -> str:
            raise OSError(28, "No space left on device")

        with monkeypatch.context() as m:
            m.setattr(_captures_build, "write_capture_index", full_disk)
            # As a flush's automatic compaction does: the file is rewritten, its index not written.
            index._store.compact_partition(MethodPartition(RecordType.GET, 2024, 9, "example.com"))
        assert first.exists()
        assert any("older files" in n.message for n in index.verify().notes)
        index.compact()
        (now,) = (tmp_path / "s" / "_captures").rglob("example.com.*.cdxj.zst")
        assert now != first and not first.exists() and other.exists()
        assert list(index.captures("https://example.org/other")) == [
            line.decode() for line in CaptureIndex(str(other), other.read_bytes()).lines((b"",))
        ]
        assert not [n for n in index.verify().notes if "capture" in n.message]
        assert len(list(index.captures("https://example.com/p/", match="prefix"))) == 301


def test_months_are_listed_again_once_a_folder_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The months a query reads are reused while no folder changed: a new month
    of a known year, and a new year, are found at once."""
    url = "https://example.com/a"
    with WebIndex(tmp_path / "s") as index:
        backend = index._store.backend
        listed: list[str] = []
        original = backend.list_folders
        monkeypatch.setattr(backend, "list_folders", lambda f: listed.append(f) or original(f))
        for n, at in enumerate([TIMES[0], TIMES[1], datetime(2025, 1, 5, tzinfo=UTC)], start=1):
            index.insert("get", url, at, metadata(url), [_response(url, at)])
            index.flush()  # a new month folder: in the year's folder, or a new year's
            assert len(list(index.captures(url))) == n
            age_folders(tmp_path / "s", then=time.time() - 3600 + n)
            assert len(list(index.captures(url))) == n
            listed.clear()
            assert len(list(index.captures(url))) == n
            assert not [f for f in listed if f.startswith("get")]  # the months were not listed again


def test_newest_first_waits_for_a_chain_begun_the_month_before(tmp_path: Path) -> None:
    """A chain begun in July ends in August after an attempt begun in August: read from the
    newest month, August's capture must wait for July's, and ties keep one order."""
    url = "https://example.com/a"
    start = "https://example.com/b"
    hop = replace(_response(url, TIMES[0] + timedelta(seconds=2)), url=start)
    july = [replace(_response(start, TIMES[0]), status_code=301, is_final=False), hop]
    with WebIndex(tmp_path / "s") as index:
        index.insert("get", start, TIMES[0], metadata(start), july)
        august = datetime(2024, 8, 1, tzinfo=UTC)
        for at in (august, august, august + timedelta(days=3)):
            index.insert("get", url, at, metadata(url), [_response(url, at)])
        for flushed in (False, True):
            lines = list(index.captures(url))
            assert len(lines) == 4
            assert list(index.captures(url, reverse=True)) == newest_first(lines), flushed
            assert newest_first(lines) != lines[::-1]  # two captures in August's first second
            index.flush()


CHAIN_URLS = st.sampled_from([*URLS, "https://example.com/a?z=1", "http://EXAMPLE.com/%7Ea"])


@settings(max_examples=40, deadline=None)
@given(
    attempts=st.lists(
        st.tuples(
            st.sampled_from(["get", "head"]),
            st.lists(CHAIN_URLS, min_size=1, max_size=3),
            st.sampled_from(TIMES),
            st.binary(max_size=64),
            st.sampled_from(
                [{}, {"Content-Type": "Text/HTML; charset=utf-8"}, {"content-type": "image/png"}]
            ),
            st.sampled_from([200, 404, 500]),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_buffered_captures_are_the_lines_of_the_flushed_and_compacted_store(
    attempts: list[tuple[str, list[str], datetime, bytes, dict[str, str], int]],
) -> None:
    """What every query finds while its captures are buffered (each line's digest, mime,
    status and which response it is) is what it finds once they are flushed, and once
    compacted (read from the capture index); and each line's response, read by its place
    once compacted, is the one the buffer gave."""
    with tempfile.TemporaryDirectory() as tmp, WebIndex(Path(tmp) / "s") as index:
        for n, (method, urls, at, body, headers, status) in enumerate(attempts):
            chain = [
                Response(
                    url=urls[0],
                    request_url=u,
                    status_code=status if i == len(urls) - 1 else 301,
                    headers=headers,
                    timestamp=at + timedelta(seconds=n + i),
                    data=None if method == "head" else body + bytes([i]),
                    is_final=i == len(urls) - 1,
                    fetcher_name="test",
                    fetcher_version="1.0",
                    fetcher_calibre=10,
                )
                for i, u in enumerate(urls)
            ]
            index.insert(method, urls[0], at + timedelta(seconds=n), metadata(urls[0]), chain)

        def answers() -> list[list[str]]:
            return [
                list(index.captures(url, match=match, type=method, reverse=reverse))
                for method in ("get", "head")
                for url, match in [*QUERIES, ("http://example.com/%7Ea", "exact")]
                for reverse in (False, True)
            ]

        def responses(found: list[list[str]]) -> dict[tuple[str, int], Response | None]:
            kinds = [method for method in ("get", "head") for _ in range(len(found) // 2)]
            return {
                (where.request_id, where.position): index.capture_response(line, type=kind)
                for lines, kind in zip(found, kinds, strict=True)
                for line in lines
                for where in [parse_capture_line(line)[2]]
            }

        buffered = answers()
        assert any(buffered)
        stored = responses(buffered)
        index.flush()
        assert [views(a) for a in answers()] == [views(a) for a in buffered]
        index.compact()
        compacted = answers()
        assert [views(a) for a in compacted] == [views(a) for a in buffered]
        assert all('"row":' in line for lines in compacted for line in lines)  # from the index
        with patch.object(index, "query", side_effect=AssertionError("not by its place")):
            assert responses(compacted) == stored


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_lookup_reads_no_body_of_the_buffered_records_of_its_domain(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """With many records of a domain buffered, a CDX lookup (and the standard's queries) decode
    no buffered row (the blobs hold the bodies) but the ones it returns, and hash no body."""
    from web_index.models import PageKey, SimplePageQuery, TimeAwarePageQuery
    from web_index.storage import _tables
    from web_index.storage.buffer import _sqlite_reads, base, postgres
    from web_index.storage.indexes import _capture_lines

    dsn = request.getfixturevalue("postgres").new_database() if kind == "postgres" else None
    index = WebIndex(tmp_path / "s", buffer=dsn)

    def page(i: int) -> tuple[object, ...]:
        url = f"https://example.com/p{i}"
        response = Response(
            url=url,
            request_url=url,
            status_code=200,
            headers={},
            timestamp=TIMES[i % 2],
            data=b"x" * 4096 + bytes([i % 256]),
            is_final=True,
            fetcher_name="test",
            fetcher_version="1.0",
            fetcher_calibre=10,
        )
        return ("get", url, TIMES[i % 2], metadata(url), [response])

    keys = index.insert_many([page(i) for i in range(300)])  # type: ignore[misc]
    decoded: list[int] = []
    hashed: list[int] = []
    real_decode, real_sha1, real_digests = base._decode, _capture_lines.payload_sha1, _tables.payload_digests

    def decode(blob: bytes) -> object:
        decoded.append(len(blob))
        return real_decode(blob)

    def sha1(body: bytes) -> bytes:
        hashed.append(len(body))
        return real_sha1(body)

    def digests(body: bytes) -> tuple[bytes, bytes]:
        hashed.append(len(body))
        return real_digests(body)

    with (
        patch.object(base, "_decode", decode),
        patch.object(_sqlite_reads, "_decode", decode),
        patch.object(postgres, "_decode", decode),
        patch.object(_capture_lines, "payload_sha1", sha1),
        patch.object(_tables, "payload_digests", digests),
    ):
        # The writer's handle, and a server's.
        for reader in (index, WebIndex(tmp_path / "s", read_only=True, buffer=dsn)):
            for i in (0, 7, 299):
                url = f"https://example.com/p{i}"
                assert len(list(reader.captures(url))) == 1
                assert len(list(reader.captures(url, reverse=True))) == 1
                assert len(list(reader.captures("https://example.com/p29", match="prefix"))) == 11
            assert decoded == [] and hashed == []
            # The standard's queries: only the winner's row is read.
            page = reader.query([SimplePageQuery(url="https://example.com/p7")])[0]
            blobs = 2 if kind == "postgres" else 1  # a row's blobs: PostgreSQL keeps metadata apart
            assert page is not None and len(decoded) == blobs
            closest = TimeAwarePageQuery(url="https://example.com/p8", timestamp=TIMES[0])
            exact = PageKey(url=keys[9].url, timestamp=keys[9].timestamp, request_id=keys[9].request_id)
            assert all(reader.query([closest, exact])) and len(decoded) == 3 * blobs
            assert hashed == []
            decoded.clear()
            reader.close()


_HOUR_US = 3600 * 1_000_000


@given(
    st.integers(1970, 9998),
    st.integers(1, 12),
    st.integers(-2 * _HOUR_US, 2 * _HOUR_US) | st.integers(0, 31 * 24 * _HOUR_US),
    st.integers(0, 70 * 24 * _HOUR_US),
)
def test_a_narrow_window_names_the_months_a_listing_would_keep(
    year: int, month: int, offset: int, width: int
) -> None:
    """A lookup's window of one or two months is answered from those months' folders
    alone: exactly the months the store's listing, filtered by the window, would keep."""
    from web_index.storage.indexes import _capture_scan

    begins = int(datetime(year, month, 1, tzinfo=UTC).timestamp()) * 1_000_000
    start = min(max(begins + offset, 0), STORED_END_US - 1)  # near a month's start, or anywhere in it
    end = start + width
    named = _capture_scan._window_months(start, end)
    if named is None:
        return
    first = time.gmtime(max(start - 2 * _HOUR_US, 0) // 1_000_000)
    y, m = first.tm_year, first.tm_mon
    kept = []
    for _ in range(5):  # every month from just before the window to past two of them
        if y <= 9998 and _capture_scan._overlaps(y, m, start, end):
            kept.append((y, m))
        y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    assert named == kept[::-1]
