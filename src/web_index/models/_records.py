from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Self

import msgspec
from msgspec.structs import force_setattr

from web_index.errors import InvalidRecordError
from web_index.models._digest import payload_sha1, sha1_text
from web_index.models._enums import AttemptState, Calibre, RecordType
from web_index.models._fields import field_names, required_names
from web_index.models._queries import PageKey
from web_index.models._time import format_ts, parse_ts

__all__ = ["AttemptMetadata", "Page", "Response", "last_reason", "restored_response", "result_json"]

_U8 = 255
_MAX_STATUS = 999


def _check_str(value: object, field: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise InvalidRecordError(field, f"expected a string, got {value!r}")


def _check_int(value: object, field: str, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRecordError(field, f"expected an int, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidRecordError(field, f"must be between {lo} and {hi}, got {value}")


def _headers_from(value: object, field: str) -> dict[str, str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
            raise InvalidRecordError(field, f"headers are not valid JSON: {exc}") from None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise InvalidRecordError(field, "headers must be a JSON object of strings to strings")
    return dict(value)


def _from_mapping(cls: type[msgspec.Struct], data: Mapping[str, Any], field: str) -> Any:
    if not isinstance(data, Mapping):
        raise InvalidRecordError(field, f"expected an object, got {type(data).__name__}")
    unknown = set(data) - field_names(cls)
    if unknown:
        raise InvalidRecordError(field, f"unknown field(s) {sorted(unknown)}")
    missing = [name for name in required_names(cls) if name not in data]
    if missing:
        # Named here: the constructor's TypeError would name the record, not the field.
        more = f" (and {', '.join(missing[1:])})" if len(missing) > 1 else ""
        raise InvalidRecordError(f"{field}.{missing[0]}", f"required field missing{more}")
    try:
        return cls(**data)
    except TypeError as exc:
        raise InvalidRecordError(field, str(exc)) from None
    except InvalidRecordError as exc:
        # Name the field inside the record: "data[1].status_code", not "status_code".
        raise InvalidRecordError(f"{field}.{exc.field}", exc.problem) from None


class Response(msgspec.Struct, frozen=True, kw_only=True):
    """One response of a chain: the standard's GET/HEAD data record.

    ``headers`` is a mapping; repeated header fields are joined with ``", "``
    (``Set-Cookie`` with ``"\\n"``). ``data`` is the raw body for GET and
    ``None`` for HEAD. ``request_id`` is ``None`` until the store assigns it.
    """

    url: str
    request_url: str
    status_code: int
    headers: dict[str, str]
    timestamp: datetime
    fetcher_name: str
    fetcher_version: str
    fetcher_calibre: int
    data: bytes | None = None
    retry_attempt: int = 0
    is_final: bool = False
    request_id: str | None = None

    def __post_init__(self) -> None:
        _check_str(self.url, "url")
        _check_str(self.request_url, "request_url")
        _check_int(self.status_code, "status_code", 100, _MAX_STATUS)
        force_setattr(self, "headers", _headers_from(self.headers, "headers"))
        force_setattr(self, "timestamp", parse_ts(self.timestamp, "timestamp"))
        _check_str(self.fetcher_name, "fetcher_name")
        _check_str(self.fetcher_version, "fetcher_version")
        Calibre.check(self.fetcher_calibre, "fetcher_calibre")
        if self.data is not None and not isinstance(self.data, bytes):
            if isinstance(self.data, bytearray | memoryview):
                force_setattr(self, "data", bytes(self.data))
            else:
                raise InvalidRecordError("data", f"body must be bytes or None, got {self.data!r}")
        _check_int(self.retry_attempt, "retry_attempt", 0, _U8)
        if not isinstance(self.is_final, bool):
            raise InvalidRecordError("is_final", f"expected a bool, got {self.is_final!r}")
        _check_str(self.request_id, "request_id", optional=True)

    @property
    def payload_digest(self) -> str | None:
        """The body's SHA-1 as WARC writes it (``sha1:`` + base32); ``None`` for HEAD."""
        return None if self.data is None else sha1_text(payload_sha1(self.data))

    def to_dict(self) -> dict[str, Any]:
        """The standard's flat form: ISO 8601 timestamps, headers as a JSON string.

        ``data`` stays ``bytes`` (JSON writers encode it as base64).
        """
        out: dict[str, Any] = msgspec.structs.asdict(self)
        out["timestamp"] = format_ts(self.timestamp)
        out["headers"] = json.dumps(self.headers, ensure_ascii=False, separators=(",", ":"))
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], field: str = "response") -> Self:
        """Build from the flat form (or natural types); errors name the field.

        A ``data`` string is read as base64, the way JSON carries bytes.
        """
        body = data.get("data") if isinstance(data, Mapping) else None
        if isinstance(body, str):
            try:
                data = {**data, "data": base64.b64decode(body, validate=True)}
            except (binascii.Error, ValueError):
                raise InvalidRecordError(f"{field}.data", "body string is not valid base64") from None
        result: Self = _from_mapping(cls, data, field)
        return result


def last_reason(logs: str | Sequence[str] | None) -> str | None:
    """Why an attempt ended as it did, in one line: the last line of its logs
    (a fetcher logs its verdict last; ``logs`` as a fetcher keeps them, a list,
    or as stored, one line each), ``None`` without logs."""
    if logs is None:
        return None
    lines = logs.splitlines() if isinstance(logs, str) else [ln for e in logs for ln in e.splitlines()]
    return next((line.strip() for line in reversed(lines) if line.strip()), None)


_RESPONSE_FIELDS = Response.__struct_fields__
_RESTORED = Response(
    url="",
    request_url="",
    status_code=200,
    headers={},
    timestamp=datetime(1970, 1, 1, tzinfo=UTC),
    fetcher_name="",
    fetcher_version="",
    fetcher_calibre=0,
)


def restored_response(*values: Any) -> Response:
    """A :class:`Response` of ``values`` (in field order) that the store checked when it stored
    them and read back intact: built without checking them again, which cost ~5 us of a batch
    answer's ~60 (validation is for what comes in, not for what the store gives back)."""
    # No __init__, so no __post_init__; called as the method, not through copy.copy's dispatch.
    out: Response = _RESTORED.__copy__()  # type: ignore[attr-defined]
    for name, value in zip(_RESPONSE_FIELDS, values, strict=True):
        force_setattr(out, name, value)
    return out


class AttemptMetadata(msgspec.Struct, frozen=True, kw_only=True):
    """The metadata record of one fetch attempt, successful or not.

    Beyond the standard's ``state``, ``url``, ``logs``, ``traceback`` and
    ``run_time``, it carries the attempt's ``timestamp`` (start), its
    ``request_id`` and the fetcher, because metadata is queried by all three.
    """

    state: AttemptState
    url: str
    fetcher_name: str
    fetcher_version: str
    fetcher_calibre: int
    timestamp: datetime | None = None
    request_id: str | None = None
    logs: str | None = None
    traceback: str | None = None
    run_time: float | None = None

    def __post_init__(self) -> None:
        force_setattr(self, "state", AttemptState.parse(self.state))
        _check_str(self.url, "url")
        _check_str(self.fetcher_name, "fetcher_name")
        _check_str(self.fetcher_version, "fetcher_version")
        Calibre.check(self.fetcher_calibre, "fetcher_calibre")
        if self.timestamp is not None:
            force_setattr(self, "timestamp", parse_ts(self.timestamp, "timestamp"))
        _check_str(self.request_id, "request_id", optional=True)
        _check_str(self.logs, "logs", optional=True)
        _check_str(self.traceback, "traceback", optional=True)
        if self.run_time is not None:
            if isinstance(self.run_time, bool) or not isinstance(self.run_time, int | float):
                raise InvalidRecordError("run_time", f"expected seconds as a float, got {self.run_time!r}")
            if not self.run_time >= 0:
                raise InvalidRecordError("run_time", f"must be >= 0, got {self.run_time!r}")
            force_setattr(self, "run_time", float(self.run_time))

    @property
    def why(self) -> str | None:
        """The attempt's reason in one line: :func:`last_reason` of its logs."""
        return last_reason(self.logs)

    def to_dict(self) -> dict[str, Any]:
        """The flat form: ISO 8601 timestamp, state as its string."""
        out: dict[str, Any] = msgspec.structs.asdict(self)
        out["state"] = self.state.value
        out["timestamp"] = None if self.timestamp is None else format_ts(self.timestamp)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], field: str = "metadata") -> Self:
        result: Self = _from_mapping(cls, data, field)
        return result


