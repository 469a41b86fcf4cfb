"""A capture as one CDXJ line: what the capture index holds and a CDX query reads.

Each response of a chain is a capture of its own URL (as the WARC export
writes each as a record), so one stored row is one line::

    com,example)/a 20240501120000 {"url":"https://example.com/a","mime":"text/html",...}

the SURT key, the response's time in 14 digits, and a JSON object: pywb's
``url``, ``mime``, ``status`` and ``digest`` (the payload's SHA-1 in base32,
``-`` for a HEAD response), then which response it is: ``request_id`` and
``position`` (its place in the chain), ``page`` (the attempt's URL key) and
``attempt_us`` (its start), which make the :class:`~web_index.models.PageKey`
that loads it. These are :class:`CaptureFields`, the same whether the capture
is buffered or in a file.

An index's line (format 2) goes on with the rest of the response, so that a
lookup needs nothing but the line and its body (:class:`StoredCapture`): its
``row`` in the file, its time to the microsecond (``at``), ``final``,
``retry``, the ``fetcher`` (name, version, calibre), the header fields, the
attempt's URL and the request URL as given when they differ from ``page`` and
``url``, and the body's place in the file (``body``, ``codec``:
:class:`~web_index.storage.pages.BodyPlace`). pywb reads such a line as it
reads any CDXJ line: it skips fields it does not know.

Lines sort as bytes in (key, time) order because neither a SURT key nor a
timestamp holds a byte at or below the space that separates them (a key is
made from a target URI, which is printable ASCII without spaces). One capture
read twice (from a file and from the buffer, during a flush) has the same
line up to its ``page`` field (:func:`capture_identity`), which is how a merge
drops the second.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from web_index.models import GET_COLUMNS, HEAD_COLUMNS, RecordType, payload_sha1, sha1_base32
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN
from web_index.storage.backends import Backend, FileInfo
from web_index.storage.pages import BodyPlace, body_places
from web_index.storage.payloads import holder_places
from web_index.urls import surt_key, target_uri

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = [
    "CAPTURE_COLUMNS",
    "CaptureFields",
    "StoredCapture",
    "capture_identity",
    "capture_lines",
    "capture_mime",
    "capture_stamp",
    "file_capture_lines",
    "line_row",
    "parse_capture_line",
    "parse_stored_capture",
    "referring_places",
    "response_capture_line",
    "shared_places",
    "unique_lines",
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
# And what an index's line adds: every other column but the body and its SHA-256.
STORED_COLUMNS = [
    *CAPTURE_COLUMNS,
    "url",
    "retry_attempt",
    "is_final",
    "fetcher_name",
    "fetcher_version",
    "fetcher_calibre",
]
_ENCODE = msgspec.json.Encoder().encode
_HEADERS = msgspec.json.Decoder(dict[str, str]).decode


class CaptureFields(msgspec.Struct, frozen=True):
    """A capture line's JSON: pywb's fields, and which response it is."""

    url: str
    mime: str
    status: str
    digest: str
    request_id: str
    position: int
    page: str
    attempt_us: int


class StoredCapture(CaptureFields, frozen=True, omit_defaults=True):
    """An index's line (format 2): the response whole but for its body, and
    where the body is. A line without them (``row`` -1: buffered, of a part
    file, of an index of format 1) is loaded the way records are queried."""

    row: int = -1  # the response's row in the compacted file
    at: int = 0  # its time, in microseconds
    final: bool = False
    retry: int = 0
    fetcher: tuple[str, str, int] = ("", "", 0)
    headers: dict[str, str] = {}
    src: str | None = None  # the attempt's URL as given, if not ``page``
    req: str | None = None  # the request URL as given, if not ``url``
    body: tuple[int, int, int, int] | None = None  # BodyPlace's at, size, raw, value
    codec: str = "zstd"
    # The month (``yyyy/mm``) of the compacted file that holds the body, when the
    # row refers to a payload another file holds (storage/payloads/_refs.py).
    held: str | None = None

    @property
    def place(self) -> BodyPlace | None:
        return None if self.body is None else BodyPlace(*self.body, self.codec)


class _Row(msgspec.Struct):
    row: int = -1


_DECODE = msgspec.json.Decoder(CaptureFields).decode
_DECODE_STORED = msgspec.json.Decoder(StoredCapture).decode
_DECODE_ROW = msgspec.json.Decoder(_Row).decode


def parse_capture_line(line: str | bytes) -> tuple[str, str, CaptureFields]:
    """A line's SURT key, 14-digit time and fields."""
    text = line if isinstance(line, str) else line.decode()
    key, stamp, rest = text.split(" ", 2)
    return key, stamp, _DECODE(rest)


