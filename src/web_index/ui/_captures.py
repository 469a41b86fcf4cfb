"""A URL's captures, as the pages need them: from the store's own capture lines
when the collection is this server's store (they name the attempt each came
from), else from the collection's CDX answer."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from web_index.archive import MAX_LIMIT, CdxQuery, Collection
from web_index.index import WebIndex

__all__ = ["NEAR_CAPTURES", "Captures", "captures_of", "closest", "moment", "neighbour"]


def _store_captures(index: WebIndex, url: str) -> list[dict[str, Any]]:
    out = []
    for line in index.captures(url, match="exact"):
        _key, stamp, rest = line.split(" ", 2)
        fields = json.loads(rest)
        fields["timestamp"] = stamp
        out.append(fields)
    return out


# Captures asked for around a moment (see captures_of).
NEAR_CAPTURES = 1_000


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
    ``NEAR_CAPTURES`` nearest that moment instead (``cut`` if there are more):
    the closest capture, whatever the URL's history holds, without
    transferring all of it (its neighbours: :func:`neighbour`).
    """
    if index is not None:
        return Captures(await asyncio.to_thread(_store_captures, index, url))
    if near is None:
        return await _remote(coll, CdxQuery(url=url, match_type="exact", limit=MAX_LIMIT))
    found = await _remote(coll, CdxQuery(url=url, match_type="exact", closest=near, limit=NEAR_CAPTURES))
    found.sort(key=lambda fields: fields["timestamp"])
    return found


async def neighbour(coll: Collection, captures: Captures, at: int, *, later: bool) -> dict[str, Any] | None:
    """The capture just before (or after) ``captures[at]``: from the list, or,
    when the list is cut and ends there, asked for (the nearest captures of a
    moment can all lie on one side of it)."""
    beside = at + 1 if later else at - 1
    if 0 <= beside < len(captures):
        return captures[beside]
    if not captures.cut:
        return None
    fields = captures[at]
    edge = f"{moment(fields) + timedelta(seconds=1 if later else -1):%Y%m%d%H%M%S}"
    query = CdxQuery(url=fields["url"], match_type="exact", closest=moment(fields), limit=1)
    query = replace(query, start=edge) if later else replace(query, end=edge)
    found = await _remote(coll, query)
    return found[0] if found else None


async def _remote(coll: Collection, query: CdxQuery) -> Captures:
    """The collection's archived captures for ``query``, ``cut`` if it holds more."""
    found, cut = await coll.find_cut(query)
    # A live source's answers are the live web, not an archive.
    out = Captures(fields for fields, _ in found if not fields.get("live_url"))
    out.cut = cut
    return out


def moment(fields: dict[str, Any]) -> datetime:
    return datetime.strptime(fields["timestamp"], "%Y%m%d%H%M%S").replace(tzinfo=UTC)


def closest(captures: list[dict[str, Any]], when: datetime) -> int | None:
    """The index of the capture nearest ``when`` (the later of two as near)."""
    if not captures:
        return None
    return min(range(len(captures)), key=lambda i: (abs((moment(captures[i]) - when).total_seconds()), -i))
