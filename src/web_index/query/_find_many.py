"""Finding the winners of many plans at once: a month's keys file searched for all of
them, every candidate weighed by numpy, objects made for each plan's winner alone.

:mod:`web_index.query._find` weighs candidates one at a time: for each month, which
plans it concerns and whether each is settled, and for each hit an ``IndexHit``, a
``Candidate`` and a comparison, ~12 µs a query of a million-query bulk run. Here a
batch's plans are columns (window, time sought, calibre rule, request id, key hash),
a month's hits are columns, and so is each plan's best so far. What a keys file cannot
say (the buffer's candidates, partitions the month index does not cover, a month
without a keys file) comes in as objects, is weighed the same way and keeps its object.

A request id is weighed as its 16 bytes, which order as its canonical text does; a
candidate spelled otherwise (only a hand-made file holds one) sends the batch back to
:func:`~web_index.query._find.find_in_files`, which compares text.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from web_index.errors import CorruptFileError
from web_index.models import RecordType, month_bounds
from web_index.query._find import Found, coverage, indexed_rows, month_opened, read_partitions
from web_index.query._plan import Candidate, Plan
from web_index.storage import Store, rid_text

if TYPE_CHECKING:
    from web_index.storage import MonthIndex

__all__ = ["MANY_PLANS", "find_many", "rid_bytes"]

log = logging.getLogger("web_index.query")

MANY_PLANS = 64  # plans of a type from which they are weighed as arrays (fewer: one at a time)

_Arrays = Any  # numpy arrays, typed loosely: the stubs know no structured dtypes


class _NotCanonicalError(Exception):
    """A candidate's request id is not in canonical form: weigh the batch as text."""


def rid_bytes(text: str) -> bytes | None:
    """The 16 bytes of a request id in canonical form (lowercase, dashed), else None."""
    if len(text) != 36:
        return None
    try:
        raw = bytes.fromhex(text.replace("-", ""))
    except ValueError:
        return None
    return raw if len(raw) == 16 and rid_text(raw) == text else None


