"""Many insert items validated at once, and the keys that find them again: what
``WebIndex.insert_many`` and a bulk load share."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from msgspec.structs import force_setattr

from web_index.errors import InvalidRecordError
from web_index.ingest import Limits, new_request_ids, validate_attempt
from web_index.models import AttemptMetadata, AttemptRows, PageKey, RecordType, Response, from_us

__all__ = ["InsertItem", "key_of", "validate_items"]

InsertItem = tuple[
    RecordType | str,
    str,
    datetime | str,
    AttemptMetadata | Mapping[str, Any],
    Sequence[Response | Mapping[str, Any]],
]


def validate_items(
    items: Iterable[InsertItem], given: Sequence[str] | None, limits: Limits
) -> list[AttemptRows]:
    """Every item validated (with its request id from ``given``, else a new one),
    or the :class:`InvalidRecordError` of the first invalid one, naming it."""
    attempts: list[AttemptRows] = []
    append = attempts.append
    rids: Iterator[str | None]
    if given is not None:
        items = list(items)
        rids = iter(_checked_ids(given, len(items)))
    elif isinstance(items, list | tuple):
        rids = iter(new_request_ids(len(items)))  # at once: one lock and clock read, not one a record
    else:
        rids = itertools.repeat(None)
    for n, (item, rid) in enumerate(zip(items, rids, strict=False)):
        try:
            append(validate_attempt(*item, request_id=rid, limits=limits))
        except Exception as exc:
            if isinstance(exc, InvalidRecordError) and n:
                raise InvalidRecordError(f"item {n}: {exc.field}", exc.problem) from None
            raise
    return attempts


_KEY = PageKey(url="http://example.com/", timestamp=from_us(0), request_id="-")
_METADATA_OF = {RecordType.GET: RecordType.GET_METADATA, RecordType.HEAD: RecordType.HEAD_METADATA}


def key_of(a: AttemptRows) -> PageKey:
    """The key of a validated attempt's data record (its metadata record's if it failed)."""
    # Every field was validated with the attempt (url, UTC timestamp, type):
    # a copy with the fields set skips PageKey's checks, which would redo the
    # URL normalisation that insert's fast path avoided.
    key: PageKey = _KEY.__copy__()  # type: ignore[attr-defined]
    force_setattr(key, "url", a.url)
    force_setattr(key, "timestamp", a.timestamp)
    force_setattr(key, "request_id", a.request_id)
    force_setattr(key, "type", a.method if a.success else _METADATA_OF[a.method])
    return key


def _checked_ids(ids: Sequence[str], count: int) -> list[str]:
    """``ids`` as canonical UUID strings, one per attempt, or the error naming the wrong one."""
    if len(ids) != count:
        raise InvalidRecordError("request_ids", f"{len(ids)} ids for {count} attempts")
    out = []
    for n, rid in enumerate(ids):
        try:
            out.append(str(uuid.UUID(rid)))
        except (ValueError, TypeError, AttributeError):
            raise InvalidRecordError(f"request_ids[{n}]", f"not a UUID: {rid!r}") from None
    return out
