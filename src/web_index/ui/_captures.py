"""A URL's captures, as the pages need them: from the store's own capture lines
when the collection is this server's store (they name the attempt each came
from), else from the collection's CDX answer."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from web_index.archive import MAX_LIMIT, CdxQuery, Collection
from web_index.index import WebIndex

__all__ = ["captures_of", "closest", "moment"]


def _store_captures(index: WebIndex, url: str) -> list[dict[str, Any]]:
    out = []
    for line in index.captures(url, match="exact"):
        _key, stamp, rest = line.split(" ", 2)
        fields = json.loads(rest)
        fields["timestamp"] = stamp
        out.append(fields)
    return out


async def captures_of(coll: Collection, index: WebIndex | None, url: str) -> list[dict[str, Any]]:
    """Every capture of exactly ``url``, oldest first: ``timestamp`` (14 digits),
    ``url``, ``status``, ``mime``, and from a store ``request_id``,
    ``position`` (in the attempt's chain), ``page`` and ``attempt_us``."""
    if index is not None:
        return await asyncio.to_thread(_store_captures, index, url)
    found = await coll.find(CdxQuery(url=url, match_type="exact", limit=MAX_LIMIT))
    return [fields for fields, _ in found if not fields.get("live_url")]  # the live web: not an archive


def moment(fields: dict[str, Any]) -> datetime:
    return datetime.strptime(fields["timestamp"], "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def closest(captures: list[dict[str, Any]], when: datetime) -> int | None:
    """The index of the capture nearest ``when`` (the later of two as near)."""
    if not captures:
        return None
    return min(range(len(captures)), key=lambda i: (abs((moment(captures[i]) - when).total_seconds()), -i))
