"""The insert fast paths give exactly what the plain code gives: keys, domains,
validation errors, rows, request ids and returned keys."""

from __future__ import annotations

import os
import re
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tests.factories import T0, attempt, chain, metadata
from tests.validate_reference import validate_reference
from web_index import WebIndex
from web_index.errors import InvalidRecordError
from web_index.ingest import _validate, new_request_id, validate_attempt
from web_index.ingest._validate import new_request_ids
from web_index.models import AttemptMetadata, AttemptRows, Calibre, PageKey, RecordType, Response
from web_index.models._time import from_us
from web_index.urls import domain_of, is_plain_url, key_and_domain, url_key

# -- URL keys and domains -------------------------------------------------------------

_URL_CHARS = "abcAZ019-._~!$&'()*+,;=:@/?#%[]\\ \tä€\x00\x7f"
_hosts = st.sampled_from(
    [
        "example.com",
        "www.example.co.uk",
        "Example.COM",
        "a.b",
        "localhost",
        "127.0.0.1",
        "01.2.3.4",
        "[::1]",
        "bücher.de",
        "xn--bcher-kva.de",
        "under_score.example.com",
        ".lead.example.com",
        "trail.example.com.",
        "dou..ble.com",
        "-dash.com",
        "user:pw@example.com",
        "example.com:80",
        "example.com:8080",
        "a" * 250 + ".com",
        "",
    ]
)
_urls = st.one_of(
    st.builds(
        lambda scheme, host, rest: f"{scheme}{host}{rest}",
        st.sampled_from(["http://", "https://", "HTTPS://", "ftp://", "", "https:/"]),
        _hosts,
        st.text(_URL_CHARS, max_size=30),
    ),
    st.text(_URL_CHARS, max_size=40),
    # Mostly URLs in normal form, now and then one character away from it.
    st.builds(
        lambda scheme, host, path, query: f"{scheme}{host}/{path}{query}",
        st.sampled_from(["http://", "https://"]),
        st.sampled_from(
            ["example.com", "www.example.co.uk", "a-b.c0.org", "1.2.3.4", "x.y.z.w.com", "Ex.com"]
        ),
        st.text("abcXYZ019-._~!$&'()*+,;=:@/", max_size=20) | st.text(_URL_CHARS, max_size=20),
        st.sampled_from(["", "?", "?a=1&b=%7E", "?q=x?y", "#f", "?a=b#f", "?a b"]),
    ),
)


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except InvalidRecordError as exc:
        return (type(exc), exc.field, exc.problem)


@given(_urls)
@example("https://example.com/a?b?c=%7e")
@example("https://example.com/p?")
@example("https://example.com")
@example("http://1.2.3.4/x")
@example("https://example.com/a#frag")
def test_fast_keys_and_domains_are_the_plain_ones(url: str) -> None:
    expected = _outcome(lambda u: (url_key(u), domain_of(u)), url)
    assert _outcome(key_and_domain, url) == expected
    assert _outcome(key_and_domain, url) == expected  # the per-host cache answers the same
    if is_plain_url(url):
        assert url_key(url) == url


@given(st.text("abcXYZ019-._~!$&'()*+,;=:@/?%", max_size=40))
def test_plain_urls_are_their_own_keys(tail: str) -> None:
    url = f"https://shop.example.co.uk/{tail}"
    if is_plain_url(url):
        assert url_key(url) == url and key_and_domain(url) == (url, "example.co.uk")


# -- validation ------------------------------------------------------------------

URL = "https://example.com/page"
_OTHER_TZ = timezone(timedelta(hours=5, minutes=30))


def _dict_chain(url: str, hops: int = 2) -> list[dict[str, Any]]:
    return [r.to_dict() for r in chain(url, hops=hops)]


_types = st.sampled_from(
    [
        "get",
        "head",
        "GET",
        "get-metadata",
        "post",
        RecordType.GET,
        RecordType.HEAD,
        RecordType.GET_METADATA,
        5,
    ]
)
_attempt_urls = st.sampled_from(
    [
        URL,
        "https://EXAMPLE.com/page",
        "https://example.com:443/page",
        "https://example.com/p%7eage",
        "nope",
        7,
    ]
)
_timestamps = st.sampled_from(
    [
        T0,
        T0.astimezone(_OTHER_TZ),
        T0.replace(tzinfo=None),
        "2024-08-01T12:00:00Z",
        "2024-08-01T12:00:00",
        "garbage",
        T0 + timedelta(microseconds=1),
        None,
        "9999-12-31T00:00:00Z",
        "0001-01-01T00:00:00+01:00",
        datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]
)


