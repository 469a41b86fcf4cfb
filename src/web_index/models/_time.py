from __future__ import annotations

from datetime import UTC, datetime, timedelta

from web_index.errors import InvalidRecordError

__all__ = ["format_ts", "from_us", "parse_ts", "to_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_ts(value: object, field: str) -> datetime:
    """A timezone-aware UTC datetime from a datetime or an ISO 8601 string.

    Naive datetimes and offset-less strings are refused: a timestamp without a
    zone is a guess, and a guess in an append-only store is forever.
    """
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise InvalidRecordError(field, f"not an ISO 8601 datetime: {value!r}") from None
    if not isinstance(value, datetime):
        raise InvalidRecordError(field, f"expected a datetime or ISO 8601 string, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidRecordError(field, f"naive datetime {value.isoformat()!r}: give a timezone (e.g. UTC)")
    return value.astimezone(UTC)


def format_ts(value: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix and microseconds when present."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def to_us(value: datetime) -> int:
    """Microseconds since the epoch (the store's native timestamp unit)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def from_us(value: int) -> datetime:
    """The UTC datetime of microseconds since the epoch."""
    return _EPOCH + timedelta(microseconds=value)
