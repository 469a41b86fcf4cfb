"""A capture as one CDXJ line: what the capture index holds and a CDX query reads.

Each response of a chain is a capture of its own URL (as the WARC export
writes each as a record), so one stored row is one line::

    com,example)/a 20240501120000 {"url":"https://example.com/a","mime":"text/html",...}

the SURT key, the response's time in 14 digits, and a JSON object: pywb's
``url``, ``mime``, ``status`` and ``digest`` (the payload's SHA-1 in base32,
``-`` for a HEAD response), then where the response is in the store:
``request_id`` and ``position`` (its place in the chain), ``page`` (the
attempt's URL key) and ``attempt_us`` (its start), which make the
:class:`~web_index.models.PageKey` that loads it.

Lines sort as bytes in (key, time) order because neither a SURT key nor a
timestamp holds a byte at or below the space that separates them (a key is
made from a target URI, which is printable ASCII without spaces). A line is a
function of the row alone, so the same capture read twice (from a file and
from the buffer, during a flush) is the same line, and merging drops it.
"""

from __future__ import annotations

import time
from base64 import b32encode
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from web_index.models import GET_COLUMNS, HEAD_COLUMNS, RecordType, payload_sha1
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS
from web_index.urls import surt_key, target_uri

__all__ = [
    "CAPTURE_COLUMNS",
    "CaptureFields",
    "capture_lines",
    "capture_mime",
    "capture_stamp",
    "file_capture_lines",
    "parse_capture_line",
    "response_capture_line",
]

# The columns a line is made of (``get`` tables also give payload_sha1).
CAPTURE_COLUMNS = [
    "url_key",
    "attempt_timestamp",
    "request_id",
    "chain_index",
    "request_url",
    "status_code",
    "headers",
    "timestamp",
]
_ENCODE = msgspec.json.Encoder().encode
_HEADERS = msgspec.json.Decoder(dict[str, str]).decode


class CaptureFields(msgspec.Struct, frozen=True):
    """A capture line's JSON: pywb's fields, and where the response is."""

    url: str
    mime: str
    status: str
    digest: str
    request_id: str
    position: int
    page: str
    attempt_us: int


_DECODE = msgspec.json.Decoder(CaptureFields).decode


def parse_capture_line(line: str | bytes) -> tuple[str, str, CaptureFields]:
    """A line's SURT key, 14-digit time and fields."""
    text = line if isinstance(line, str) else line.decode()
    key, stamp, rest = text.split(" ", 2)
    return key, stamp, _DECODE(rest)


def capture_stamp(us: int) -> str:
    """A time (microseconds since the epoch) as a CDX timestamp: 14 digits, UTC, whole seconds."""
    return time.strftime("%Y%m%d%H%M%S", time.gmtime(us // 1_000_000))


def capture_mime(headers: Mapping[str, str]) -> str:
    """A response's CDX ``mime``: its Content-Type's media type, lower-case and
    without spaces (a CDX text line is split on them); ``unk`` without one."""
    for name, value in headers.items():
        if name.lower() == "content-type":
            mime = "".join(value.split(";", 1)[0].split()).lower()
            return mime or "unk"
    return "unk"


def capture_lines(type: RecordType, table: pa.Table) -> list[bytes]:
    """One line for each row of ``table`` (a ``get`` or ``head`` table with
    :data:`CAPTURE_COLUMNS`, and ``payload_sha1`` for ``get``), in row order."""
    columns: dict[str, list[Any]] = {}
    for name in CAPTURE_COLUMNS:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        columns[name] = column.to_pylist()
    sha1s: list[Any] | None = table.column("payload_sha1").to_pylist() if type is RecordType.GET else None
    return [
        _line(
            columns["url_key"][i],
            columns["attempt_timestamp"][i],
            columns["request_id"][i],
            columns["chain_index"][i],
            request_url,
            columns["status_code"][i],
            columns["headers"][i],
            columns["timestamp"][i],
            None if sha1s is None else sha1s[i],
        )
        for i, request_url in enumerate(columns["request_url"])
    ]


# Where the values a line is made of sit in a response row of values in the
# order of web_index.models.HEAD_COLUMNS / GET_COLUMNS (what ingest makes and
# the insert buffer keeps).
_AT = {name: HEAD_COLUMNS.index(name) for name in CAPTURE_COLUMNS}
_BODY_AT = GET_COLUMNS.index(BODY_COLUMN)


def response_capture_line(row: Sequence[Any]) -> bytes:
    """The line of one response row of values in the order of
    :data:`~web_index.models.GET_COLUMNS` or :data:`~web_index.models.HEAD_COLUMNS`
    (timestamps in microseconds): the same bytes :func:`capture_lines` makes of
    the row once stored (a ``get`` row's SHA-1 computed from its body here)."""
    sha1 = payload_sha1(row[_BODY_AT] or b"") if len(row) == len(GET_COLUMNS) else None
    at = _AT
    return _line(
        row[at["url_key"]],
        row[at["attempt_timestamp"]],
        row[at["request_id"]],
        row[at["chain_index"]],
        row[at["request_url"]],
        row[at["status_code"]],
        row[at["headers"]],
        row[at["timestamp"]],
        sha1,
    )


def _line(
    page: str,
    attempt_us: int,
    request_id: str,
    position: int,
    request_url: str,
    status: int,
    headers: str,
    ts_us: int,
    sha1: bytes | None,
) -> bytes:
    url = target_uri(request_url)
    fields = CaptureFields(
        url=url,
        mime=capture_mime(_HEADERS(headers)),
        status=str(status),
        digest="-" if sha1 is None else b32encode(sha1).decode(),
        request_id=request_id,
        position=position,
        page=page,
        attempt_us=attempt_us,
    )
    return f"{surt_key(url)} {capture_stamp(ts_us)} ".encode() + _ENCODE(fields)


def file_capture_lines(type: RecordType, handle: pq.ParquetFile) -> Iterator[list[bytes]]:
    """The lines of a store file, a row group at a time, bodies unread (a file
    written before payload digests were stored has its SHA-1s computed from them)."""
    digests = DIGEST_COLUMNS[0] in handle.schema_arrow.names
    columns = list(CAPTURE_COLUMNS)
    if type is RecordType.GET:
        columns.append(DIGEST_COLUMNS[0] if digests else BODY_COLUMN)
    for g in range(handle.metadata.num_row_groups):
        table = handle.read_row_group(g, columns=columns, use_threads=False)
        if type is RecordType.GET and not digests:
            sha1s = [payload_sha1(body or b"") for body in table.column(BODY_COLUMN).to_pylist()]
            table = table.append_column(DIGEST_COLUMNS[0], pa.array(sha1s, type=pa.binary(20)))
        yield capture_lines(type, table)
