from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.factories import T0, chain, metadata
from web_index.errors import InvalidRecordError
from web_index.models import (
    RESULT_SCHEMA,
    AttemptMetadata,
    AttemptState,
    Calibre,
    DeterministicQuery,
    Page,
    PageKey,
    Query,
    RecordType,
    Response,
    SimplePageQuery,
    TimeAwarePageQuery,
    TimeBoundedQuery,
    query_from_dict,
    read_queries,
    result_table,
    write_queries,
)

aware = st.datetimes(
    min_value=datetime(1990, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
) | st.datetimes(
    min_value=datetime(1990, 1, 2),
    max_value=datetime(2099, 12, 30),
    timezones=st.sampled_from([timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)
urls = st.sampled_from(["https://example.com/", "http://a.b.example.org/x?y=1", "https://example.com/Ä"])
calibres = st.none() | st.integers(0, 100)
types = st.sampled_from(list(RecordType))

queries = st.one_of(
    st.builds(PageKey, url=urls, timestamp=aware, request_id=st.uuids().map(str), type=types),
    st.builds(SimplePageQuery, url=urls, calibre=calibres, calibre_strict=st.booleans(), type=types),
    st.builds(
        TimeAwarePageQuery,
        url=urls,
        not_before=st.none(),
        not_after=st.none() | aware,
        timestamp=st.none() | aware,
        calibre=calibres,
        calibre_strict=st.booleans(),
        type=types,
    ),
)


@given(queries)
def test_queries_round_trip_through_the_flat_form(q: object) -> None:
    flat = q.to_dict()  # type: ignore[attr-defined]
    assert all(isinstance(v, str | int | bool | type(None)) for v in flat.values())
    assert type(q).from_dict(flat) == q
    assert (
        query_from_dict(
            {
                **flat,
                "kind": {PageKey: "key", SimplePageQuery: "simple", TimeAwarePageQuery: "time-aware"}[
                    type(q)
                ],
            }
        )
        == q
    )


@given(st.lists(queries, max_size=30))
def test_queries_round_trip_through_parquet(
    tmp_path_factory: pytest.TempPathFactory, qs: list[object]
) -> None:
    path = tmp_path_factory.mktemp("q") / "queries.parquet"
    assert write_queries(path, qs) == len(qs)  # type: ignore[arg-type]
    assert read_queries(path) == qs


def test_aliases_and_defaults() -> None:
    assert DeterministicQuery is PageKey and TimeBoundedQuery is TimeAwarePageQuery
    assert SimplePageQuery(url="http://x.com/").type is RecordType.GET
    assert TimeAwarePageQuery(url="http://x.com/").calibre_strict is False
    assert SimplePageQuery(url="http://x.com/").calibre_strict is False


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: PageKey(url="http://x.com/", timestamp=datetime(2024, 1, 1), request_id="r"), "timestamp"),
        (lambda: PageKey(url="http://x.com/", timestamp="2024-01-01T00:00:00", request_id="r"), "timestamp"),
        (lambda: PageKey(url="http://x.com/", timestamp="yesterday", request_id="r"), "timestamp"),
        (lambda: PageKey(url="http://x.com/", timestamp=T0, request_id=""), "request_id"),
        (lambda: SimplePageQuery(url="not a url"), "url"),
        (lambda: SimplePageQuery(url="http://x.com/", calibre=101), "calibre"),
        (lambda: SimplePageQuery(url="http://x.com/", calibre=-1), "calibre"),
        (lambda: SimplePageQuery(url="http://x.com/", calibre=True), "calibre"),
        (lambda: SimplePageQuery(url="http://x.com/", type="post"), "type"),
        (
            lambda: TimeAwarePageQuery(url="http://x.com/", not_before=T0, not_after=T0 - timedelta(1)),
            "not_before",
        ),
        (lambda: query_from_dict({"url": "http://x.com/", "kind": "fuzzy"}), "kind"),
        (lambda: query_from_dict({"url": "http://x.com/", "colour": "red"}), "query"),
    ],
)
def test_invalid_queries_name_the_field(make: object, field: str) -> None:
    with pytest.raises(InvalidRecordError) as info:
        make()  # type: ignore[operator]
    assert info.value.field == field


def test_timestamps_are_normalised_to_utc() -> None:
    q = PageKey(url="http://x.com/", timestamp="2024-01-01T02:00:00+02:00", request_id="r")
    assert q.timestamp == datetime(2024, 1, 1, tzinfo=UTC) and q.timestamp.tzinfo is UTC
    assert q.to_dict()["timestamp"] == "2024-01-01T00:00:00Z"