class _Weighed:
    """A batch's plans as columns, and each one's best candidate so far."""

    def __init__(self, plans: list[Plan]) -> None:
        import numpy as np

        n = len(plans)
        self.plans = plans
        self.lo = np.fromiter((p.lo_us for p in plans), np.int64, n)
        self.hi = np.fromiter((p.hi_us for p in plans), np.int64, n)
        self.timed = np.fromiter((p.near_us is not None for p in plans), np.bool_, n)
        self.near = np.fromiter((p.near_us or 0 for p in plans), np.int64, n)
        self.calibre = np.fromiter((-1 if p.calibre is None else p.calibre for p in plans), np.int16, n)
        self.strict = np.fromiter((p.strict for p in plans), np.bool_, n)
        self.keyed = np.fromiter((p.request_id is not None for p in plans), np.bool_, n)
        rids = [rid_bytes(p.request_id) if p.request_id is not None else None for p in plans]
        # A page key whose id is not canonical matches no stored id (they all are, or _NotCanonicalError).
        self.rid_ok = np.fromiter((r is not None for r in rids), np.bool_, n)
        self.rid = np.array([r or b"" for r in rids], "S16")
        self.hashes = np.array([p.key_hash for p in plans], "S16")
        domains: dict[str, int] = {}
        self.domain = np.fromiter((domains.setdefault(p.domain, len(domains)) for p in plans), np.int32, n)
        self.domains = list(domains)
        self.has = np.zeros(n, np.bool_)
        self.ts = np.zeros(n, np.int64)
        self.best_rid = np.zeros(n, "S16")
        self.best_calibre = np.zeros(n, np.int16)
        self.month = np.full(n, -1, np.int32)  # the month index holding it; -1: an object (objects[at])
        self.at = np.zeros(n, np.int64)  # its file number in that index, or the object's place
        self.row = np.zeros(n, np.int64)
        self.rows = np.zeros(n, np.int64)
        self.objects: list[Found] = []

    def offer(
        self,
        pos: _Arrays,
        ts: _Arrays,
        rid: _Arrays,
        calibre: _Arrays,
        month: int,
        at: _Arrays,
        row: _Arrays,
        rows: _Arrays,
    ) -> None:
        """Candidates for the plans at ``pos`` (columns, in the order they are offered):
        each plan keeps the best it is offered if better than what it holds (a tie keeps
        the one held, or offered first)."""
        import numpy as np

        if not len(pos):
            return
        ok = (self.lo[pos] <= ts) & (ts <= self.hi[pos])
        cal = self.calibre[pos]
        by_calibre = (cal < 0) | np.where(self.strict[pos], calibre == cal, calibre >= cal)
        ok &= np.where(self.keyed[pos], self.rid_ok[pos] & (rid == self.rid[pos]), by_calibre)
        keep = np.flatnonzero(ok)
        if not len(keep):
            return
        pos, ts, rid = pos[keep], ts[keep], rid[keep]
        far = np.where(self.timed[pos], np.abs(ts - self.near[pos]), 0)
        _, rank = np.unique(rid, return_inverse=True)
        # Nearest first, then the later fetch, then the later id; the first offered of equals.
        order = np.lexsort((keep, -rank.reshape(-1), -ts, far, pos))
        first = order[np.r_[True, pos[order][1:] != pos[order][:-1]]]
        p, t, r, d = pos[first], ts[first], rid[first], far[first]
        held = self.has[p]
        held_far = np.where(self.timed[p], np.abs(self.ts[p] - self.near[p]), 0)
        held_ts, held_rid = self.ts[p], self.best_rid[p]
        later = (t > held_ts) | ((t == held_ts) & (r > held_rid))
        better = ~held | (d < held_far) | ((d == held_far) & later)
        won = first[better]
        p = p[better]
        self.has[p] = True
        chosen = keep[won]
        self.ts[p], self.best_rid[p], self.best_calibre[p] = ts[won], rid[won], calibre[chosen]
        self.month[p] = month
        self.at[p], self.row[p], self.rows[p] = at[chosen], row[chosen], rows[chosen]

    def offer_objects(self, offers: Sequence[tuple[int, Found]]) -> None:
        """``(position, Found)`` candidates, each keeping its object if it wins."""
        import numpy as np

        if not offers:
            return
        rids = [rid_bytes(f.candidate.request_id) for _pos, f in offers]
        if any(r is None for r in rids):
            raise _NotCanonicalError
        base = len(self.objects)
        self.objects += [f for _pos, f in offers]
        n = len(offers)
        zero = np.zeros(n, np.int64)
        self.offer(
            np.fromiter((pos for pos, _f in offers), np.int64, n),
            np.fromiter((f.candidate.ts_us for _pos, f in offers), np.int64, n),
            np.array(rids, "S16"),
            np.fromiter((f.candidate.calibre for _pos, f in offers), np.int16, n),
            -1,
            np.arange(base, base + n),
            zero,
            zero,
        )

    def settled(self, before_us: int) -> _Arrays:
        """Which plans no record older than ``before_us`` can improve (Plan.settled's rule)."""
        import numpy as np

        gap = np.abs(self.ts - self.near)
        done = np.where(self.timed, self.near - before_us >= gap, self.ts >= before_us)
        return (self.lo >= before_us) | (self.has & done)

    def found(self, indexes: list[MonthIndex]) -> dict[int, Found]:
        """Each plan's winner, by position: a :class:`Found` made for a keys file's."""
        import numpy as np

        out: dict[int, Found] = {}
        for pos in np.flatnonzero(self.has).tolist():
            month = int(self.month[pos])
            if month < 0:
                out[pos] = self.objects[int(self.at[pos])]
                continue
            index = indexes[month]
            cover = index.covers[int(self.at[pos])]
            raw = bytes(self.best_rid[pos]).ljust(16, b"\0")  # numpy strips trailing NULs
            out[pos] = Found(
                Candidate(int(self.ts[pos]), rid_text(raw), int(self.best_calibre[pos])),
                indexed_rows(
                    f"{index.folder}/{cover.name}",
                    cover.size,
                    int(self.row[pos]),
                    int(self.rows[pos]),
                    cover.version,
                ),
            )
        return out


def find_many(
    store: Store,
    type: RecordType,
    plans: list[Plan],
    idxs: list[int],
    found: dict[int, Found],
    no_index: set[int],
) -> bool:
    """:func:`~web_index.query._find.find_in_files`, weighed as arrays: offer the stored
    attempts of the plans at ``idxs`` to ``found`` (which holds the buffer's), newest
    month first. False, ``found`` and ``no_index`` as they were, for fewer than
    :data:`MANY_PLANS` plans or if a candidate's request id is not canonical: then
    ``find_in_files`` weighs them."""
    import numpy as np

    if len(idxs) < MANY_PLANS:
        return False

    weighed = _Weighed([plans[i] for i in idxs])
    misled = np.fromiter((i in no_index for i in idxs), np.bool_, len(idxs))
    try:
        weighed.offer_objects([(pos, found[i]) for pos, i in enumerate(idxs) if i in found])
        indexes: list[MonthIndex] = []
        active = np.ones(len(idxs), np.bool_)
        for year, month in store.months(type):
            start, end = month_bounds(year, month)
            wanted = np.flatnonzero(active & (weighed.lo < end) & (weighed.hi >= start))
            if len(wanted):
                _month(store, type, year, month, weighed, wanted, misled, indexes)
            active &= ~weighed.settled(start)
            if not active.any():
                break
    except _NotCanonicalError:
        return False
    no_index.update(idxs[pos] for pos in np.flatnonzero(misled).tolist())
    found.update((idxs[pos], f) for pos, f in weighed.found(indexes).items())
    return True


