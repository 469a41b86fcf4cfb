from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from web_index.errors import InvalidRecordError
from web_index.models import (
    STORED_END_US,
    AttemptMetadata,
    AttemptRows,
    AttemptState,
    Calibre,
    RecordType,
    Response,
    check_stored_us,
    parse_ts,
    to_us,
)
from web_index.urls import is_plain_url, key_and_domain, url_key

__all__ = ["Limits", "new_request_id", "new_request_ids", "validate_attempt"]


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """The largest values an insert may hold (``WebIndex(limits=...)``).

    A record is refused, naming the field, rather than stored whole: one body
    passes through the buffer, a flush and a compaction, each holding it in
    memory a few times over, so a single huge value costs the process many
    times its size (a 200 MB body took 2.5 GB). The defaults sit well above the
    web's pages (and the fetchers' own 32 MiB body cap).
    """

    max_body_bytes: int = 64 * 1024 * 1024  # one response's body
    max_headers_bytes: int = 1024 * 1024  # one response's headers, as JSON (characters)
    max_url_chars: int = 32 * 1024  # the URL and every request URL of the chain
    max_text_chars: int = 1024 * 1024  # metadata logs and traceback, each


DEFAULT_LIMITS = Limits()


_lock = threading.Lock()
_last = [0, 0]  # last (millisecond, counter) handed out by this process
_POOL_IDS = 512
_random = ""  # hex digits of random bits for the next ids (16 each), read from ``_used`` on
_used = 0
_prefix = (-1, "")  # a millisecond and the first 15 characters of its ids
# The variant's two bits (0b10) and two random bits, from one random hex digit.
_VARIANT = {c: "89ab"[int(c, 16) & 3] for c in "0123456789abcdef"}


def _forget_pool() -> None:
    # A forked child must not hand out its parent's random bits.
    global _random, _used
    _random, _used = "", 0


os.register_at_fork(after_in_child=_forget_pool)


def new_request_id() -> str:
    """A unique, time-ordered id: a UUIDv7 (RFC 9562) string.

    Ids from one process strictly increase (a counter in ``rand_a`` breaks ties
    within a millisecond); ids from different processes order by millisecond
    and are unique by 62 random bits.
    """
    return new_request_ids(1)[0]


def new_request_ids(n: int) -> list[str]:
    """``n`` ids, as ``n`` calls of :func:`new_request_id` in a row would make
    them, for one lock and one clock read (an insert of many takes its ids so)."""
    global _random, _used, _prefix
    out: list[str] = []
    if n <= 0:
        return out
    with _lock:
        ms = time.time_ns() // 1_000_000
        last_ms, counter = _last
        if ms <= last_ms:
            ms, counter = last_ms, counter + 1
            if counter > 0xFFF:
                ms, counter = ms + 1, 0
        else:
            counter = 0
        if len(_random) - _used < 16 * n:
            _random, _used = _random[_used:] + os.urandom(8 * max(n, _POOL_IDS)).hex(), 0
        rand, start = _random, _used
        _used += 16 * n
        prefix_ms, prefix = _prefix
        variant = _VARIANT
        for i in range(start, start + 16 * n, 16):
            if prefix_ms != ms:
                h = f"{ms & ((1 << 48) - 1):012x}"
                prefix_ms, prefix = ms, f"{h[:8]}-{h[8:]}-7"
            out.append(
                f"{prefix}{counter:03x}-{variant[rand[i]]}{rand[i + 1 : i + 4]}-{rand[i + 4 : i + 16]}"
            )
            counter += 1
            if counter > 0xFFF:
                ms, counter = ms + 1, 0
        # The last id handed out: undo the step past it.
        if counter == 0:
            _last[0], _last[1] = ms - 1, 0xFFF
        else:
            _last[0], _last[1] = ms, counter - 1
        _prefix = (prefix_ms, prefix)
    return out


_NOT_UTF8 = "cannot be stored: not encodable as UTF-8 (a lone surrogate such as \\udcff?)"