def test_attempt_states_follow_the_standard_table() -> None:
    table = {
        "success": (False, False),
        "timeout": (True, True),
        "unreachable": (True, True),
        "ssl-error": (True, True),
        "low-quality": (False, True),
        "blocked": (False, True),
        "unauthorised": (False, False),
        "retryable-error": (True, True),
        "escalate": (False, True),
        "error": (False, False),
    }
    assert {s.value for s in AttemptState} == set(table)
    for state, (retry, escalate) in table.items():
        assert AttemptState(state).retryable is retry
        assert AttemptState(state).retryable_with_escalation is escalate


def test_calibre_levels() -> None:
    levels = [
        Calibre.UNKNOWN,
        Calibre.HTTP,
        Calibre.HTTP_BROWSER_LIKE,
        Calibre.BROWSER,
        Calibre.BROWSER_PROXY,
        Calibre.RESERVED,
    ]
    assert levels == sorted(levels) and levels[0] == 0 and levels[-1] == 100
    with pytest.raises(InvalidRecordError):
        Calibre(101)


def test_records_round_trip_through_the_flat_form() -> None:
    for r in chain("https://x.com/", hops=2):
        flat = r.to_dict()
        assert isinstance(flat["headers"], str) and isinstance(flat["timestamp"], str)
        assert Response.from_dict(flat) == r
        import base64

        assert Response.from_dict({**flat, "data": base64.b64encode(r.data or b"").decode()}) == r
    m = metadata("https://x.com/", "timeout", logs="l", traceback="t", run_time=1.5)
    assert AttemptMetadata.from_dict(m.to_dict()) == m


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"status_code": 1000}, "response.status_code"),
        ({"status_code": "200"}, "response.status_code"),
        ({"headers": "{not json"}, "response.headers"),
        ({"headers": {"a": 1}}, "response.headers"),
        ({"timestamp": "2024-01-01T00:00:00"}, "response.timestamp"),
        ({"retry_attempt": 256}, "response.retry_attempt"),
        ({"fetcher_calibre": 200}, "response.fetcher_calibre"),
        ({"data": "***"}, "response.data"),
        ({"colour": "red"}, "response"),
    ],
)
def test_invalid_responses_name_the_field(change: dict[str, object], field: str) -> None:
    flat = chain("https://x.com/")[0].to_dict()
    with pytest.raises(InvalidRecordError) as info:
        Response.from_dict({**flat, **change})
    assert info.value.field == field


@pytest.mark.parametrize(
    ("value", "utc"),
    [
        ("0001-01-01T00:00:00+01:00", datetime.min.replace(tzinfo=UTC)),  # before year 1 in UTC
        ("9999-12-31T23:30:00-01:00", datetime.max.replace(tzinfo=UTC)),  # after year 9999 in UTC
        ("0001-01-01T05:00:00+01:00", datetime(1, 1, 1, 4, tzinfo=UTC)),
        ("9999-12-31T00:00:00Z", datetime(9999, 12, 31, tzinfo=UTC)),
    ],
)
def test_any_aware_time_is_a_valid_query_time(value: str, utc: datetime) -> None:
    # Clamped to the datetime range: no stored record lies near either end, so
    # every query answers as it would with the exact time.
    made = [
        PageKey(url="http://x.com/", timestamp=value, request_id="r"),
        TimeAwarePageQuery(url="http://x.com/", not_before=value, not_after=value, timestamp=value),
        query_from_dict({"url": "http://x.com/", "not_before": value}),
    ]
    for q in made:
        assert (q.timestamp if isinstance(q, PageKey) else q.not_before) == utc  # type: ignore[union-attr]
        assert type(q).from_dict(q.to_dict()) == q


