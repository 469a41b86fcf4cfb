"""WebIndex.scan against a reference: every record once, in the documented order,
filters applied, whether records sit in the buffer, in parts or compacted."""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import attempt
from web_index import WebIndex
from web_index.errors import InvalidRecordError
from web_index.models import AttemptMetadata, Page, RecordType
from web_index.urls import domain_of, url_key

URLS = [
    "https://a.example.com/x",
    "https://www.example.com/x/y",
    "https://A.example.com/x?z=1",
    "http://b.example.org/",
    "http://127.0.0.1/p",
]
BASE = datetime(2024, 7, 31, 23, 0, tzinfo=UTC)
FILTERS = [
    {},
    {"domain": "example.com"},
    {"domain": "www.example.org"},
    {"url_prefix": "https://a.example.com/x"},
    {"url_prefix": "https://a.example.com/x", "domain": "example.org"},
    {"start": "2024-08-01"},
    {"end": BASE + timedelta(hours=2)},
    {"start": "20240801", "end": "2024-08-31"},
]

steps = st.lists(
    st.tuples(
        st.sampled_from(URLS),
        st.integers(0, 24 * 45),  # hours after BASE: across two month ends
        st.sampled_from(["get", "head", "failed"]),
        st.sampled_from(["none", "flush", "compact"]),
    ),
    max_size=12,
)


def _expected(stored: list[dict[str, Any]], type: RecordType, f: dict[str, Any]) -> list[tuple[str, str]]:
    def keep(r: dict[str, Any]) -> bool:
        if f.get("domain") and domain_of(r["url"]) != domain_of(f"http://{f['domain']}/"):
            return False
        if f.get("url_prefix") and not url_key(r["url"]).startswith(url_key(f["url_prefix"])):
            return False
        start = f.get("start")
        if start is not None and r["ts"] < (datetime(2024, 8, 1, tzinfo=UTC)):
            return False
        end = f.get("end")
        if isinstance(end, datetime) and r["ts"] > end:
            return False
        return not (end == "2024-08-31" and r["ts"] >= datetime(2024, 9, 1, tzinfo=UTC))

    mine = [r for r in stored if r["type"] is type and keep(r)]
    mine.sort(
        key=lambda r: (r["ts"].year, r["ts"].month, domain_of(r["url"]), url_key(r["url"]), r["ts"], r["rid"])
    )
    return [(r["rid"], r["url"]) for r in mine]


@settings(max_examples=40, deadline=None)
@given(steps=steps)
def test_scan_matches_the_reference(steps: list[tuple[str, int, str, str]]) -> None:
    work = Path(tempfile.mkdtemp())
    try:
        with WebIndex(work / "s", create=True) as index:
            stored: list[dict[str, Any]] = []
            for n, (url, hours, kind, then) in enumerate(steps):
                ts = BASE + timedelta(hours=hours, microseconds=n)
                method = "head" if kind == "head" else "get"
                key = index.insert(
                    *attempt(url, ts, method=method, state="timeout" if kind == "failed" else "success")
                )
                record_type = RecordType(method)
                if kind != "failed":
                    stored.append({"type": record_type, "url": url, "ts": ts, "rid": key.request_id})
                stored.append({"type": record_type.metadata, "url": url, "ts": ts, "rid": key.request_id})
                if then == "flush":
                    index.flush()
                elif then == "compact":
                    index.compact()
            for type in RecordType:
                for f in FILTERS:
                    got = list(index.scan(type, **f))
                    assert all(isinstance(r, AttemptMetadata if type.is_metadata else Page) for r in got)
                    assert [(r.request_id, r.url) for r in got] == _expected(stored, type, f), (type, f)  # type: ignore[union-attr]
    finally:
        shutil.rmtree(work)


def test_a_bad_filter_is_refused_at_once(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        with pytest.raises(InvalidRecordError) as caught:
            index.scan(start="yesterday")
        assert caught.value.field == "start"
        with pytest.raises(InvalidRecordError):
            index.scan(url_prefix="ftp://example.com/")


def test_a_url_prefix_reads_only_the_row_groups_that_may_hold_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Files are sorted by URL key and keep its statistics: a scan of one URL of a
    big domain reads the row groups around it, not the domain (the UI's history)."""
    import pyarrow.parquet as pq

    from web_index.storage import WriteOptions

    options = WriteOptions(row_group_rows=10, body_row_group_rows=10, group_min_bytes=0)
    urls = [f"https://big.example.com/p/{i:03d}" for i in range(200)]
    with WebIndex(tmp_path / "s", write_options=options) as index:
        index.insert_many([attempt(u, BASE + timedelta(minutes=i)) for i, u in enumerate(urls)])
        index.insert_many([attempt(urls[77], BASE + timedelta(hours=1, minutes=k)) for k in range(5)])
        index.flush()
        index.compact()
        read: list[int] = []
        original = pq.ParquetFile.read_row_group

        def counted(self: pq.ParquetFile, i: int, *args: Any, **kwargs: Any) -> Any:
            read.append(i)
            return original(self, i, *args, **kwargs)

        monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
        for kind in (RecordType.GET, RecordType.GET_METADATA):
            read.clear()
            found = list(index.scan(kind, url_prefix=urls[77]))
            assert len(found) == 6 and {r.url for r in found} == {urls[77]}
            assert 0 < len(read) <= 2, read  # 205 rows in groups of 10: the one or two holding p/077
            read.clear()
            everything = list(index.scan(kind, url_prefix="https://big.example.com/p/"))
            assert len(everything) == 205 and len(read) >= 20