def parse_stored_capture(line: bytes) -> StoredCapture:
    """A line's fields, with every value an index's line (format 2) carries."""
    at = line.index(b" ", line.index(b" ") + 1) + 1
    return _DECODE_STORED(line[at:])


def line_row(line: bytes) -> int:
    """The file row of an index's line (-1 for a line without one)."""
    return _DECODE_ROW(line[line.index(b" ", line.index(b" ") + 1) + 1 :]).row


def capture_identity(line: bytes) -> bytes:
    """What one capture's lines share wherever it was read from: the line up to ``page``."""
    at = line.find(b',"page":')
    return line if at < 0 else line[:at]


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


def capture_lines(
    type: RecordType,
    table: pa.Table,
    *,
    first_row: int | None = None,
    places: Sequence[BodyPlace | None] | None = None,
    held: Mapping[int, str] | None = None,
) -> list[bytes]:
    """One line for each row of ``table`` (a ``get`` or ``head`` table with
    :data:`CAPTURE_COLUMNS`, and ``payload_sha1`` for ``get``), in row order.
    With ``first_row`` (the table's first row in its file; the table then has
    :data:`STORED_COLUMNS`), an index's lines of format 2, with each body's
    place from ``places`` where given, in the file of the month ``held`` gives
    for a row (by its position in ``table``) whose payload another file holds."""
    import pyarrow as pa

    names = CAPTURE_COLUMNS if first_row is None else STORED_COLUMNS
    columns: dict[str, list[Any]] = {}
    for name in names:
        column = table.column(name)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.int64())
        columns[name] = column.to_pylist()
    sha1s: list[Any] | None = table.column("payload_sha1").to_pylist() if type is RecordType.GET else None
    c = columns
    return [
        _line(
            c["url_key"][i],
            c["attempt_timestamp"][i],
            c["request_id"][i],
            c["chain_index"][i],
            c["request_url"][i],
            c["status_code"][i],
            c["headers"][i],
            c["timestamp"][i],
            None if sha1s is None else sha1s[i],
            None
            if first_row is None
            else (
                first_row + i,
                c["url"][i],
                c["retry_attempt"][i],
                c["is_final"][i],
                (c["fetcher_name"][i], c["fetcher_version"][i], c["fetcher_calibre"][i]),
                None if places is None else places[i],
                None if held is None else held.get(i),
            ),
        )
        for i in range(table.num_rows)
    ]


# Where the values a line is made of sit in a response row of values in the
# order of web_index.models.HEAD_COLUMNS / GET_COLUMNS (what ingest makes and
# the insert buffer keeps).
_AT = {name: HEAD_COLUMNS.index(name) for name in CAPTURE_COLUMNS}
_BODY_AT = GET_COLUMNS.index(BODY_COLUMN)


def response_capture_line(row: Sequence[Any]) -> bytes:
    """The line of one response row of values in the order of
    :data:`~web_index.models.GET_COLUMNS` or :data:`~web_index.models.HEAD_COLUMNS`
    (timestamps in microseconds): the line :func:`capture_lines` makes of the
    row once stored, up to its ``page`` field and :class:`CaptureFields`' fields
    (a ``get`` row's SHA-1 computed from its body here)."""
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
        None,
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
    stored: tuple[int, str, int, bool, tuple[str, str, int], BodyPlace | None, str | None] | None,
) -> bytes:
    url = target_uri(request_url)
    fields = _HEADERS(headers)
    common = (url, capture_mime(fields), str(status), "-" if sha1 is None else sha1_base32(sha1))
    if stored is None:
        record: CaptureFields = CaptureFields(*common, request_id, position, page, attempt_us)
    else:
        row, given, retry, final, fetcher, place, held = stored
        record = StoredCapture(
            *common,
            request_id,
            position,
            page,
            attempt_us,
            row=row,
            at=ts_us,
            final=final,
            retry=retry,
            fetcher=fetcher,
            headers=fields,
            src=None if given == page else given,
            req=None if request_url == url else request_url,
            body=None if place is None else (place.at, place.size, place.raw, place.value),
            codec="zstd" if place is None else place.codec,
            held=None if place is None else held,
        )
    return f"{surt_key(url)} {capture_stamp(ts_us)} ".encode() + _ENCODE(record)