def test_query_files_with_times_beyond_datetime_are_clamped(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    micros = [-(2**62), 2**62, 0]
    table = pa.table(
        {
            "url": ["http://x.com/"] * 3,
            "not_before": pa.array(micros, pa.timestamp("us", tz="UTC")),
            "kind": ["time-aware"] * 3,
        }
    )
    pq.write_table(table, tmp_path / "q.parquet")
    got = [q.not_before for q in read_queries(tmp_path / "q.parquet")]  # type: ignore[union-attr]
    assert got == [
        datetime.min.replace(tzinfo=UTC),
        datetime.max.replace(tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
    ]


def test_a_missing_required_field_of_a_record_is_named() -> None:
    flat = chain("https://x.com/")[0].to_dict()
    del flat["fetcher_version"]
    with pytest.raises(InvalidRecordError) as info:
        Response.from_dict(flat, "data[0]")
    assert info.value.field == "data[0].fetcher_version"
    with pytest.raises(InvalidRecordError) as info:
        AttemptMetadata.from_dict({"url": "https://x.com/", "state": "success"})
    assert info.value.field == "metadata.fetcher_calibre"  # the first missing one, by name


def test_an_attempt_says_why_in_its_last_log_line_stored_or_not() -> None:
    from web_index.fetch import Attempt

    logs = ["301 -> https://example.com/b", "1 response(s); bot protection (cf-mitigated: challenge)", ""]
    assert metadata("https://example.com/", logs="\n".join(logs)).why == logs[1]
    fresh = Attempt("https://example.com/", "get", AttemptState.BLOCKED, T0, "httpx", "1", 10, logs=logs)
    assert fresh.why == logs[1] and fresh.metadata().why == fresh.why
    assert metadata("https://example.com/").why is None
    assert metadata("https://example.com/", logs=" \n").why is None


@given(
    status=st.integers(100, 999),
    headers=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
    at=st.datetimes(timezones=st.just(UTC)),
    data=st.one_of(st.none(), st.binary(max_size=32)),
    retry=st.integers(0, 255),
    final=st.booleans(),
    rid=st.one_of(st.none(), st.text(max_size=8)),
)
def test_a_restored_response_is_the_response_of_its_values(
    status: int,
    headers: dict[str, str],
    at: datetime,
    data: bytes | None,
    retry: int,
    final: bool,
    rid: str | None,
) -> None:
    from web_index.models import Response, restored_response

    values = {
        "url": "https://a.example/x",
        "request_url": "https://a.example/y",
        "status_code": status,
        "headers": headers,
        "timestamp": at,
        "fetcher_name": "f",
        "fetcher_version": "1",
        "fetcher_calibre": 30,
        "data": data,
        "retry_attempt": retry,
        "is_final": final,
        "request_id": rid,
    }
    built = Response(**values)
    restored = restored_response(*values.values())
    assert restored == built
    assert {f: getattr(restored, f) for f in values} == values


def _reference_row(position: int, query: Query, result: Page | AttemptMetadata | None) -> dict[str, object]:
    """A result's row as the standard's reader would build it: one dict, nested per response."""
    row: dict[str, object] = {"query": position, "type": query.type.value, "url": query.url, "found": False}
    if isinstance(result, Page):
        final = result.final
        row |= {
            "found": True,
            "request_id": result.request_id,
            "timestamp": result.timestamp,
            "fetcher_name": final.fetcher_name,
            "fetcher_version": final.fetcher_version,
            "fetcher_calibre": final.fetcher_calibre,
            "responses": [
                {
                    "url": r.url,
                    "request_url": r.request_url,
                    "status_code": r.status_code,
                    "headers": list(r.headers.items()),
                    "timestamp": r.timestamp,
                    "data": r.data,
                    "retry_attempt": r.retry_attempt,
                    "is_final": r.is_final,
                }
                for r in result.responses
            ],
        }
    elif isinstance(result, AttemptMetadata):
        row |= {
            "found": True,
            "request_id": result.request_id,
            "timestamp": result.timestamp,
            "fetcher_name": result.fetcher_name,
            "fetcher_version": result.fetcher_version,
            "fetcher_calibre": result.fetcher_calibre,
            "state": result.state.value,
            "logs": result.logs,
            "traceback": result.traceback,
            "run_time": result.run_time,
        }
    return row


_header_fields = st.dictionaries(
    st.sampled_from(["content-type", "location", "x-a", "set-cookie"]), st.text(max_size=5)
)


@st.composite
def _results(draw: st.DrawFn) -> Page | AttemptMetadata | None:
    kind = draw(st.sampled_from(["page", "head", "metadata", "none"]))
    url = draw(urls)
    ts = draw(aware)
    if kind == "none":
        return None
    if kind == "metadata":
        return metadata(
            url,
            draw(st.sampled_from([s.value for s in AttemptState])),
            timestamp=ts,
            request_id=draw(st.none() | st.uuids().map(str)),
            logs=draw(st.none() | st.text(max_size=8)),
            traceback=draw(st.none() | st.text(max_size=8)),
            run_time=draw(st.none() | st.floats(0, 100)),
        )
    responses = [
        msgspec.structs.replace(r, headers=draw(_header_fields), retry_attempt=draw(st.integers(0, 3)))
        for r in chain(
            url,
            ts,
            draw(st.integers(1, 3)),
            draw(st.integers(0, 100)),
            draw(st.binary(max_size=64)),
            kind == "head",
        )
    ]
    type = RecordType.HEAD if kind == "head" else RecordType.GET
    return Page(type=type, url=url, timestamp=ts, request_id=str(draw(st.uuids())), responses=responses)


@given(st.lists(st.tuples(queries, _results()), max_size=12))
def test_a_result_table_holds_what_each_result_says(
    pairs: list[tuple[Query, Page | AttemptMetadata | None]],
) -> None:
    """The columns laid out for Arrow equal the rows the results make one by one."""
    triples = [(n * 3, q, r) for n, (q, r) in enumerate(pairs)]
    expected = pa.Table.from_pylist([_reference_row(*t) for t in triples], schema=RESULT_SCHEMA)
    assert result_table((n, q.type, q.url, r) for n, q, r in triples).equals(expected)