def _check_utf8(value: str, field: str) -> None:
    # Every text column is UTF-8: a lone surrogate (a "\udcff" JSON escape, or
    # bytes decoded with surrogateescape) would fail only when written.
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InvalidRecordError(field, _NOT_UTF8) from None


def _coerce(cls: type[Any], value: object, field: str) -> Any:
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return cls.from_dict(value, field)
    raise InvalidRecordError(field, f"expected {cls.__name__} or a mapping, got {type(value).__name__}")


_METHODS: dict[str, RecordType] = {"get": RecordType.GET, "head": RecordType.HEAD}
_SUCCESS = AttemptState.SUCCESS
_STATE_VALUES = {s: s.value for s in AttemptState}
_encode_json = msgspec.json.Encoder().encode


def _too_long(field: str, size: int, limit: int, unit: str) -> None:
    raise InvalidRecordError(
        field, f"{size:,} {unit}, over the store's limit of {limit:,} (Limits, WebIndex(limits=...))"
    )


def validate_attempt(
    type: RecordType | str,
    url: str,
    timestamp: datetime | str,
    metadata: AttemptMetadata | Mapping[str, Any],
    data: Sequence[Response | Mapping[str, Any]],
    *,
    request_id: str | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> AttemptRows:
    """Check an insertion request against every rule of the standard and the
    store's ``limits``.

    Raises :class:`InvalidRecordError` naming the first offending field; on
    success returns the rows to store, with a fresh ``request_id``.
    """
    # The common case (records built as structs, a UTC datetime, a list) skips
    # the generic coercions; anything else takes them, with the same errors.
    method = _METHODS.get(type) if isinstance(type, str) else None
    if method is None:
        method = RecordType.parse(type)
        if method.is_metadata:
            raise InvalidRecordError("type", f"insert a 'get' or 'head' attempt, not {method.value!r}")
    if not isinstance(url, str):
        raise InvalidRecordError("url", f"expected a string, got {url!r}")
    if len(url) > limits.max_url_chars:
        _too_long("url", len(url), limits.max_url_chars, "characters")
    key, domain = key_and_domain(url)
    if isinstance(timestamp, datetime) and timestamp.tzinfo is UTC and timestamp.__class__ is datetime:
        start = timestamp  # what parse_ts would return
    else:
        start = parse_ts(timestamp, "timestamp")
    ts_us = to_us(start)
    if not 0 <= ts_us < STORED_END_US:
        check_stored_us(ts_us, "timestamp")
    meta: AttemptMetadata = (
        metadata if isinstance(metadata, AttemptMetadata) else _coerce(AttemptMetadata, metadata, "metadata")
    )
    if not (data.__class__ is list or data.__class__ is tuple) and (
        isinstance(data, str | bytes) or not isinstance(data, Sequence)
    ):
        raise InvalidRecordError("data", "expected a list of data records")
    chain: list[Response] = [
        r if isinstance(r, Response) else _coerce(Response, r, f"data[{i}]") for i, r in enumerate(data)
    ]

    if meta.url != url:
        raise InvalidRecordError("metadata.url", f"{meta.url!r} differs from the attempt's url {url!r}")
    if meta.timestamp is not None and meta.timestamp != start:
        raise InvalidRecordError("metadata.timestamp", "differs from the attempt's timestamp")
    if meta.request_id is not None:
        raise InvalidRecordError("metadata.request_id", "must not be supplied: the store assigns it")
    fetcher_name, fetcher_version = meta.fetcher_name, meta.fetcher_version
    if not (fetcher_name.isascii() and fetcher_version.isascii()):
        _check_utf8(fetcher_name, "metadata.fetcher_name")
        _check_utf8(fetcher_version, "metadata.fetcher_version")
    if meta.logs is not None:
        _check_utf8(meta.logs, "metadata.logs")
        if len(meta.logs) > limits.max_text_chars:
            _too_long("metadata.logs", len(meta.logs), limits.max_text_chars, "characters")
    if meta.traceback is not None:
        _check_utf8(meta.traceback, "metadata.traceback")
        if len(meta.traceback) > limits.max_text_chars:
            _too_long("metadata.traceback", len(meta.traceback), limits.max_text_chars, "characters")
    calibre = meta.fetcher_calibre
    if calibre.__class__ is not int or not 0 <= calibre < Calibre.MAX:
        Calibre.check(calibre, "metadata.fetcher_calibre", allow_reserved=False)
    success = meta.state is _SUCCESS
    if success and not chain:
        raise InvalidRecordError("data", "a successful attempt needs a non-empty response chain")
    if not success and chain:
        raise InvalidRecordError(
            "data", f"a failed attempt (state {meta.state.value!r}) must have an empty response chain"
        )

    rid = request_id or new_request_id()
    is_get = method is RecordType.GET
    responses: list[tuple[Any, ...]] = []
    last = len(chain) - 1
    for i, resp in enumerate(chain):
        if resp.request_id is not None:
            raise InvalidRecordError(f"data[{i}].request_id", "must not be supplied: the store assigns it")
        if resp.url != url:
            raise InvalidRecordError(f"data[{i}].url", f"{resp.url!r} differs from the attempt's url {url!r}")
        request_url = resp.request_url
        if not request_url:
            raise InvalidRecordError(f"data[{i}].request_url", "must be the URL of this request")
        if len(request_url) > limits.max_url_chars:
            _too_long(f"data[{i}].request_url", len(request_url), limits.max_url_chars, "characters")
        if request_url != url and not is_plain_url(request_url):
            try:
                url_key(request_url)
            except InvalidRecordError as exc:
                raise InvalidRecordError(f"data[{i}].request_url", exc.problem) from None
        if resp.is_final != (i == last):
            expected = "the last record, and only it, has is_final=true"
            raise InvalidRecordError(f"data[{i}].is_final", expected)
        body = resp.data
        if body is None:
            if is_get:
                raise InvalidRecordError(f"data[{i}].data", "GET records need a body (b'' if empty)")
        elif not is_get:
            raise InvalidRecordError(f"data[{i}].data", "HEAD records have no body: use data=None")
        elif len(body) > limits.max_body_bytes:
            _too_long(f"data[{i}].data", len(body), limits.max_body_bytes, "bytes")
        if resp.fetcher_name != fetcher_name:
            raise InvalidRecordError(
                f"data[{i}].fetcher_name", "differs from the metadata's: one attempt, one fetcher"
            )
        if resp.fetcher_version != fetcher_version:
            raise InvalidRecordError(
                f"data[{i}].fetcher_version", "differs from the metadata's: one attempt, one fetcher"
            )
        if resp.fetcher_calibre != calibre:
            raise InvalidRecordError(
                f"data[{i}].fetcher_calibre", "differs from the metadata's: one attempt, one fetcher"
            )
        resp_us = to_us(resp.timestamp)
        if not 0 <= resp_us < STORED_END_US:
            check_stored_us(resp_us, f"data[{i}].timestamp")
        try:
            headers = _encode_json(resp.headers).decode()
        except UnicodeEncodeError:
            raise InvalidRecordError(f"data[{i}].headers", _NOT_UTF8) from None
        if len(headers) > limits.max_headers_bytes:
            _too_long(f"data[{i}].headers", len(headers), limits.max_headers_bytes, "characters as JSON")
        # In the order of HEAD_COLUMNS (GET_COLUMNS: the body last).
        row = (
            key,
            url,
            ts_us,
            rid,
            i,
            request_url,
            resp.status_code,
            headers,
            resp_us,
            resp.retry_attempt,
            resp.is_final,
            fetcher_name,
            fetcher_version,
            calibre,
        )
        responses.append((*row, body) if is_get else row)

    metadata_row = (  # in the order of METADATA_COLUMNS
        key,
        url,
        ts_us,
        rid,
        _STATE_VALUES[meta.state],
        meta.logs,
        meta.traceback,
        meta.run_time,
        fetcher_name,
        fetcher_version,
        calibre,
    )
    return AttemptRows(
        method=method,
        url=url,
        url_key=key,
        domain=domain,
        year=start.year,
        month=start.month,
        ts_us=ts_us,
        timestamp=start,
        request_id=rid,
        calibre=calibre,
        success=success,
        metadata=metadata_row,
        responses=responses,
    )
