"""Every insertion rule of the standard: accepted, or refused naming the field with nothing stored."""

from __future__ import annotations

import gc
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tests.factories import T0, attempt, chain, metadata
from web_index import WebIndex
from web_index.errors import InvalidRecordError
from web_index.models import Page, PageKey, RecordType, SimplePageQuery

URL = "https://example.com/page"


def test_insert_returns_the_key_of_what_it_stored(index: WebIndex) -> None:
    key = index.insert(*attempt(URL, hops=3))
    assert key.type is RecordType.GET and key.url == URL and key.timestamp == T0
    page = index.query([key])[0]
    assert isinstance(page, Page)
    assert [r.is_final for r in page.responses] == [False, False, True]
    assert page.final.request_url == URL and page.status_code == 200 and page.data == b"<html>ok</html>"
    assert all(r.request_id == key.request_id for r in page.responses)
    meta = index.query([PageKey(url=URL, timestamp=T0, request_id=key.request_id, type="get-metadata")])[0]
    assert meta is not None and meta.state.value == "success" and meta.timestamp == T0


def test_failed_attempt_stores_metadata_only(index: WebIndex) -> None:
    key = index.insert(*attempt(URL, state="timeout"))
    assert key.type is RecordType.GET_METADATA
    assert index.query([SimplePageQuery(url=URL)]) == [None]
    assert index.query([SimplePageQuery(url=URL, type="get-metadata")])[0].state.value == "timeout"


def test_head_records_have_no_body(index: WebIndex) -> None:
    key = index.insert(*attempt(URL, method="head"))
    page = index.query([key])[0]
    assert isinstance(page, Page) and page.type is RecordType.HEAD and page.data is None


def test_request_ids_are_unique_and_time_ordered(index: WebIndex) -> None:
    keys = [index.insert(*attempt(URL)) for _ in range(50)]
    keys += index.insert_many([attempt(URL) for _ in range(50)])
    ids = [k.request_id for k in keys]
    assert len(set(ids)) == len(ids) and ids == sorted(ids)


def _replace(item: tuple[Any, ...], **changes: Any) -> tuple[Any, ...]:
    method, url, ts, meta, data = item
    return (
        changes.get("type", method),
        changes.get("url", url),
        changes.get("timestamp", ts),
        changes.get("metadata", meta),
        changes.get("data", data),
    )


def _resp(i: int = 0, **changes: Any) -> Any:
    return msgspec.structs.replace(chain(URL, hops=2)[i], **changes)


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("type metadata", {"type": "get-metadata"}, "type"),
    ("type unknown", {"type": "post"}, "type"),
    ("naive timestamp", {"timestamp": datetime(2024, 8, 1)}, "timestamp"),
    ("offset-less string", {"timestamp": "2024-08-01T00:00:00"}, "timestamp"),
    ("bad url", {"url": "example.com/x"}, "url"),
    ("metadata url differs", {"metadata": metadata("https://other.com/")}, "metadata.url"),
    (
        "metadata state unknown",
        {
            "metadata": {
                "state": "fine",
                "url": URL,
                "fetcher_name": "t",
                "fetcher_version": "1",
                "fetcher_calibre": 1,
            }
        },
        "metadata.state",
    ),
    ("metadata request id", {"metadata": metadata(URL, request_id="x")}, "metadata.request_id"),
    (
        "metadata timestamp differs",
        {"metadata": metadata(URL, timestamp=T0 + timedelta(1))},
        "metadata.timestamp",
    ),
    (
        "calibre 100 reserved",
        {"metadata": metadata(URL, calibre=100), "data": chain(URL, calibre=100)},
        "metadata.fetcher_calibre",
    ),
    ("success without data", {"data": []}, "data"),
    ("failure with data", {"metadata": metadata(URL, "error")}, "data"),
    ("no final", {"data": [_resp(0), _resp(0)]}, "data[1].is_final"),
    ("final not last", {"data": [_resp(1), _resp(0)]}, "data[0].is_final"),
    ("two finals", {"data": [_resp(1), _resp(1)]}, "data[0].is_final"),
    ("response url differs", {"data": [_resp(1, url="https://example.com/other")]}, "data[0].url"),
    ("response request id", {"data": [_resp(1, request_id="x")]}, "data[0].request_id"),
    ("bad request url", {"data": [_resp(1, request_url="nope")]}, "data[0].request_url"),
    ("fetcher differs", {"data": [_resp(1, fetcher_name="other")]}, "data[0].fetcher_name"),
    ("calibre differs", {"data": [_resp(1, fetcher_calibre=60)]}, "data[0].fetcher_calibre"),
    ("get without body", {"data": [_resp(1, data=None)]}, "data[0].data"),
    ("head with body", {"type": "head"}, "data[0].data"),
    ("data not a list", {"data": "abc"}, "data"),
    ("data record malformed", {"data": [{"url": URL}]}, "data[0].fetcher_calibre"),  # the first missing field
]


