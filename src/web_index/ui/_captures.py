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

__all__ = ["NEAR_CAPTURES", "Captures", "captures_of", "closest", "moment"]


def _store_captures(index: WebIndex, url: str) -> list[dict[str, Any]]:
    out = []
    for line in index.captures(url, match="exact"):
        _key, stamp, rest = line.split(" ", 2)
        fields = json.loads(rest)
        fields["timestamp"] = stamp
        out.append(fields)
    return out


class Captures(list[dict[str, Any]]):
    """A URL's captures, oldest first; ``cut`` if they are not all of them."""

    cut = False


async def captures_of(
    coll: Collection, index: WebIndex | None, url: str, near: datetime | None = None
) -> Captures:
    """Every capture of exactly ``url``, oldest first: ``timestamp`` (14 digits),
    ``url``, ``status``, ``mime``, and from a store ``request_id``,
    ``position`` (in the attempt's chain), ``page`` and ``attempt_us``.

    A collection that is not a store answers at most ``MAX_LIMIT`` captures
    (the oldest; then ``cut``). Given ``near``, it is asked for the
    ``NEAR_CAPTURES`` nearest that moment instead (``cut`` if there may be
    more): the closest capture and its neighbours, whatever the URL's history
    holds, without transferring all of it.
    """
    if index is not None:
        return Captures(await asyncio.to_thread(_store_captures, index, url))
    if near is None:
        return await _remote(coll, CdxQuery(url=url, match_type="exact", limit=MAX_LIMIT))
    found = await _remote(coll, CdxQuery(url=url, match_type="exact", closest=near, limit=NEAR_CAPTURES))
    found.sort(key=lambda fields: fields["timestamp"])
    return found


# Captures asked for around a moment: the nearest on both sides are among them
# (unless it is the URL's first or last).
NEAR_CAPTURES = 1_000


async def _remote(coll: Collection, query: CdxQuery) -> Captures:
    found = await coll.find(query)
    # A live source's answers are the live web, not an archive.
    out = Captures(fields for fields, _ in found if not fields.get("live_url"))
    out.cut = len(found) >= query.limit
    return out


def moment(fields: dict[str, Any]) -> datetime:
    return datetime.strptime(fields["timestamp"], "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def closest(captures: list[dict[str, Any]], when: datetime) -> int | None:
    """The index of the capture nearest ``when`` (the later of two as near)."""
    if not captures:
        return None
    return min(range(len(captures)), key=lambda i: (abs((moment(captures[i]) - when).total_seconds()), -i))
