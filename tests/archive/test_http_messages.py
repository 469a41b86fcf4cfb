"""HTTP response messages as WARC records hold them: the head ends at the first blank line,
CRLF or bare LF, whatever the body holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from web_index.archive._http import parse_http_response

_names = st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
_values = st.text("abcdefghij ;=/0123456789", max_size=20).map(str.strip)
_endings = st.sampled_from([b"\r\n", b"\n"])
_bodies = st.lists(st.sampled_from([b"x", b"\n", b"\r", b"\r\n\r\n", b"\n\n", b"\x00\xff"]), max_size=30).map(
    b"".join
)


@given(
    status=st.integers(100, 599),
    fields=st.lists(st.tuples(_names, _values, _endings), max_size=6),
    first=_endings,
    blank=_endings,
    body=_bodies,
)
def test_the_head_ends_at_its_first_blank_line(
    status: int, fields: list[tuple[str, str, bytes]], first: bytes, blank: bytes, body: bytes
) -> None:
    head = b"HTTP/1.1 %d Reason" % status + first
    head += b"".join(f"{name}: {value}".encode() + ending for name, value, ending in fields)
    if blank == b"\r\n" and head.endswith(b"\n") and not head.endswith(b"\r\n"):
        blank = b"\n"  # a bare LF then CRLF is no blank line: the head's last line ends it
    parsed = parse_http_response(head + blank + body)
    assert parsed == (status, [(name, value) for name, value, _ in fields], body)