@pytest.mark.parametrize(("name", "change", "field"), BAD, ids=[b[0] for b in BAD])
def test_invalid_inserts_name_the_field_and_store_nothing(
    index: WebIndex, name: str, change: dict[str, Any], field: str
) -> None:
    good = attempt(URL)
    with pytest.raises(InvalidRecordError) as info:
        index.insert(*_replace(good, **change))
    assert info.value.field == field, name
    # A batch with one bad item stores none of it.
    with pytest.raises(InvalidRecordError) as info:
        index.insert_many([good, _replace(good, **change)])
    assert info.value.field.startswith("item 1")
    assert index.presence([SimplePageQuery(url=URL, type=t) for t in ("get", "get-metadata")]) == [
        False,
        False,
    ]
    assert index.stats().buffered_attempts == 0


def test_dict_forms_are_accepted(index: WebIndex) -> None:
    method, url, ts, meta, data = attempt(URL, hops=2)
    key = index.insert(method, url, ts.isoformat(), meta.to_dict(), [r.to_dict() for r in data])
    assert index.query([key])[0].responses == index.query([key])[0].responses  # type: ignore[union-attr]
    assert len(index.query([key])[0].responses) == 2  # type: ignore[union-attr]


def test_read_only_handle_refuses_writes(store_path: Path) -> None:
    WebIndex(store_path).close()
    with WebIndex(store_path, read_only=True) as ro, pytest.raises(Exception, match="read_only"):
        ro.insert(*attempt(URL))


@pytest.mark.parametrize("enabled", [True, False])
def test_a_batch_pauses_the_garbage_collector_and_gives_it_back(
    index: WebIndex, monkeypatch: pytest.MonkeyPatch, enabled: bool
) -> None:
    seen: list[bool] = []
    store = index._store
    real_append, real_lookup = store.append, store.buffer.lookup
    monkeypatch.setattr(store, "append", lambda a: (seen.append(gc.isenabled()), real_append(a))[1])
    monkeypatch.setattr(store.buffer, "lookup", lambda *a: (seen.append(gc.isenabled()), real_lookup(*a))[1])
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        key = index.insert(*attempt("https://example.com/gc"))
        assert gc.isenabled() is enabled
        with pytest.raises(InvalidRecordError):
            index.insert_many([attempt("https://example.com/ok"), ("get", "not a url", T0, {}, [])])
        assert gc.isenabled() is enabled
        assert index.query([key])[0] is not None
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [False, False]  # off inside the insert and inside the query


# -- the range of timestamps the store accepts, and strings it can store ----------------------


def _dict_request(url: str = URL, **changes: Any) -> tuple[Any, ...]:
    method, url, ts, meta, data = attempt(url)
    flat_meta = {k: v for k, v in meta.to_dict().items() if v is not None}
    flat_data = [{k: v for k, v in r.to_dict().items() if v is not None} for r in data]
    out = {"type": method, "url": url, "timestamp": ts.isoformat(), "metadata": flat_meta, "data": flat_data}
    for path, value in changes.items():
        where: Any = out
        *steps, last = path.split(".")
        for step in steps:
            where = where[int(step)] if step.isdigit() else where[step]
        where[last] = value
    return (out["type"], out["url"], out["timestamp"], out["metadata"], out["data"])


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"timestamp": "9999-12-31T00:00:00Z"}, "timestamp"),  # the issue: month 10000 after it
        ({"timestamp": "9999-01-01T00:00:00Z"}, "timestamp"),
        ({"timestamp": "1969-12-31T23:59:59.999999Z"}, "timestamp"),
        ({"timestamp": "1900-01-01T00:00:00+00:00"}, "timestamp"),
        ({"timestamp": "0001-01-01T00:00:00+01:00"}, "timestamp"),  # was a raw OverflowError
        ({"timestamp": "9999-12-31T23:30:00-01:00"}, "timestamp"),
        ({"metadata.timestamp": "0001-01-01T00:00:00+01:00"}, "metadata.timestamp"),
        ({"data.0.timestamp": "9999-12-31T00:00:00Z"}, "data[0].timestamp"),
        ({"data.0.timestamp": "1960-01-01T00:00:00Z"}, "data[0].timestamp"),
        ({"data.0.timestamp": "0001-01-01T00:00:00+01:00"}, "data[0].timestamp"),
    ],
)
def test_timestamps_outside_the_accepted_range_are_refused(
    index: WebIndex, changes: dict[str, str], field: str
) -> None:
    with pytest.raises(InvalidRecordError) as info:
        index.insert(*_dict_request(**changes))
    assert info.value.field == field
    assert index.stats().buffered_attempts == 0