def _month(
    store: Store,
    type: RecordType,
    year: int,
    month: int,
    weighed: _Weighed,
    wanted: _Arrays,
    misled: _Arrays,
    indexes: list[MonthIndex],
) -> None:
    """Offer one month's candidates to the ``wanted`` plans: through its keys file where
    the index covers their domains exactly, else from their partitions' files."""
    import numpy as np

    index, listing = month_opened(store, type, year, month)
    # Per domain: -1, no files this month; 1, the index covers its files exactly; 0, it does not.
    status = np.full(len(weighed.domains), -1, np.int8)
    for code in np.unique(weighed.domain[wanted]).tolist():
        whole = coverage(index, listing, weighed.domains[code])
        if whole is not None:
            status[code] = whole
    covered = status[weighed.domain[wanted]]
    indexed = wanted[(covered == 1) & ~misled[wanted]]
    read = wanted[(covered == 0) | ((covered == 1) & misled[wanted])]
    jobs = _read_partitions(store, type, year, month, weighed, read, listing)
    if len(indexed):
        assert index is not None
        try:
            _from_index(index, weighed, indexed, indexes)
        except CorruptFileError as exc:  # derived data: damage costs speed, never an answer
            log.warning("%s: %s; reading the partitions instead", exc.path, exc.problem)
            misled[indexed] = True
            jobs += _read_partitions(store, type, year, month, weighed, indexed, listing)
    for members, job in jobs:
        per_key = job.result()
        offers = [
            (pos, Found(cand, src))
            for pos in members
            for cand, src in per_key.get(weighed.plans[pos].url_key, {}).values()
        ]
        weighed.offer_objects(offers)


def _read_partitions(
    store: Store,
    type: RecordType,
    year: int,
    month: int,
    weighed: _Weighed,
    read: _Arrays,
    listing: Any,
) -> list[tuple[list[int], Any]]:
    """The partitions of the plans at ``read`` (positions), read concurrently."""
    by_domain: dict[str, list[int]] = defaultdict(list)
    for pos in read.tolist():
        by_domain[weighed.plans[pos].domain].append(pos)
    return read_partitions(store, type, year, month, by_domain, weighed.plans, listing)


def _from_index(index: MonthIndex, weighed: _Weighed, indexed: _Arrays, indexes: list[MonthIndex]) -> None:
    """Offer what the month index holds of the ``indexed`` plans' keys: from its keys file
    as columns, else from its Parquet file as hits."""
    import numpy as np

    unique, which = np.unique(weighed.hashes[indexed], return_inverse=True)
    which = which.reshape(-1)
    got = index.rows_of(unique)
    if got is None:  # no keys file: the Parquet index's hits, as objects
        by_key: dict[str, list[int]] = defaultdict(list)
        for pos in indexed.tolist():
            by_key[weighed.plans[pos].url_key].append(pos)
        hits = index.lookup({weighed.plans[members[0]].key_hash: key for key, members in by_key.items()})
        weighed.offer_objects(
            [
                (
                    pos,
                    Found(
                        Candidate(h.ts_us, h.request_id, h.calibre),
                        indexed_rows(h.path, h.size, h.row, h.rows, h.version),
                    ),
                )
                for h in hits
                for pos in by_key[h.url_key]
            ]
        )
        return
    hit_key, values = got
    if not len(hit_key):
        return
    # Each hit offered to every plan of its key: plans grouped by key, hits repeated.
    by_key_order = np.argsort(which, kind="stable")
    counts = np.bincount(which, minlength=len(unique))
    starts = np.cumsum(counts) - counts
    reps = counts[hit_key]
    hit = np.repeat(np.arange(len(hit_key)), reps)
    nth = np.arange(len(hit)) - np.repeat(np.cumsum(reps) - reps, reps)
    pos = indexed[by_key_order[starts[hit_key[hit]] + nth]]
    values = values[hit]
    weighed.offer(
        pos,
        values["ts_us"].astype(np.int64),
        values["request_id"].view("S16"),
        values["calibre"].astype(np.int16),
        len(indexes),
        values["file_no"].astype(np.int64),
        values["row"].astype(np.int64),
        values["rows"].astype(np.int64),
    )
    indexes.append(index)
