"""The CDX and Resource parameters as Starlette's ``query_params`` would give them, each name's values
in order: read from the query string directly (``server._cdx.query_params``)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from web_index.server._cdx import query_params

# Names and values with what a query string can hold: escapes (valid, malformed, of UTF-8 and of
# Latin-1 bytes), "+", "=", empty parts, repeated names.
_PIECES = st.sampled_from(
    ["url", "filter", "a", "", "=", "+", "%2B", "%3D", "%26", "%C3%A9", "%E9", "%zz", "%", "é", "x y"]
)
_PARTS = st.lists(st.lists(_PIECES, max_size=4).map("".join), max_size=8).map("&".join)


@given(_PARTS)
def test_query_params_are_starlettes(query: str) -> None:
    raw = query.encode("utf-8")
    request = Request({"type": "http", "method": "GET", "path": "/", "query_string": raw, "headers": []})
    expected: dict[str, list[str]] = {}
    for name, value in request.query_params.multi_items():
        expected.setdefault(name, []).append(value)
    assert query_params(request) == expected
