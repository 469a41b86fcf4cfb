"""Normalised queries: what each query asks of the store, in store terms."""

from __future__ import annotations

import msgspec

from web_index.models import PageKey, Query, RecordType, SimplePageQuery, TimeAwarePageQuery, to_us
from web_index.storage import key_hash
from web_index.urls import key_and_domain

__all__ = ["Candidate", "Plan", "plan"]

_NEG = -(1 << 62)
_POS = 1 << 62


# Structs with ``gc=False``: a batch makes tens of thousands of these (atomic
# fields only, never in a cycle), and as tracked objects they set off cyclic
# collections that walked every long-lived object of the process (~7% of a batch).
class Candidate(msgspec.Struct, frozen=True, gc=False):
    """One stored attempt that may answer a query (key columns only)."""

    ts_us: int
    request_id: str
    calibre: int

    def order(self) -> tuple[int, str]:
        # Later fetch first; the time-ordered request id breaks exact ties.
        return (self.ts_us, self.request_id)


class Plan(msgspec.Struct, frozen=True, gc=False):
    type: RecordType
    url_key: str
    key_hash: bytes  # the month index's key for url_key
    domain: str
    lo_us: int  # inclusive window
    hi_us: int
    near_us: int | None  # nearest to this; None: the latest
    request_id: str | None  # PageKey
    calibre: int | None
    strict: bool

    def accepts(self, c: Candidate) -> bool:
        if not self.lo_us <= c.ts_us <= self.hi_us:
            return False
        if self.request_id is not None:
            return c.request_id == self.request_id
        if self.calibre is None:
            return True
        return c.calibre == self.calibre if self.strict else c.calibre >= self.calibre

    def better(self, a: Candidate, b: Candidate | None) -> bool:
        """Whether ``a`` answers this query better than ``b``."""
        if b is None:
            return True
        if self.near_us is None:
            return a.order() > b.order()
        da, db = abs(a.ts_us - self.near_us), abs(b.ts_us - self.near_us)
        return da < db or (da == db and a.order() > b.order())

    def settled(self, best: Candidate | None, before_us: int) -> bool:
        """Whether no record older than ``before_us`` can beat ``best``."""
        if self.lo_us >= before_us:
            return True  # the window holds nothing older
        if best is None:
            return False
        if self.near_us is None:
            # Only a record at or after the boundary beats everything older; a
            # candidate found earlier (in the buffer, say) may be older still.
            return best.ts_us >= before_us
        # Older records are further than near - before_us, and lose ties.
        return self.near_us - before_us >= abs(best.ts_us - self.near_us)


def plan(query: Query) -> Plan:
    key, domain = key_and_domain(query.url)
    hashed = key_hash(key)
    if isinstance(query, PageKey):
        ts = to_us(query.timestamp)
        return Plan(query.type, key, hashed, domain, ts, ts, None, query.request_id, None, False)
    if isinstance(query, SimplePageQuery):
        return Plan(
            query.type, key, hashed, domain, _NEG, _POS, None, None, query.calibre, query.calibre_strict
        )
    if isinstance(query, TimeAwarePageQuery):
        lo = _NEG if query.not_before is None else to_us(query.not_before)
        hi = _POS if query.not_after is None else to_us(query.not_after)
        near = None if query.timestamp is None else to_us(query.timestamp)
        return Plan(query.type, key, hashed, domain, lo, hi, near, None, query.calibre, query.calibre_strict)
    raise TypeError(f"not a query: {query!r}")
