"""What every insert buffer keeps and offers: the :class:`Buffer` contract,
the partition and row types it speaks in, and the row encoding both
implementations (``sqlite``, ``postgres``) share."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple, Protocol

import msgspec

from web_index.errors import StoreError
from web_index.models import GET_COLUMNS, HEAD_COLUMNS, AttemptRows, RecordType, row_dicts
from web_index.storage.indexes import response_capture_line

__all__ = [
    "Buffer",
    "BufferedAttempt",
    "BufferedKey",
    "MethodPartition",
    "attempt_lines",
    "buffer_rows",
    "decode_rows",
]

log = logging.getLogger("web_index.storage")
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode
# The SQLite buffer's blob, (metadata, responses), with the responses (bodies) left undecoded.
_decode_metadata = msgspec.msgpack.Decoder(tuple[Any, msgspec.Raw]).decode
# A blob holds an attempt's rows as validation made them, values in the order
# of METADATA_COLUMNS and GET_COLUMNS / HEAD_COLUMNS (web_index.ingest), not as
# maps: the keys, repeated in every row, were a tenth of a 2 KB page's blob and
# half the time to encode it. Blobs written before hold maps, and still decode.
# SQLite allows 999 host parameters per statement in old builds; stay below.
_SEEDS = {m: zlib.crc32(f"{m.value}\0".encode()) for m in RecordType}
_TYPES = {m.value: m for m in RecordType}  # a dict lookup; RecordType(value) costs ~10x that


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """Log ``message`` once per process (a reader asks the buffer on every query)."""
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("%s", message)


def _khash(method: RecordType, url_key: str) -> int:
    """The lookup index's key: a 32-bit hash of method and URL key (collisions only cost a row read)."""
    return zlib.crc32(url_key.encode(), _SEEDS[method])


class MethodPartition(NamedTuple):
    """A partition of both a method's data and its metadata (flushed together)."""

    method: RecordType
    year: int
    month: int
    domain: str

    def __str__(self) -> str:
        return f"{self.method.value}/{self.year:04d}/{self.month:02d}/{self.domain}"


class BufferedKey(NamedTuple):
    url_key: str
    ts_us: int
    request_id: str
    calibre: int
    success: bool


class BufferedAttempt(NamedTuple):
    request_id: str
    metadata: dict[str, Any]
    responses: list[dict[str, Any]]


