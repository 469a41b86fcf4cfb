from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Self

import msgspec
from msgspec.structs import force_setattr

from web_index.errors import InvalidRecordError
from web_index.models._enums import Calibre, RecordType
from web_index.models._fields import field_names
from web_index.models._time import format_ts, parse_ts
from web_index.urls import is_plain_url, url_key

__all__ = [
    "DeterministicQuery",
    "PageKey",
    "Query",
    "SimplePageQuery",
    "TimeAwarePageQuery",
    "TimeBoundedQuery",
    "query_from_dict",
]


def _check_url(value: object) -> None:
    if not isinstance(value, str):
        raise InvalidRecordError("url", f"expected a string, got {value!r}")
    if not is_plain_url(value):
        url_key(value)  # raises InvalidURLError naming the problem


def _check_calibre(calibre: object, strict: object) -> None:
    if calibre is not None:
        Calibre.check(calibre, "calibre")
    if not isinstance(strict, bool):
        raise InvalidRecordError("calibre_strict", f"expected a bool, got {strict!r}")


class PageKey(msgspec.Struct, frozen=True, kw_only=True):
    """The deterministic query: exactly one stored attempt, forever.

    Returned by :meth:`WebIndex.insert` and by :attr:`Page.key`. Its cost is
    constant: it touches one partition.
    """

    url: str
    timestamp: datetime
    request_id: str
    type: RecordType = RecordType.GET

    def __post_init__(self) -> None:
        force_setattr(self, "type", RecordType.parse(self.type))
        _check_url(self.url)
        force_setattr(self, "timestamp", parse_ts(self.timestamp, "timestamp", clamp=True))
        if not isinstance(self.request_id, str) or not self.request_id:
            raise InvalidRecordError("request_id", f"expected a non-empty string, got {self.request_id!r}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "url": self.url,
            "timestamp": format_ts(self.timestamp),
            "request_id": self.request_id,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        result: Self = _build(cls, data)
        return result


class SimplePageQuery(msgspec.Struct, frozen=True, kw_only=True):
    """The latest record for ``url``.

    With ``calibre``, only records fetched with that calibre or higher match
    (exactly that calibre with ``calibre_strict``). For data types only
    successful fetches exist; for metadata types the latest attempt of any state
    matches.
    """

    url: str
    calibre: int | None = None
    calibre_strict: bool = False
    type: RecordType = RecordType.GET

    def __post_init__(self) -> None:
        force_setattr(self, "type", RecordType.parse(self.type))
        _check_url(self.url)
        _check_calibre(self.calibre, self.calibre_strict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "url": self.url,
            "calibre": self.calibre,
            "calibre_strict": self.calibre_strict,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        result: Self = _build(cls, data)
        return result


class TimeAwarePageQuery(msgspec.Struct, frozen=True, kw_only=True):
    """The record nearest to ``timestamp`` within ``[not_before, not_after]``.

    Both bounds are inclusive and optional (``None`` leaves that side open).
    Any aware time is accepted: one whose UTC form is beyond what ``datetime``
    holds becomes year 1 or 9999, which answers the same (the store only
    holds years 1970 to 9998).
    Ties in distance go to the later fetch. Without ``timestamp`` the latest
    record in the window matches. Calibre filtering as for
    :class:`SimplePageQuery`; ``calibre_strict`` defaults to ``False`` here too
    (see ``docs/format.md`` for why).
    """

    url: str
    not_before: datetime | None = None
    not_after: datetime | None = None
    timestamp: datetime | None = None
    calibre: int | None = None
    calibre_strict: bool = False
    type: RecordType = RecordType.GET

    def __post_init__(self) -> None:
        force_setattr(self, "type", RecordType.parse(self.type))
        _check_url(self.url)
        for name in ("not_before", "not_after", "timestamp"):
            value = getattr(self, name)
            if value is not None:
                force_setattr(self, name, parse_ts(value, name, clamp=True))
        if self.not_before is not None and self.not_after is not None and self.not_before > self.not_after:
            raise InvalidRecordError(
                "not_before",
                f"window is empty: not_before {format_ts(self.not_before)} is after "
                f"not_after {format_ts(self.not_after)}",
            )
        _check_calibre(self.calibre, self.calibre_strict)

    def to_dict(self) -> dict[str, Any]:
        def ts(value: datetime | None) -> str | None:
            return None if value is None else format_ts(value)

        return {
            "type": self.type.value,
            "url": self.url,
            "not_before": ts(self.not_before),
            "not_after": ts(self.not_after),
            "timestamp": ts(self.timestamp),
            "calibre": self.calibre,
            "calibre_strict": self.calibre_strict,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        result: Self = _build(cls, data)
        return result


DeterministicQuery = PageKey
TimeBoundedQuery = TimeAwarePageQuery
Query = PageKey | SimplePageQuery | TimeAwarePageQuery

KINDS: dict[str, type[PageKey] | type[SimplePageQuery] | type[TimeAwarePageQuery]] = {
    "key": PageKey,
    "simple": SimplePageQuery,
    "time-aware": TimeAwarePageQuery,
}
KIND_OF: dict[type, str] = {cls: kind for kind, cls in KINDS.items()}


def _build(cls: type[Any], data: Mapping[str, Any]) -> Any:
    if not isinstance(data, Mapping):
        raise InvalidRecordError("query", f"expected an object, got {type(data).__name__}")
    names = field_names(cls)
    args = {k: v for k, v in data.items() if k != "kind" and v is not None}
    unknown = set(args) - names
    if unknown:
        raise InvalidRecordError("query", f"unknown field(s) {sorted(unknown)} for {cls.__name__}")
    if "type" not in args:
        args["type"] = RecordType.GET
    try:
        return cls(**args)
    except TypeError as exc:
        raise InvalidRecordError("query", str(exc)) from None


def query_from_dict(data: Mapping[str, Any]) -> Query:
    """Build whichever query the flat form describes.

    An explicit ``kind`` (``key``, ``simple``, ``time-aware``) decides; without
    it, a ``request_id`` makes a :class:`PageKey`, any of ``not_before``,
    ``not_after`` or ``timestamp`` a :class:`TimeAwarePageQuery`, and anything
    else a :class:`SimplePageQuery`.
    """
    if not isinstance(data, Mapping):
        raise InvalidRecordError("query", f"expected an object, got {type(data).__name__}")
    kind = data.get("kind")
    if kind is None:
        if data.get("request_id") is not None:
            kind = "key"
        elif any(data.get(k) is not None for k in ("not_before", "not_after", "timestamp")):
            kind = "time-aware"
        else:
            kind = "simple"
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidRecordError("kind", f"{kind!r} is not one of {sorted(KINDS)}")
    result: Query = _build(cls, data)
    return result
