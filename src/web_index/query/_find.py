"""Finding each query's winner: the best stored attempt, from key columns only.

The candidates come from the insert buffer, then from the files, month by
month, newest first: through the month index where it covers a partition
exactly, else by scanning the partition's files (row groups pruned by their
``url_key`` statistics). What is found is where the winner's rows are, not the
rows themselves: :mod:`web_index.query._results` reads those, and only for the
winners.
"""

from __future__ import annotations

import bisect
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, cast

import msgspec

from web_index.errors import CorruptFileError
from web_index.models import RecordType, month_bounds
from web_index.query._plan import Candidate, Plan
from web_index.query._pool import reader_pool
from web_index.storage import (
    KEY_COLUMNS,
    TS_COLUMN,
    IndexHit,
    MonthIndex,
    Partition,
    Store,
    StoredFile,
    open_month_index,
)

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = [
    "FileRows",
    "Found",
    "coverage",
    "find_in_buffer",
    "find_in_files",
    "indexed_rows",
    "month_opened",
    "read_partitions",
]

log = logging.getLogger("web_index.query")


# Structs, not dataclasses: a batch makes one or two of each a query, and msgspec builds
# them in C (a dataclass's __init__ is Python's: ~2% of 10,000 lookups); ``gc=False`` as
# for _plan's (never in a cycle).
class FileRows(msgspec.Struct, gc=False):
    """Where a candidate's rows are in a file."""

    path: str
    size: int
    handle: pq.ParquetFile | None  # None: not opened yet (found through the month index)
    rows: list[int] = []  # a new list for each
    from_index: bool = False  # the month index said so: check the rows hold the record
    version: str = ""  # of the file, where the month index knew it (its capture index is named by it)


class Found(msgspec.Struct, gc=False):
    """A query's best candidate so far, and where its rows are."""

    candidate: Candidate
    source: FileRows | None  # None: in the insert buffer


def find_in_buffer(
    store: Store, type: RecordType, plans: list[Plan], idxs: list[int], found: dict[int, Found]
) -> None:
    """Offer the buffered attempts of ``plans`` (the plans at ``idxs``) to ``found``."""
    keys = {p.url_key for p in plans}
    by_key: dict[str, list[Candidate]] = defaultdict(list)
    for row in store.buffer.lookup(type.method, keys):
        if type.is_metadata or row.success:
            by_key[row.url_key].append(Candidate(row.ts_us, row.request_id, row.calibre))
    for i, p in zip(idxs, plans, strict=True):
        for c in by_key.get(p.url_key, ()):
            _offer(found, i, p, c, None)


def _offer(found: dict[int, Found], i: int, p: Plan, c: Candidate, source: FileRows | None) -> None:
    if _wins(found, i, p, c):
        found[i] = Found(c, source)


def _wins(found: dict[int, Found], i: int, p: Plan, c: Candidate) -> bool:
    """Whether ``c`` answers plan ``p`` (at ``i``) better than what ``found`` holds for it."""
    if not p.accepts(c):
        return False
    current = found.get(i)
    return current is None or p.better(c, current.candidate)


def find_in_files(
    store: Store,
    type: RecordType,
    plans: list[Plan],
    idxs: list[int],
    found: dict[int, Found],
    no_index: set[int],
) -> None:
    """Offer the stored attempts of the plans at ``idxs`` to ``found``, newest month first.

    ``no_index`` holds the plans the month index misled: their partitions are read instead.
    """
    active = list(idxs)
    for year, month in store.months(type):
        start, end = month_bounds(year, month)
        # Queries whose window reaches this month and that older records can still improve.
        wanted = [i for i in active if plans[i].lo_us < end and plans[i].hi_us >= start]
        if wanted:
            _from_month(store, type, year, month, plans, wanted, found, no_index)
        active = [
            i for i in active if not plans[i].settled(found[i].candidate if i in found else None, start)
        ]
        if not active:
            break


def _from_month(
    store: Store,
    type: RecordType,
    year: int,
    month: int,
    plans: list[Plan],
    wanted: list[int],
    found: dict[int, Found],
    no_index: set[int],
) -> None:
    index, listing = month_opened(store, type, year, month)
    # Per domain, not per query (a batch asks of a few domains many times).
    trusted: dict[str, bool | None] = {}
    by_domain: dict[str, list[int]] = defaultdict(list)
    indexed: list[int] = []
    by_hash: dict[bytes, str] = {}  # the indexed plans' URL keys, by their index keys
    for i in wanted:
        p = plans[i]
        domain = p.domain
        if domain in trusted:
            covered = trusted[domain]
        else:
            covered = trusted[domain] = coverage(index, listing, domain)
        if covered is None:
            continue
        if covered and i not in no_index:
            indexed.append(i)
            by_hash[p.key_hash] = p.url_key
            continue
        by_domain[domain].append(i)
    jobs = read_partitions(store, type, year, month, by_domain, plans, listing)
    if indexed:
        assert index is not None
        hits: dict[str, list[IndexHit]] = defaultdict(list)
        try:
            looked_up = index.lookup(by_hash)
        except CorruptFileError as exc:  # derived data: damage costs speed, never an answer
            log.warning("%s: %s; reading the partitions instead", exc.path, exc.problem)
            no_index.update(indexed)
            _from_month(store, type, year, month, plans, indexed, found, no_index)
            looked_up = []
        for hit in looked_up:
            hits[hit.url_key].append(hit)
        for i in indexed:
            p = plans[i]
            for h in hits.get(p.url_key, ()):
                c = Candidate(h.ts_us, h.request_id, h.calibre)
                if _wins(found, i, p, c):  # where its rows are, for a winner only
                    found[i] = Found(c, indexed_rows(h.path, h.size, h.row, h.rows, h.version))
    for members, job in jobs:
        per_key = job.result()
        for i in members:
            p = plans[i]
            for cand, src in per_key.get(p.url_key, {}).values():
                _offer(found, i, p, cand, src)


