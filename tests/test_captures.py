"""Captures by SURT key (``WebIndex.captures``, what CDX queries read): inserts,
flushes, compactions and damaged or missing capture indexes, against a list of
every stored response with its SURT key computed by the ``surt`` package."""

from __future__ import annotations

import json
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import surt
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.factories import metadata
from web_index import WebIndex
from web_index.errors import InvalidRecordError
from web_index.models import Response

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
        # (type, partition domain, row) of every stored response
        self.stored: list[tuple[str, str, Row]] = []
        self.n = 0

    def teardown(self) -> None:
        self.index.close()
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

    @rule(data=st.data())
    def damage_an_index(self, data: st.DataObject) -> None:
        indexes = sorted((self.dir / "s" / "_captures").rglob("*.cdxj"))
        if indexes:
            path = data.draw(st.sampled_from(indexes))
            raw = bytearray(path.read_bytes())
            raw[-2] ^= 1  # in the last line: its CRC no longer matches
            # Replaced, as every store file is written (one mapped already keeps its content).
            path.with_suffix(".tmp").write_bytes(bytes(raw))
            path.with_suffix(".tmp").replace(path)

    @rule(data=st.data())
    def lose_an_index(self, data: st.DataObject) -> None:
        indexes = sorted((self.dir / "s" / "_captures").rglob("*.cdxj"))
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
                found = rows_of(list(self.index.captures(url, match=match, type=method)))
                assert sorted(found) == expected, (method, url, match)
                assert [r[:2] for r in found] == sorted(r[:2] for r in found)

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


def test_captures_against_reference() -> None:
    run_state_machine_as_test(
        Captures, settings=settings(max_examples=30, stateful_step_count=14, deadline=None)
    )


def _chain_index(tmp_path: Path) -> WebIndex:
    index = WebIndex(tmp_path / "s", create=True)
    for n in range(300):
        url = f"https://example.com/p/{n:03d}"
        index.insert(
            "get",
            url,
            TIMES[1] + timedelta(minutes=n),
            metadata(url),
            [
                Response(
                    url=url,
                    request_url=url,
                    status_code=200,
                    headers={},
                    timestamp=TIMES[1] + timedelta(minutes=n),
                    data=b"x",
                    is_final=True,
                    fetcher_name="test",
                    fetcher_version="1.0",
                    fetcher_calibre=10,
                )
            ],
        )
    index.flush()
    index.compact()
    return index


def test_compaction_writes_one_index_per_compacted_file(tmp_path: Path) -> None:
    with _chain_index(tmp_path) as index:
        (path,) = (tmp_path / "s" / "_captures").rglob("*.cdxj")
        assert path.parent.relative_to(tmp_path / "s") == Path("_captures/get/2024/09")
        head, *lines = path.read_text().splitlines()
        assert head.startswith("!meta ") and len(lines) == 300
        meta = json.loads(head.removeprefix("!meta "))
        assert meta["covers"] == "example.com.parquet" and meta["lines"] == 300
        assert len(meta["samples"]) == 5  # every 64th line
        # A prefix ending between two sampled lines, and one after the last line.
        found = list(index.captures("https://example.com/p/07", match="prefix"))
        assert [line.split(" ", 1)[0] for line in found] == [f"com,example)/p/{n:03d}" for n in range(70, 80)]
        assert list(index.captures("https://example.com/q", match="prefix")) == []
        assert len(list(index.captures("https://example.com/p/299"))) == 1


def test_a_compaction_replaces_the_index_of_the_file_it_rewrites(tmp_path: Path) -> None:
    with _chain_index(tmp_path) as index:
        (before,) = (tmp_path / "s" / "_captures").rglob("*.cdxj")
        index.insert(*_one("https://example.com/p/new"))
        index.flush()
        # The new part is read directly, beside the index of the compacted file.
        assert len(list(index.captures("https://example.com/p/", match="prefix"))) == 301
        index.compact()
        (after,) = (tmp_path / "s" / "_captures").rglob("*.cdxj")
        assert after != before and not before.exists()
        assert len(list(index.captures("https://example.com/p/", match="prefix"))) == 301


def test_compact_writes_the_indexes_a_store_lacks(tmp_path: Path) -> None:
    with _chain_index(tmp_path) as index:
        shutil.rmtree(tmp_path / "s" / "_captures")
        assert len(list(index.captures("https://example.com/", match="host"))) == 300  # from the file
        index.compact()
        assert len(list((tmp_path / "s" / "_captures").rglob("*.cdxj"))) == 1


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
    response = Response(
        url=url,
        request_url=url,
        status_code=200,
        headers={},
        timestamp=at,
        data=b"y",
        is_final=True,
        fetcher_name="test",
        fetcher_version="1.0",
        fetcher_calibre=10,
    )
    return ("get", url, at, metadata(url), [response])


def test_a_damaged_index_is_read_around(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with _chain_index(tmp_path) as index:
        expected = list(index.captures("https://example.com/p/", match="prefix"))
    (path,) = (tmp_path / "s" / "_captures").rglob("*.cdxj")
    raw = bytearray(path.read_bytes())
    raw[-2] ^= 1
    path.write_bytes(bytes(raw))
    with WebIndex(tmp_path / "s") as index:
        assert list(index.captures("https://example.com/p/", match="prefix")) == expected
    assert "capture index damaged" in caplog.text