def _metadatas(url: str) -> st.SearchStrategy[Any]:
    return st.sampled_from(
        [
            metadata(url),
            metadata(url).to_dict(),
            metadata(url, "timeout"),
            metadata(url, calibre=100),
            metadata(url, calibre=Calibre.BROWSER),
            metadata(url, timestamp=T0),
            metadata(url, timestamp=T0 + timedelta(1)),
            metadata(url, request_id="x"),
            metadata("https://other.com/"),
            {"state": "fine", "url": url, "fetcher_name": "t", "fetcher_version": "1", "fetcher_calibre": 1},
            {"url": url},
            "not a record",
            metadata(url, logs="a\udcff"),
            metadata(url, traceback="ä€"),
        ]
    )


def _datas(url: str) -> st.SearchStrategy[Any]:
    def hop(i: int, **changes: Any) -> Response:
        return msgspec.structs.replace(chain(url, hops=2)[i], **changes)

    return st.sampled_from(
        [
            chain(url),
            chain(url, hops=3),
            tuple(chain(url)),
            chain(url, head=True),
            chain(url, calibre=60),
            _dict_chain(url),
            [],
            [hop(0), hop(0)],
            [hop(1), hop(0)],
            [hop(1), hop(1)],
            [hop(1, url="https://example.com/other")],
            [hop(1, request_id="x")],
            [hop(1, request_url="nope")],
            [hop(1, request_url="HTTPS://Example.com/page")],
            [hop(0, request_url="https://example.com/x y"), hop(1)],
            [hop(1, fetcher_name="other")],
            [hop(1, fetcher_version="2")],
            [hop(1, fetcher_calibre=60)],
            [hop(1, data=None)],
            [hop(1, headers={"x": "\udcff"})],
            [hop(1, headers={"ä": "€"})],
            [hop(1, timestamp=datetime(9999, 6, 1, tzinfo=UTC))],
            [{"url": url}],
            [hop(0), 5],
            "abc",
            b"abc",
            None,
        ]
    )


@st.composite
def _requests(draw: st.DrawFn) -> tuple[Any, ...]:
    # Each part is usually valid, so that every later check is reached too.
    def part(good: Any, variants: st.SearchStrategy[Any]) -> Any:
        return good if draw(st.integers(0, 5)) else draw(variants)

    url = part(URL, _attempt_urls)
    meta_url = url if isinstance(url, str) and draw(st.booleans()) else URL
    method = part(draw(st.sampled_from(["get", "head"])), _types)
    head = method in ("head", RecordType.HEAD)
    return (
        method,
        url,
        part(T0, _timestamps),
        part(metadata(meta_url), _metadatas(meta_url)),
        part(chain(meta_url, hops=draw(st.integers(1, 3)), head=head), _datas(meta_url)),
    )


@given(_requests())
def test_validation_matches_the_plain_code(request: tuple[Any, ...]) -> None:
    rid = "0190f5a0-0000-7000-8000-000000000000"
    expected = _outcome(lambda *a: validate_reference(*a, request_id=rid), *request)
    got = _outcome(lambda *a: validate_attempt(*a, request_id=rid), *request)
    if isinstance(expected, tuple):
        assert got == expected
        return
    assert not isinstance(got, tuple), got
    assert msgspec.structs.asdict(expected) == _plain(got)
    assert (
        got.timestamp == from_us(expected.ts_us)
        and got.timestamp.tzinfo is UTC
        and got.timestamp.year == got.year
        and got.timestamp.month == got.month
    )


def test_the_benchmark_shape_of_attempt_matches_the_plain_code() -> None:
    rid = new_request_id()
    for item in [
        attempt(URL),
        attempt(URL, hops=3),
        attempt(URL, method="head"),
        attempt(URL, state="blocked"),
    ]:
        expected = validate_reference(*item, request_id=rid)
        got = validate_attempt(*item, request_id=rid)
        assert msgspec.structs.asdict(expected) == _plain(got)