def month_opened(
    store: Store, type: RecordType, year: int, month: int
) -> tuple[MonthIndex | None, Mapping[str, list[StoredFile]]]:
    """The month's index (None without one) and its files by domain: the index's
    listing while the folder is unchanged, else the folder's."""
    index = open_month_index(store.backend, type, year, month)
    listing = index.current_listing(store.backend) if index is not None else None
    return index, store.month_files(type, year, month) if listing is None else listing


def coverage(index: MonthIndex | None, listing: Mapping[str, list[StoredFile]], domain: str) -> bool | None:
    """None: ``domain`` has no files this month; else whether the index covers them exactly."""
    if domain not in listing:
        return None
    return index is not None and index.authoritative(domain, listing[domain])


def indexed_rows(path: str, size: int, row: int, rows: int, version: str) -> FileRows:
    """Where the month index says a record's rows are (checked when read)."""
    return FileRows(path, size, None, list(range(row, row + rows)), from_index=True, version=version)


def read_partitions(
    store: Store,
    type: RecordType,
    year: int,
    month: int,
    by_domain: Mapping[str, list[int]],
    plans: Sequence[Plan],
    listing: Mapping[str, list[StoredFile]],
) -> list[tuple[list[int], Future[_PerKey]]]:
    """The month's partitions of these domains read from their files for the plans at
    ``by_domain``'s positions (in ``plans``), concurrently (Parquet decoding and object-store
    requests release the GIL): each domain's positions, and its candidates to come."""
    pool = reader_pool(store)
    return [
        (
            members,
            pool.submit(
                _read_partition,
                store,
                type,
                year,
                month,
                domain,
                listing[domain],
                sorted({plans[i].url_key for i in members}),
            ),
        )
        for domain, members in by_domain.items()
    ]


_PerKey = dict[str, dict[str, tuple[Candidate, FileRows]]]  # candidates by URL key and request id


def _read_partition(
    store: Store,
    type: RecordType,
    year: int,
    month: int,
    domain: str,
    files: list[StoredFile],
    keys: list[str],
) -> _PerKey:
    """Candidates per URL key and request id in one partition (key columns only)."""
    _files, opened, _dead = store.open_visible(Partition(type, year, month, domain), files)
    per_key: _PerKey = defaultdict(dict)
    ts_col = TS_COLUMN[type]
    for file, handle in opened:
        for key, ts, rid, cal, row in _scan_keys(handle, type, keys, ts_col):
            entry = per_key[key].get(rid)
            if entry is None:
                entry = (Candidate(ts, rid, cal), FileRows(file.path, file.size, handle))
                per_key[key][rid] = entry
            elif entry[1].handle is not handle:
                continue  # the same attempt seen in an older file: already have it
            entry[1].rows.append(row)
    return per_key


def _scan_keys(
    handle: pq.ParquetFile, type: RecordType, keys: list[str], ts_col: str
) -> list[tuple[str, int, str, int, int]]:
    """``(url_key, ts_us, request_id, calibre, row)`` of rows whose key is asked for."""
    import pyarrow as pa
    import pyarrow.compute as pc

    meta = handle.metadata
    key_idx = meta.schema.names.index("url_key")
    groups: list[int] = []
    offsets: list[int] = []
    offset = 0
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        stats = rg.column(key_idx).statistics
        lo_key = stats.min if stats is not None and stats.has_min_max else None
        hi_key = stats.max if stats is not None and stats.has_min_max else None
        if isinstance(lo_key, str) and isinstance(hi_key, str):
            lo = bisect.bisect_left(keys, lo_key)
            if lo == len(keys) or keys[lo] > hi_key:
                offset += rg.num_rows
                continue
        groups.append(g)
        offsets.append(offset)
        offset += rg.num_rows
    if not groups:
        return []
    columns = KEY_COLUMNS[type]
    out: list[tuple[str, int, str, int, int]] = []
    wanted = pa.array(keys, type=pa.string())
    for g, base in zip(groups, offsets, strict=True):
        table = handle.read_row_group(g, columns=columns, use_threads=False)
        mask = pc.is_in(table.column("url_key"), value_set=wanted)
        positions = cast(list[int], pc.indices_nonzero(mask).to_pylist())
        if not positions:
            continue
        sub = table.filter(mask)
        # Key columns are non-nullable in every schema.
        ks = cast(list[str], sub.column("url_key").to_pylist())
        ts = cast(list[int], sub.column(ts_col).cast(pa.int64()).to_pylist())
        rids = cast(list[str], sub.column("request_id").to_pylist())
        cals = cast(list[int], sub.column("fetcher_calibre").to_pylist())
        for j, pos in enumerate(positions):
            out.append((ks[j], ts[j], rids[j], cals[j], base + pos))
    return out