def _unpack(meta: Any, responses: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A blob's rows (values in column order, or maps as written before) as dicts."""
    if isinstance(meta, dict):
        return meta, responses
    try:
        return row_dicts(meta, responses)
    except ValueError as exc:
        raise StoreError(f"buffered {exc}: not a layout this version of web-index reads") from None


def decode_rows(meta: bytes, responses: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The metadata row and response rows of the two blobs :func:`buffer_rows` makes."""
    return _unpack(_decode(meta), _decode(responses))


def buffer_rows(attempts: Sequence[AttemptRows], now: int) -> list[tuple[object, ...]]:
    """One row per attempt in the Postgres buffer's column order:
    method, year, month, domain, url_key, ts_us, request_id, calibre, success, nbytes,
    added_us (``now``, in microseconds), metadata (msgpack), responses (msgpack)."""
    rows: list[tuple[object, ...]] = []
    for a in attempts:
        meta = _encode(a.metadata)
        resp = _encode(a.responses)
        rows.append(
            (
                a.method.value,
                a.year,
                a.month,
                a.domain,
                a.url_key,
                a.ts_us,
                a.request_id,
                a.calibre,
                a.success,
                len(meta) + len(resp),
                now,
                meta,
                resp,
            )
        )
    return rows


def attempt_lines(responses: Sequence[Sequence[Any]]) -> list[tuple[int, bytes]]:
    """(position in the chain, capture line) of each response of an attempt's rows
    (values in column order): what a CDX query finds a buffered capture by, made
    once, at insert, so that a lookup reads neither bodies nor other URLs' rows."""
    return [(i, response_capture_line(row)) for i, row in enumerate(responses)]


def _lines_of(responses: Sequence[Any]) -> list[tuple[int, bytes]]:
    """:func:`attempt_lines` of the response rows of a blob as written (value rows, or maps
    as versions before wrote them)."""
    return attempt_lines(
        [
            tuple(row[n] for n in (GET_COLUMNS if "data" in row else HEAD_COLUMNS))
            if isinstance(row, dict)
            else row
            for row in responses
        ]
    )


def line_key(line: bytes) -> bytes:
    """A capture line's SURT key and time, what buffers index it by: up to the space before
    its JSON. Its range for a prefix a CDX query asks (a SURT-key prefix: no space but a
    final one) holds exactly the lines that start with the prefix."""
    return line[: line.index(b" ", line.index(b" ") + 1)]


def prefix_range(prefix: bytes) -> tuple[bytes, bytes | None]:
    """The byte strings starting with ``prefix`` are those from the first value up to (not
    including) the second (``None``: no upper bound), as SQLite and PostgreSQL compare blobs."""
    stem = prefix.rstrip(b"\xff")
    if not stem:
        return prefix, None
    return prefix, stem[:-1] + bytes([stem[-1] + 1])


def _attempt(request_id: str, body: bytes) -> BufferedAttempt:
    return BufferedAttempt(request_id, *_unpack(*_decode(body)))


def metadata_row(blob: bytes, *, whole: bool) -> dict[str, Any]:
    """The metadata row of a buffered attempt: of a SQLite blob of both rows
    (``whole``) without decoding its responses, or of a Postgres metadata blob."""
    meta = _decode_metadata(blob)[0] if whole else _decode(blob)
    return _unpack(meta, [])[0]


class Buffer(Protocol):
    """What the store needs from an insert buffer (SQLite by default; Postgres for many machines).

    Rows are whole attempts. A flush *claims* rows with a flush id, writes them
    to part files and then *completes* the flush (deletes them). Readers see
    claimed rows until they are completed.
    """

    readonly: bool
    remote: bool  # whether its reads wait on the network

    def close(self) -> None: ...
    def append(self, attempts: Sequence[AttemptRows]) -> None:
        """Store attempts durably in one transaction (all or none)."""
        ...

    def oversized(
        self, parts: Iterable[MethodPartition], max_rows: int, max_bytes: int
    ) -> list[MethodPartition]: ...
    def due(self, max_rows: int, max_bytes: int, max_age_s: float) -> list[MethodPartition]: ...
    def partitions(self) -> list[MethodPartition]: ...
    def claims(self, part: MethodPartition) -> list[str]: ...
    def claim(self, part: MethodPartition, flush_id: str, limit: int) -> int: ...
    def claimed(self, flush_id: str) -> Iterator[BufferedAttempt]: ...
    def complete(self, flush_id: str) -> None: ...
    def lookup(self, method: RecordType, url_keys: Iterable[str]) -> list[BufferedKey]: ...
    def load(self, request_ids: Iterable[str]) -> dict[str, BufferedAttempt]: ...
    def iter_all(self) -> Iterator[tuple[MethodPartition, str | None, BufferedAttempt]]: ...
    def iter_metadata(self) -> Iterator[tuple[MethodPartition, str | None, dict[str, Any]]]:
        """Every buffered attempt's partition, claim and metadata row, as
        :meth:`iter_all` gives them, without decoding its responses (bodies)."""
        ...

    def domain_attempts(
        self, method: RecordType, domain: str
    ) -> list[tuple[MethodPartition, BufferedAttempt]]:
        """Every buffered attempt of ``method`` in ``domain``'s partitions, claimed
        or not, in the order they were buffered (what a CDX query adds to the files')."""
        ...

    def capture_lines(
        self, method: RecordType, domain: str, prefixes: Sequence[bytes]
    ) -> dict[tuple[int, int], list[bytes]]:
        """The capture lines (``_capture_lines``) of every buffered response of ``method`` in
        ``domain``'s partitions, claimed or not, that start with one of ``prefixes``, by
        (year, month), unsorted: found by key, made at insert, no body read."""
        ...

    def counts(self) -> dict[MethodPartition, tuple[int, int, int]]: ...
    def generation(self, method: RecordType, year: int, month: int) -> int:
        """A counter bumped by every completed flush of that month (``0, 0``: of a new month)."""
        ...