def _plain(a: AttemptRows) -> dict[str, Any]:
    """An attempt as the plain code made it: rows as dicts (keys and values both
    compared: the column orders name every column, each value in its place)."""
    out = {k: v for k, v in msgspec.structs.asdict(a).items() if k != "timestamp"}
    out["metadata"], out["responses"] = a.rows()
    return out


# -- request ids -------------------------------------------------------------------


def test_request_ids_are_uuid7_in_order_with_62_random_bits() -> None:
    ids = [new_request_id() for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    now_ms = int(datetime.now(UTC).timestamp() * 1000)
    rand_bits = 0
    for text in ids:
        u = uuid.UUID(text)
        assert str(u) == text and u.version == 7 and u.variant == uuid.RFC_4122
        assert abs((u.int >> 80) - now_ms) < 60_000
        rand_bits |= u.int & ((1 << 62) - 1)
    assert rand_bits == (1 << 62) - 1  # every random bit is used
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", ids[0])


_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


@given(st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=8))
def test_ids_drawn_many_at_once_follow_the_rules_of_one_at_a_time(sizes: list[int]) -> None:
    # Batches (0 meaning one plain call) and single ids interleaved: one strictly
    # increasing sequence of distinct UUIDv7 strings, whatever the counter does.
    ids: list[str] = []
    for n in sizes:
        got = new_request_ids(n) if n else [new_request_id()]
        assert len(got) == max(n, 1)
        ids.extend(got)
    ids.append(new_request_id())
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(_ID.fullmatch(i) for i in ids)


def test_ids_drawn_many_at_once_borrow_the_next_millisecond_like_single_ones() -> None:
    # Frozen clock: a batch crossing the 12-bit counter continues exactly as
    # single calls would (next millisecond, counter 0), and so do calls after it.
    with _validate._lock:
        saved = list(_validate._last)
    ms = saved[0] + 10_000_000  # far ahead of any real clock reading in this test
    try:
        for split in (1, 4000, 4096, 4097):
            _validate._last[0], _validate._last[1] = ms, 0xFFF - 3
            batch = [*new_request_ids(split), new_request_id()]
            _validate._last[0], _validate._last[1] = ms, 0xFFF - 3
            single = [new_request_id() for _ in range(split + 1)]
            assert [i[:19] for i in batch] == [i[:19] for i in single]  # time and counter
            assert batch == sorted(batch) and len(set(batch)) == len(batch)
            ms += 10
    finally:  # the ids made here are thrown away: back to the real clock
        with _validate._lock:
            _validate._last[:] = saved


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_draws_its_own_random_bits() -> None:
    new_request_id()  # the parent has random bits in hand
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, "".join(new_request_id() for _ in range(3)).encode())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 4096).decode()
    os.close(read)
    os.close(write)
    parent = "".join(new_request_id() for _ in range(3))
    tails = {child[i * 36 + 19 : i * 36 + 36] for i in range(3)}
    assert not tails & {parent[i * 36 + 19 : i * 36 + 36] for i in range(3)}


# -- returned keys -------------------------------------------------------------------


def test_returned_keys_equal_keys_built_the_plain_way(index: WebIndex) -> None:
    items = [attempt(URL), attempt(URL, method="head"), attempt(URL, state="timeout")]
    items.append(("get", URL, T0.astimezone(_OTHER_TZ), metadata(URL), chain(URL)))
    for key in index.insert_many(items):
        plain = PageKey(url=key.url, timestamp=key.timestamp, request_id=key.request_id, type=key.type)
        assert key == plain and hash(key) == hash(plain) and key.to_dict() == plain.to_dict()
        assert key.timestamp.tzinfo is UTC
        assert index.query([key])[0] is not None
    assert [k.type for k in index.insert_many(items)] == [
        RecordType.GET,
        RecordType.HEAD,
        RecordType.GET_METADATA,
        RecordType.GET,
    ]


def test_attempts_keep_the_metadata_fields_as_given() -> None:
    a = validate_attempt(*attempt(URL))
    meta_row = a.rows()[0]
    assert meta_row["state"] == "success" and type(meta_row["state"]) is str
    meta = AttemptMetadata(
        state="success", url=URL, fetcher_name="test", fetcher_version="1.0", fetcher_calibre=Calibre.HTTP
    )
    b = validate_attempt("get", URL, T0, meta, chain(URL, calibre=10))
    assert b.calibre == 10 and b.rows()[1][0]["fetcher_name"] == "test"
