"""The HTTP response inside a WARC ``response`` record: status line, header
fields and body, split as sent (nothing decoded)."""

from __future__ import annotations

import re

from web_index.errors import InvalidRecordError

__all__ = ["parse_http_response"]

_STATUS = re.compile(rb"HTTP/\d(?:\.\d)? +(\d{3})(?: .*)?")


def parse_http_response(block: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """``(status, [(name, value)...], body)`` of an HTTP/1.x response message.

    Lines may end in CRLF or a bare LF (both are met in the wild); a field
    folded over several lines is unfolded. Anything that is not an HTTP
    response is an :class:`InvalidRecordError` on ``payload``.
    """
    end = block.find(b"\r\n\r\n")
    sep = 4
    bare = block.find(b"\n\n")
    if bare != -1 and (end == -1 or bare < end):
        end, sep = bare, 2
    if end == -1:
        raise InvalidRecordError("payload", "not an HTTP response: no end of the header block")
    lines = block[:end].replace(b"\r\n", b"\n").split(b"\n")
    status = _STATUS.fullmatch(lines[0].rstrip())
    if status is None:
        shown = lines[0][:60].decode("latin-1")
        raise InvalidRecordError("payload", f"not an HTTP response: status line {shown!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and headers:
            folded_name, folded = headers[-1]
            headers[-1] = (folded_name, f"{folded} {line.strip().decode('latin-1')}")
            continue
        raw_name, colon, raw_value = line.partition(b":")
        if not colon or not raw_name.strip():
            continue  # a malformed field line is dropped, as browsers do
        headers.append((raw_name.strip().decode("latin-1"), raw_value.strip().decode("latin-1")))
    return int(status[1]), headers, block[end + sep :]
