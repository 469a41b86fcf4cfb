"""The insert validation as it was before the fast paths (commit 57b7260), kept as
the oracle of the differential tests in ``test_ingest.py``: the fast
``validate_attempt`` must accept, refuse (same field, same message) and
produce exactly what this does. Rules added since (the accepted time range,
text that UTF-8 can hold) are added here too, in the same order."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

from web_index.errors import InvalidRecordError
from web_index.models import AttemptMetadata, AttemptState, Calibre, RecordType, Response
from web_index.models._time import check_stored_us, parse_ts, to_us
from web_index.urls import domain_of, url_key

__all__ = ["validate_reference"]


_FETCHER_FIELDS = ("fetcher_name", "fetcher_version", "fetcher_calibre")


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One validated fetch attempt, ready to be stored.

    ``metadata`` and ``responses`` are flat rows in the store's column layout
    (timestamps as microseconds since the epoch).
    """

    method: RecordType
    url: str
    url_key: str
    domain: str
    year: int
    month: int
    ts_us: int
    request_id: str
    calibre: int
    success: bool
    metadata: dict[str, Any]
    responses: list[dict[str, Any]]


_lock = threading.Lock()
_last = [0, 0]  # last (millisecond, counter) handed out by this process


def new_request_id() -> str:
    """A unique, time-ordered id: a UUIDv7 (RFC 9562) string.

    Ids from one process strictly increase (a counter in ``rand_a`` breaks ties
    within a millisecond); ids from different processes order by millisecond
    and are unique by 62 random bits.
    """
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _last[0]:
            ms, counter = _last[0], _last[1] + 1
            if counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms, counter = ms + 1, 0
        else:
            counter = 0
        _last[0], _last[1] = ms, counter
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | rand
    return str(uuid.UUID(int=value))


_NOT_UTF8 = "cannot be stored: not encodable as UTF-8 (a lone surrogate such as \\udcff?)"


def _utf8(value: str | None, field: str) -> None:
    try:
        if value is not None:
            value.encode()
    except UnicodeEncodeError:
        raise InvalidRecordError(field, _NOT_UTF8) from None


def _coerce(cls: type[Any], value: object, field: str) -> Any:
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        return cls.from_dict(value, field)
    raise InvalidRecordError(field, f"expected {cls.__name__} or a mapping, got {type(value).__name__}")


def validate_reference(
    type: RecordType | str,
    url: str,
    timestamp: datetime | str,
    metadata: AttemptMetadata | Mapping[str, Any],
    data: Sequence[Response | Mapping[str, Any]],
    *,
    request_id: str | None = None,
) -> Attempt:
    """Check an insertion request against every rule of the standard.

    Raises :class:`InvalidRecordError` naming the first offending field; on
    success returns the rows to store, with a fresh ``request_id``.
    """
    method = RecordType.parse(type)
    if method.is_metadata:
        raise InvalidRecordError("type", f"insert a 'get' or 'head' attempt, not {method.value!r}")
    if not isinstance(url, str):
        raise InvalidRecordError("url", f"expected a string, got {url!r}")
    key = url_key(url)
    domain = domain_of(url)
    start = parse_ts(timestamp, "timestamp")
    check_stored_us(to_us(start), "timestamp")
    meta: AttemptMetadata = _coerce(AttemptMetadata, metadata, "metadata")
    if isinstance(data, str | bytes) or not isinstance(data, Sequence):
        raise InvalidRecordError("data", "expected a list of data records")
    chain: list[Response] = [_coerce(Response, r, f"data[{i}]") for i, r in enumerate(data)]

    if meta.url != url:
        raise InvalidRecordError("metadata.url", f"{meta.url!r} differs from the attempt's url {url!r}")
    if meta.timestamp is not None and meta.timestamp != start:
        raise InvalidRecordError("metadata.timestamp", "differs from the attempt's timestamp")
    if meta.request_id is not None:
        raise InvalidRecordError("metadata.request_id", "must not be supplied: the store assigns it")
    for name in ("fetcher_name", "fetcher_version", "logs", "traceback"):
        _utf8(getattr(meta, name), f"metadata.{name}")
    Calibre.check(meta.fetcher_calibre, "metadata.fetcher_calibre", allow_reserved=False)
    success = meta.state is AttemptState.SUCCESS
    if success and not chain:
        raise InvalidRecordError("data", "a successful attempt needs a non-empty response chain")
    if not success and chain:
        raise InvalidRecordError(
            "data", f"a failed attempt (state {meta.state.value!r}) must have an empty response chain"
        )

    rid = request_id or new_request_id()
    ts_us = to_us(start)
    responses: list[dict[str, Any]] = []
    last = len(chain) - 1
    for i, resp in enumerate(chain):
        where = f"data[{i}]"
        if resp.request_id is not None:
            raise InvalidRecordError(f"{where}.request_id", "must not be supplied: the store assigns it")
        if resp.url != url:
            raise InvalidRecordError(f"{where}.url", f"{resp.url!r} differs from the attempt's url {url!r}")
        if not resp.request_url:
            raise InvalidRecordError(f"{where}.request_url", "must be the URL of this request")
        try:
            url_key(resp.request_url)
        except InvalidRecordError as exc:
            raise InvalidRecordError(f"{where}.request_url", exc.problem) from None
        if resp.is_final != (i == last):
            expected = "the last record, and only it, has is_final=true"
            raise InvalidRecordError(f"{where}.is_final", expected)
        if method is RecordType.HEAD and resp.data is not None:
            raise InvalidRecordError(f"{where}.data", "HEAD records have no body: use data=None")
        if method is RecordType.GET and resp.data is None:
            raise InvalidRecordError(f"{where}.data", "GET records need a body (b'' if empty)")
        for name in _FETCHER_FIELDS:
            if getattr(resp, name) != getattr(meta, name):
                raise InvalidRecordError(
                    f"{where}.{name}", "differs from the metadata's: one attempt, one fetcher"
                )
        check_stored_us(to_us(resp.timestamp), f"{where}.timestamp")
        try:
            headers = msgspec.json.encode(resp.headers).decode()
        except UnicodeEncodeError:
            raise InvalidRecordError(f"{where}.headers", _NOT_UTF8) from None
        row: dict[str, Any] = {
            "url_key": key,
            "url": url,
            "attempt_timestamp": ts_us,
            "request_id": rid,
            "chain_index": i,
            "request_url": resp.request_url,
            "status_code": resp.status_code,
            "headers": headers,
            "timestamp": to_us(resp.timestamp),
            "retry_attempt": resp.retry_attempt,
            "is_final": resp.is_final,
            "fetcher_name": resp.fetcher_name,
            "fetcher_version": resp.fetcher_version,
            "fetcher_calibre": resp.fetcher_calibre,
        }
        if method is RecordType.GET:
            row["data"] = resp.data
        responses.append(row)

    metadata_row: dict[str, Any] = {
        "url_key": key,
        "url": url,
        "timestamp": ts_us,
        "request_id": rid,
        "state": meta.state.value,
        "logs": meta.logs,
        "traceback": meta.traceback,
        "run_time": meta.run_time,
        "fetcher_name": meta.fetcher_name,
        "fetcher_version": meta.fetcher_version,
        "fetcher_calibre": meta.fetcher_calibre,
    }
    return Attempt(
        method=method,
        url=url,
        url_key=key,
        domain=domain,
        year=start.year,
        month=start.month,
        ts_us=ts_us,
        request_id=rid,
        calibre=meta.fetcher_calibre,
        success=success,
        metadata=metadata_row,
        responses=responses,
    )
