from __future__ import annotations

import enum
from typing import ClassVar

from web_index.errors import InvalidRecordError

__all__ = ["AttemptState", "Calibre", "RecordType"]


class RecordType(enum.StrEnum):
    """The four top-level folders of the store, and the ``type`` of every query."""

    HEAD = "head"
    HEAD_METADATA = "head-metadata"
    GET = "get"
    GET_METADATA = "get-metadata"

    @property
    def is_metadata(self) -> bool:
        return self in (RecordType.HEAD_METADATA, RecordType.GET_METADATA)

    @property
    def method(self) -> RecordType:
        """The request method this type is about: ``get`` or ``head``."""
        return RecordType.HEAD if self in (RecordType.HEAD, RecordType.HEAD_METADATA) else RecordType.GET

    @property
    def metadata(self) -> RecordType:
        """The metadata type that goes with this type."""
        return RecordType.HEAD_METADATA if self.method is RecordType.HEAD else RecordType.GET_METADATA

    @classmethod
    def parse(cls, value: object, field: str = "type") -> RecordType:
        if type(value) is cls:  # most callers pass a member: no lookup by value (0.3 us)
            return value
        try:
            return cls(str(value)) if isinstance(value, str) else cls(value)  # type: ignore[arg-type]
        except ValueError:
            allowed = ", ".join(repr(t.value) for t in cls)
            raise InvalidRecordError(field, f"{value!r} is not one of {allowed}") from None


class AttemptState(enum.StrEnum):
    """How a fetch attempt ended: the ten states of the standard's table."""

    SUCCESS = "success"
    TIMEOUT = "timeout"
    UNREACHABLE = "unreachable"
    SSL_ERROR = "ssl-error"
    LOW_QUALITY = "low-quality"
    BLOCKED = "blocked"
    UNAUTHORISED = "unauthorised"
    RETRYABLE_ERROR = "retryable-error"
    ESCALATE = "escalate"
    ERROR = "error"

    @property
    def is_success(self) -> bool:
        return self is AttemptState.SUCCESS

    @property
    def retryable(self) -> bool:
        """Worth retrying with the same fetcher (``n/a`` for success: ``False``)."""
        return self in _RETRYABLE

    @property
    def retryable_with_escalation(self) -> bool:
        """Worth retrying with a fetcher of higher calibre (``False`` for success)."""
        return self in _ESCALATABLE

    @classmethod
    def parse(cls, value: object, field: str = "state") -> AttemptState:
        try:
            return cls(str(value)) if isinstance(value, str) else cls(value)  # type: ignore[arg-type]
        except ValueError:
            allowed = ", ".join(repr(s.value) for s in cls)
            raise InvalidRecordError(field, f"{value!r} is not one of {allowed}") from None


_RETRYABLE = frozenset(
    {
        AttemptState.TIMEOUT,
        AttemptState.UNREACHABLE,
        AttemptState.SSL_ERROR,
        AttemptState.RETRYABLE_ERROR,
    }
)
_ESCALATABLE = _RETRYABLE | {
    AttemptState.LOW_QUALITY,
    AttemptState.BLOCKED,
    AttemptState.ESCALATE,
}


class Calibre(int):
    """A fetcher calibre: an int from 0 (unknown) to 100 (reserved).

    Higher calibre means a fetcher more likely to succeed and more expensive to
    run. The named levels leave room between them for fetchers to come.
    """

    UNKNOWN: ClassVar[Calibre]
    HTTP: ClassVar[Calibre]
    HTTP_BROWSER_LIKE: ClassVar[Calibre]
    BROWSER: ClassVar[Calibre]
    BROWSER_PROXY: ClassVar[Calibre]
    RESERVED: ClassVar[Calibre]

    MIN: ClassVar[int] = 0
    MAX: ClassVar[int] = 100

    def __new__(cls, value: int) -> Calibre:
        return super().__new__(cls, cls.check(value))

    @classmethod
    def check(cls, value: object, field: str = "calibre", *, allow_reserved: bool = True) -> int:
        """Validate ``value`` as a calibre and return it as a plain int."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRecordError(field, f"calibre must be an int, got {value!r}")
        top = cls.MAX if allow_reserved else cls.MAX - 1
        if not cls.MIN <= value <= top:
            raise InvalidRecordError(field, f"calibre must be between {cls.MIN} and {top}, got {value}")
        return int(value)

    def __repr__(self) -> str:
        return f"Calibre({int(self)})"


Calibre.UNKNOWN = Calibre(0)
Calibre.HTTP = Calibre(10)
Calibre.HTTP_BROWSER_LIKE = Calibre(30)
Calibre.BROWSER = Calibre(60)
Calibre.BROWSER_PROXY = Calibre(80)
Calibre.RESERVED = Calibre(100)