def test_the_edges_of_the_accepted_range_are_stored_and_queried(index: WebIndex) -> None:
    first = datetime.fromisoformat("1970-01-01T00:00:00+00:00")
    last = datetime.fromisoformat("9998-12-31T23:59:59.999999+00:00")
    keys = [index.insert(*attempt(URL, ts)) for ts in (first, last)]
    for _ in range(2):  # from the buffer, then from the files
        assert [p.timestamp for p in index.query(keys)] == [first, last]  # type: ignore[union-attr]
        page = index.query([SimplePageQuery(url=URL)])[0]
        assert isinstance(page, Page) and page.timestamp == last
        index.flush()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"data.0.headers": {"x": "\udcff"}}, "data[0].headers"),  # was a raw UnicodeEncodeError
        ({"data.0.headers": '{"x": "\\udcff"}'}, "data[0].headers"),  # JSON escapes make them too
        ({"data.0.headers": {"\udcff": "x"}}, "data[0].headers"),
        ({"metadata.logs": "a\udcff"}, "metadata.logs"),
        ({"metadata.traceback": "\ud800"}, "metadata.traceback"),
        ({"metadata.fetcher_name": "\udcff", "data.0.fetcher_name": "\udcff"}, "metadata.fetcher_name"),
        (
            {"metadata.fetcher_version": "\udcff", "data.0.fetcher_version": "\udcff"},
            "metadata.fetcher_version",
        ),
    ],
)
def test_strings_that_cannot_be_stored_as_utf8_are_refused(
    index: WebIndex, changes: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidRecordError) as info:
        index.insert(*_dict_request(**changes))
    assert info.value.field == field and "UTF-8" in info.value.problem
    assert index.stats().buffered_attempts == 0


def test_a_missing_required_field_is_named(index: WebIndex) -> None:
    item = _dict_request()
    del item[3]["fetcher_name"]
    with pytest.raises(InvalidRecordError) as info:
        index.insert(*item)
    assert info.value.field == "metadata.fetcher_name"
    del item[4][0]["status_code"]
    with pytest.raises(InvalidRecordError) as info:
        index.insert(item[0], item[1], item[2], attempt(URL)[3], item[4])
    assert info.value.field == "data[0].status_code"


def test_given_request_ids_are_checked_and_kept(tmp_path: Path) -> None:
    import uuid

    items = [attempt(f"https://a.example.com/{i}") for i in range(2)]
    ids = [str(uuid.uuid4()), str(uuid.uuid4()).upper()]
    with WebIndex(tmp_path / "s") as index:
        with pytest.raises(InvalidRecordError, match="request_ids: 1 ids for 2 attempts"):
            index.insert_many(items, request_ids=ids[:1])
        with pytest.raises(InvalidRecordError, match=r"request_ids\[1\]: not a UUID"):
            index.insert_many(items, request_ids=[ids[0], "nope"])
        keys = index.insert_many(items, request_ids=ids)
        assert [k.request_id for k in keys] == [i.lower() for i in ids]
        assert index.stats().buffered_attempts == 2  # the refused calls stored nothing


@pytest.mark.parametrize(
    "fault",
    [OSError(28, "No space left on device"), ValueError("Parquet magic bytes not found"), RuntimeError("x")],
)
def test_a_failed_flush_after_an_insert_does_not_fail_the_insert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: Exception
) -> None:
    """The attempts are durable before the flush: whatever the flush meets, the insert
    succeeded (raising would invite the caller to insert again), and a later flush
    moves them."""
    from web_index import FlushPolicy
    from web_index.storage import _store

    def broken(*args: Any, **kwargs: Any) -> None:
        raise fault

    with WebIndex(tmp_path / "store", policy=FlushPolicy(max_rows=1)) as index:
        monkeypatch.setattr(_store, "write_partition_file", broken)
        keys = [index.insert(*attempt(f"{URL}/{i}")) for i in range(3)]
        assert all(isinstance(p, Page) for p in index.query(keys))  # read from the buffer
        monkeypatch.undo()
        assert index.flush() == 3
        assert all(isinstance(p, Page) for p in index.query(keys))
        assert index.verify().ok
