"""Normalised queries: what each query asks of the store, in store terms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from web_index.errors import InvalidURLError
from web_index.models import (
    PageKey,
    Query,
    RecordType,
    SimplePageQuery,
    TimeAwarePageQuery,
    clamp_us,
    queries_of,
    to_us,
)
from web_index.storage import key_hash
from web_index.urls import key_and_domain

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Candidate", "Plan", "plan", "plans_of"]

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


# What a row of each kind may hold besides its URL and type (the query classes' fields), and
# the columns a table of query rows may have (QUERY_SCHEMA's): a row or a table outside them
# is made into queries, which say what is wrong.
_KIND_FIELDS = {
    "key": frozenset({"timestamp", "request_id"}),
    "simple": frozenset({"calibre", "calibre_strict"}),
    "time-aware": frozenset({"timestamp", "not_before", "not_after", "calibre", "calibre_strict"}),
}
_TIMES = ("timestamp", "not_before", "not_after")
_COLUMNS = frozenset({"kind", "type", "url", "request_id", *_TIMES, "calibre", "calibre_strict"})
_CALIBRES = range(101)  # Calibre.check's, the reserved 100 included


def plans_of(rows: pa.Table, source: object, numbers: Sequence[int]) -> list[Plan]:
    """``[plan(q) for q in queries_of(rows, source, numbers)]``, without the queries: rows
    whose values are all of their kind's form are planned from their columns (a million
    queries made and then planned cost ~10 us each, ~5 planned here). A table with any
    other row is made into queries, which raise naming the first invalid row as they do."""
    import pyarrow as pa

    names = rows.column_names
    times = [rows.schema.field(i).type for i, n in enumerate(names) if n in _TIMES]
    timed = all((pa.types.is_timestamp(t) and t.tz is not None) or pa.types.is_null(t) for t in times)
    if set(names) <= _COLUMNS and len(set(names)) == len(names) and timed:
        columns: dict[str, list[Any]] = {}
        for i, name in enumerate(names):
            column = rows.column(i)
            if name in _TIMES:
                column = column.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
            columns[name] = column.to_pylist()
        none = [None] * rows.num_rows
        out: list[Plan] = []
        for values in zip(*(columns.get(name, none) for name in _ROW), strict=True):
            got = _row_plan(*values)
            if got is None:
                break
            out.append(got)
        else:
            return out
    # Times as strings, columns of no query, or a row not of its kind's form (an invalid one).
    return [plan(q) for q in queries_of(rows, source, numbers)]


_ROW = ("kind", "type", "url", "request_id", *_TIMES, "calibre", "calibre_strict")  # _row_plan's


def _row_plan(
    kind: Any, type_: Any, url: Any, rid: Any, ts: Any, lo: Any, hi: Any, calibre: Any, strict: Any
) -> Plan | None:
    """The plan of one row's values, or None if they are not all of their kind's form."""
    if kind is None:  # as query_from_dict infers it
        kind = "key" if rid is not None else "time-aware" if (ts, lo, hi) != (None, None, None) else "simple"
    allowed = _KIND_FIELDS.get(kind) if isinstance(kind, str) else None
    if allowed is None or type(url) is not str:
        return None
    given = {
        name
        for name, value in (
            ("request_id", rid),
            ("timestamp", ts),
            ("not_before", lo),
            ("not_after", hi),
            ("calibre", calibre),
            ("calibre_strict", strict),
        )
        if value is not None
    }
    if not given <= allowed:
        return None
    record_type = _TYPES.get(type_) if type_ is None or type(type_) is str else None
    if record_type is None or (strict is not None and type(strict) is not bool):
        return None
    if calibre is not None and (type(calibre) is not int or calibre not in _CALIBRES):
        return None
    try:
        key, domain = key_and_domain(url)
    except InvalidURLError:
        return None
    hashed = key_hash(key)
    if kind == "key":
        if ts is None or type(rid) is not str or not rid:
            return None
        at = clamp_us(ts)
        return Plan(record_type, key, hashed, domain, at, at, None, rid, None, False)
    lo_us = _NEG if lo is None else clamp_us(lo)
    hi_us = _POS if hi is None else clamp_us(hi)
    if lo_us > hi_us:
        return None  # an empty window: said by the query
    near = None if ts is None else clamp_us(ts)
    return Plan(record_type, key, hashed, domain, lo_us, hi_us, near, None, calibre, bool(strict))


# A row's type as RecordType.parse takes it (None: the default).
_TYPES: dict[Any, RecordType] = {None: RecordType.GET, **{t.value: t for t in RecordType}}
