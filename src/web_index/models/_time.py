from __future__ import annotations

import functools
import re
from datetime import UTC, datetime, timedelta

from web_index.errors import InvalidRecordError

__all__ = [
    "STORED_END",
    "STORED_END_US",
    "STORED_START",
    "check_stored_us",
    "clamp_us",
    "format_ts",
    "from_us",
    "month_bounds",
    "parse_ts",
    "parse_when",
    "to_us",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN = datetime.min.replace(tzinfo=UTC)
_MAX = datetime.max.replace(tzinfo=UTC)

# The times the store accepts: [STORED_START, STORED_END), years 1970 to 9998.
# Partitions are months and a month is planned over [its start, the next
# month's start): a record of December 9999 would need year 10000, which
# datetime cannot hold. Times before the epoch are refused as the mistakes they
# are (a fetch before 1970), and keep every stored microsecond count >= 0.
STORED_START = _EPOCH
STORED_END = datetime(9999, 1, 1, tzinfo=UTC)
STORED_END_US = (STORED_END - _EPOCH) // timedelta(microseconds=1)
_RANGE = "1970-01-01T00:00:00Z (inclusive) to 9999-01-01T00:00:00Z (exclusive)"


def parse_ts(value: object, field: str, *, clamp: bool = False) -> datetime:
    """A timezone-aware UTC datetime from a datetime or an ISO 8601 string.

    Naive datetimes and offset-less strings are refused: a timestamp without a
    zone is a guess, and a guess in an append-only store is forever.
    A time whose UTC form falls outside what ``datetime`` holds (year 1 at
    +01:00) is refused naming ``field``, or with ``clamp`` (query times: no
    stored record lies near either end, so answers are the same) moved to the
    nearest representable one.
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
    try:
        return value.astimezone(UTC)
    except OverflowError:
        if clamp:
            return _MIN if value.year == 1 else _MAX
        raise InvalidRecordError(
            field, f"{value.isoformat()!r} is outside the range the store accepts: {_RANGE}"
        ) from None


def check_stored_us(value: int, field: str) -> None:
    """Refuse, naming ``field``, microseconds outside the range the store accepts."""
    if not 0 <= value < STORED_END_US:
        raise InvalidRecordError(
            field, f"{format_ts(from_us(value))} is outside the range the store accepts: {_RANGE}"
        )


def format_ts(value: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` suffix and microseconds when present."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def to_us(value: datetime) -> int:
    """Microseconds since the epoch (the store's native timestamp unit)."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


_MIN_US = to_us(_MIN)
_MAX_US = to_us(_MAX)


def clamp_us(value: int) -> int:
    """``value`` moved into the microseconds :func:`from_us` can turn into a datetime."""
    return _MIN_US if value < _MIN_US else _MAX_US if value > _MAX_US else value


def from_us(value: int) -> datetime:
    """The UTC datetime of microseconds since the epoch."""
    return _EPOCH + timedelta(microseconds=value)


@functools.lru_cache(maxsize=4096)  # every lookup bounds each month of the store
def month_bounds(year: int, month: int) -> tuple[int, int]:
    """``[start, end)`` of a month in microseconds since the epoch, for any year
    a folder name can hold: plain arithmetic, where ``datetime`` stops at 9999
    (a month of December 9999 ends in year 10000)."""
    start = _days_from_civil(year, month) * _DAY_US
    end = _days_from_civil(year + (month == 12), month % 12 + 1) * _DAY_US
    return start, end


_DAY_US = 86_400_000_000


def _days_from_civil(year: int, month: int) -> int:
    """Days from 1970-01-01 to the first of that month (proleptic Gregorian)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


_CDX = re.compile(r"\d{4}(?:\d{2}){0,5}")  # yyyy[mm[dd[hh[mm[ss]]]]]
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
# The unit is lower case only: "6M" could as well be months as minutes.
_AGE = re.compile(r"(\d+) ?([smhdw])(?: +(?i:ago))?")
_STEPS = (timedelta(days=1), timedelta(hours=1), timedelta(minutes=1), timedelta(seconds=1))
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_FORMS = "a date (2024-08-01), a 4-14 digit timestamp (20240801120000), ISO 8601 (UTC unless it has a zone)"


def parse_when(value: str, field: str, *, end: bool = False, now: datetime | None = None) -> datetime:
    """A time as people and web archives write them, every form UTC unless it
    says otherwise: the one parser of the times a user types.

    A date (``2024-08-01``); a CDX timestamp of 4 to 14 digits (``2024``,
    ``20240801``, ``20240801120000``); ISO 8601, with a zone or without one
    (then UTC, as every other form: unlike a stored record's time, a time asked
    about is no guess kept forever). A date or a short timestamp names a span:
    its first microsecond, or with ``end`` its last (so ``--not-after 2024``
    includes December 31st). With ``now``, also an age before it: ``90s``,
    ``30m``, ``12h``, ``7d``, ``2w``, each also as ``7d ago``.
    """
    text = " ".join(value.split())
    if _CDX.fullmatch(text) or _DATE.fullmatch(text):
        return _span(text.replace("-", ""), field, value, end)
    if now is not None and (age := _AGE.fullmatch(text)):
        try:
            return now.astimezone(UTC) - timedelta(**{_UNIT[age[2].lower()]: int(age[1])})
        except OverflowError:
            return _MIN
    forms = _FORMS + (", or an age (7d ago, 12h ago)" if now is not None else "")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidRecordError(field, f"{value!r} is not a time; give {forms}") from None
    return parse_ts(when if when.tzinfo else when.replace(tzinfo=UTC), field, clamp=True)


def _span(digits: str, field: str, value: str, end: bool) -> datetime:
    parts = [int(digits[:4])] + [int(digits[i : i + 2]) for i in range(4, len(digits), 2)]
    y, mo, d, h, mi, sec = (parts + [1, 1, 0, 0, 0][len(parts) - 1 :])[:6]
    try:
        start = datetime(y, mo, d, h, mi, sec, tzinfo=UTC)
    except ValueError as exc:
        raise InvalidRecordError(field, f"{value!r} is not a time: {exc}") from None
    if not end:
        return start
    try:
        if len(parts) == 1:
            after = start.replace(year=start.year + 1)
        elif len(parts) == 2:
            after = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
        else:
            after = start + _STEPS[len(parts) - 3]
    except (OverflowError, ValueError):  # the span reaches past year 9999
        return _MAX
    return after - timedelta(microseconds=1)