def file_capture_lines(
    type: RecordType,
    handle: pq.ParquetFile,
    *,
    stored: bool = False,
    backend: Backend | None = None,
    path: str = "",
    seen: dict[str, FileInfo] | None = None,
    sizes: Sequence[int | None] | None = None,
) -> Iterator[list[bytes]]:
    """The lines of a store file, a row group at a time, bodies unread (a file
    written before payload digests were stored has its SHA-1s computed from
    them); with ``stored``, an index's lines of format 2, each with its body's
    place where the file's pages allow (:func:`~web_index.storage.pages.body_places`),
    a row that refers to its payload with the holder's place (looked up through
    ``backend`` when another file, ``path`` being this one's; ``seen``: see
    :func:`~web_index.storage.payloads.holder_places`); ``sizes``: the bodies' lengths,
    when the file's writer knows them (the places then follow from them)."""
    import pyarrow as pa

    names = handle.schema_arrow.names
    digests = DIGEST_COLUMNS[0] in names
    columns = list(STORED_COLUMNS if stored else CAPTURE_COLUMNS)
    if type is RecordType.GET:
        columns.append(DIGEST_COLUMNS[0] if digests else BODY_COLUMN)
    shared: dict[int, tuple[BodyPlace, str | None] | None] = {}
    if stored and type is RecordType.GET and REF_COLUMN in names and backend is not None:
        refs = handle.read(columns=[REF_COLUMN], use_threads=False).column(0)
        shared = referring_places(backend, handle, path, refs, seen, sizes=sizes)
    first = 0
    for g in range(handle.metadata.num_row_groups):
        table = handle.read_row_group(g, columns=columns, use_threads=False)
        if type is RecordType.GET and not digests:
            sha1s = [payload_sha1(body or b"") for body in table.column(BODY_COLUMN).to_pylist()]
            table = table.append_column(DIGEST_COLUMNS[0], pa.array(sha1s, type=pa.binary(20)))
        known = None if sizes is None else sizes[first : first + table.num_rows]
        places = body_places(handle, g, known) if stored and type is RecordType.GET else None
        held = shared_places(shared, first, table.num_rows, places)
        yield capture_lines(type, table, first_row=first if stored else None, places=places, held=held)
        first += table.num_rows


def referring_places(
    backend: Backend,
    handle: pq.ParquetFile,
    path: str,
    refs: pa.ChunkedArray[Any],
    seen: dict[str, FileInfo] | None = None,
    own: tuple[pa.Table, Sequence[BodyPlace | None]] | None = None,
    *,
    sizes: Sequence[int | None] | None = None,
) -> dict[int, tuple[BodyPlace, str | None] | None]:
    """The holder's place (and month, when another file's) of each row of the file
    ``handle`` (at ``path``) that ``refs``, its ``payload_ref`` column, says refers
    to its payload: ``None`` for one whose holder cannot be placed. ``own``, ``sizes``: see
    :func:`~web_index.storage.payloads.holder_places`."""
    if refs.null_count == len(refs):
        return {}
    wanted = {i: ref for i, ref in enumerate(refs.to_pylist()) if ref is not None}
    found = holder_places(backend, handle, path, wanted, seen, own, sizes)
    return {i: found.get(i) for i in wanted}


def shared_places(
    shared: Mapping[int, tuple[BodyPlace, str | None] | None],
    first: int,
    rows: int,
    places: list[BodyPlace | None] | None,
) -> dict[int, str]:
    """Put the holders' places of a row group's referring rows (numbered in the
    file from ``first``; ``None``: not found) into ``places``; return the months
    of those held elsewhere, by position in the group."""
    held: dict[int, str] = {}
    if not shared or places is None:
        return held
    for i in range(rows):
        if first + i not in shared:
            continue
        found = shared[first + i]
        # An empty body's place would be no place: without the holder's, none.
        places[i] = None if found is None else found[0]
        if found is not None and found[1] is not None:
            held[i] = found[1]
    return held


def unique_lines(lines: Iterable[bytes]) -> list[bytes]:
    """``lines`` sorted, each capture once (of two lines of one capture, the first in byte order)."""
    out: list[bytes] = []
    last = None
    for line in sorted(lines):
        ident = capture_identity(line)
        if ident != last:
            out.append(line)
            last = ident
    return out
