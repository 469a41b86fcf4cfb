"""Byte ranges of an archived body: what RFC 9110 selects, served as a 206, a 416 or whole."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from web_index.archive import ranged

_LAST_MODIFIED = "Wed, 01 May 2024 08:00:00 GMT"
_ARCHIVED = {"etag": '"v1"', "last-modified": _LAST_MODIFIED}

bodies = st.binary(max_size=300)
positions = st.integers(min_value=0, max_value=400)
spaces = st.sampled_from(["", " ", "\t"])


def _expected(size: int, first: int | None, last: int | None) -> tuple[int, int] | str | None:
    """The RFC's reading of one ``bytes=first-last`` range (either may be absent):
    the bytes selected, "unsatisfiable", or None where the field is invalid (ignored)."""
    if first is None:
        if last is None:
            return None
        if last == 0 or size == 0:
            return "unsatisfiable"
        return max(size - last, 0), size - 1
    if last is not None and last < first:
        return None
    if first >= size:
        return "unsatisfiable"
    return first, size - 1 if last is None else min(last, size - 1)


@given(bodies, st.none() | positions, st.none() | positions, spaces, st.sampled_from(["bytes", "BYTES"]))
def test_one_range_selects_what_the_rfc_says(
    body: bytes, first: int | None, last: int | None, space: str, unit: str
) -> None:
    field = f"{unit}{space}={space}{'' if first is None else first}{space}-{'' if last is None else last}"
    got = ranged(body, 200, {"range": field}, _ARCHIVED)
    expected = _expected(len(body), first, last)
    assert ("accept-ranges", "bytes") in got.headers
    if expected is None:
        assert got.status is None and got.body == body
        assert [n for n, _ in got.headers] == ["accept-ranges"]
    elif expected == "unsatisfiable":
        assert got.status == 416 and got.body == b""
        assert ("content-range", f"bytes */{len(body)}") in got.headers
    else:
        start, end = expected
        assert got.status == 206 and got.body == body[start : end + 1]
        assert ("content-range", f"bytes {start}-{end}/{len(body)}") in got.headers


@given(bodies, st.integers(min_value=100, max_value=599).filter(lambda s: s != 200), positions)
def test_a_capture_that_was_not_a_200_is_served_as_it_was(body: bytes, status: int, first: int) -> None:
    got = ranged(body, status, {"range": f"bytes={first}-"}, _ARCHIVED)
    assert got == (None, body, [])


def test_what_a_server_may_ignore_gets_the_whole_body() -> None:
    body = bytes(range(100))
    for field in ("bytes=0-9,20-29", "items=0-9", "bytes=x-9", "bytes=", "bytes 0-9", "0-9"):
        got = ranged(body, 200, {"range": field}, _ARCHIVED)
        assert got.status is None and got.body == body, field
    assert ranged(body, 200, {}, _ARCHIVED).status is None


def test_if_range_asks_for_the_range_only_of_this_capture() -> None:
    body = bytes(range(100))
    same = ('"v1"', _LAST_MODIFIED, "Wednesday, 01-May-24 08:00:00 GMT")
    other = ('"v2"', 'W/"v1"', "Thu, 02 May 2024 08:00:00 GMT", "not a date", "")
    for validator in same:
        got = ranged(body, 200, {"range": "bytes=10-19", "if-range": validator}, _ARCHIVED)
        assert got.status == 206 and got.body == body[10:20], validator
    for validator in other:
        got = ranged(body, 200, {"range": "bytes=10-19", "if-range": validator}, _ARCHIVED)
        assert got.status is None and got.body == body, validator
    weak = {"etag": 'W/"v1"'}
    assert ranged(body, 200, {"range": "bytes=1-2", "if-range": 'W/"v1"'}, weak).status is None
    assert ranged(body, 200, {"range": "bytes=1-2", "if-range": _LAST_MODIFIED}, {}).status is None
