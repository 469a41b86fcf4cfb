"""The archive world's ways of writing a time (CLI --at / --not-before / --not-after)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web_index.errors import InvalidRecordError
from web_index.models import parse_when

times = st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(9998, 12, 31), timezones=st.just(UTC))


@given(t=times, digits=st.sampled_from([4, 6, 8, 10, 12, 14]))
def test_a_timestamp_names_the_span_that_holds_it(t: datetime, digits: int) -> None:
    stamp = t.strftime("%Y%m%d%H%M%S")[:digits]
    start, end = parse_when(stamp, "--at"), parse_when(stamp, "--not-after", end=True)
    assert start <= t.replace(microsecond=0) and t <= end
    assert start.strftime("%Y%m%d%H%M%S").startswith(stamp)
    assert end.strftime("%Y%m%d%H%M%S").startswith(stamp)
    assert (end + timedelta(microseconds=1)).strftime("%Y%m%d%H%M%S")[:digits] != stamp


@given(t=times)
def test_a_date_is_its_eight_digit_timestamp(t: datetime) -> None:
    for end in (False, True):
        assert parse_when(t.strftime("%Y-%m-%d"), "x", end=end) == parse_when(
            t.strftime("%Y%m%d"), "x", end=end
        )


@given(n=st.integers(0, 10_000), unit=st.sampled_from(["s", "m", "h", "d", "w"]))
def test_an_age_counts_back_from_now(n: int, unit: str) -> None:
    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]
    assert parse_when(f"{n}{unit}", "--not-before", now=now) == now - timedelta(seconds=n * seconds)


@given(n=st.integers(0, 10_000), unit=st.sampled_from(["s", "m", "h", "d", "w"]))
def test_an_age_may_say_ago(n: int, unit: str) -> None:
    now = datetime(2026, 11, 25, 12, tzinfo=UTC)
    for text in (f"{n}{unit} ago", f"{n} {unit} ago", f" {n}{unit}  AGO "):
        assert parse_when(text, "--at", now=now) == parse_when(f"{n}{unit}", "--at", now=now)


def test_iso_is_utc_unless_it_says_otherwise() -> None:
    assert parse_when("2024-08-01T12:00:00+02:00", "--at") == datetime(2024, 8, 1, 10, tzinfo=UTC)
    assert parse_when("2024-08-01T12:00:00", "--at") == datetime(2024, 8, 1, 12, tzinfo=UTC)
    assert parse_when("2024-08-01 12:00", "--at") == datetime(2024, 8, 1, 12, tzinfo=UTC)
    with pytest.raises(InvalidRecordError, match=r"^--at: .*7d ago"):
        parse_when("yesterday", "--at", now=datetime(2026, 11, 25, tzinfo=UTC))
    with pytest.raises(InvalidRecordError, match="not a time"):
        parse_when("20241301", "--at")  # month 13
    with pytest.raises(InvalidRecordError):
        parse_when("7d", "--at")  # an age only where there is a now


@pytest.mark.parametrize("text", ["6M", "6M ago", "2D ago", "1H"])
def test_an_age_unit_is_lower_case_as_m_could_be_months(text: str) -> None:
    with pytest.raises(InvalidRecordError, match=r"^--at: "):
        parse_when(text, "--at", now=datetime(2026, 11, 25, tzinfo=UTC))