class Page(msgspec.Struct, frozen=True, kw_only=True):
    """One stored attempt's response chain, as returned by a data query.

    ``responses`` are in chain order: redirects first, the final response last.
    ``url``/``timestamp`` are the attempt's (what was asked for, when it began).
    """

    type: RecordType
    url: str
    timestamp: datetime
    request_id: str
    responses: list[Response]

    @property
    def final(self) -> Response:
        """The last response of the chain (the one with ``is_final``)."""
        return self.responses[-1]

    @property
    def status_code(self) -> int:
        return self.final.status_code

    @property
    def headers(self) -> dict[str, str]:
        return self.final.headers

    @property
    def data(self) -> bytes | None:
        return self.final.data

    @property
    def calibre(self) -> int:
        return self.final.fetcher_calibre

    @property
    def key(self) -> PageKey:
        """The :class:`PageKey` that returns exactly this page again."""
        return PageKey(type=self.type, url=self.url, timestamp=self.timestamp, request_id=self.request_id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "url": self.url,
            "timestamp": format_ts(self.timestamp),
            "request_id": self.request_id,
            "responses": [r.to_dict() for r in self.responses],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        responses = data.get("responses")
        if not isinstance(responses, list) or not responses:
            raise InvalidRecordError("responses", "a page needs a non-empty list of responses")
        return cls(
            type=RecordType.parse(data.get("type")),
            url=data["url"],
            timestamp=parse_ts(data.get("timestamp"), "timestamp"),
            request_id=data["request_id"],
            responses=[Response.from_dict(r, f"responses[{i}]") for i, r in enumerate(responses)],
        )


def result_json(result: Page | AttemptMetadata | None, *, bodies: bool) -> dict[str, Any] | None:
    """A query's answer as JSON, as ``web-index query`` and ``POST /api/query`` write it:
    ``to_dict()``, with each body in base64 (``data``) with ``bodies``, else only its
    size (``data_length``), and ``None`` for no match."""
    if result is None:
        return None
    out = result.to_dict()
    if isinstance(result, Page):
        for response in out["responses"]:
            body = response.pop("data")
            if bodies and body is not None:
                response["data"] = base64.b64encode(body).decode()
            elif body is not None:
                response["data_length"] = len(body)
    return out
