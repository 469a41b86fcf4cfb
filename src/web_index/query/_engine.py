"""Answering a batch of queries: plan by partition, read keys, then bodies.

1. Every distinct query becomes a :class:`Plan` (type, URL key, domain,
   window, calibre rule).
2. The insert buffer is consulted first, then the files (this order is what
   makes a concurrent flush safe: rows leave the buffer only after their part
   file is in place).
3. Files are read month by month, newest first; a query stops asking for
   older months once nothing older can beat what it has. Within a partition,
   row-group statistics on the sorted ``url_key`` skip row groups, and only
   key columns are read.
4. Winners are chosen; only their rows are read in full (never a body that
   will not be returned, and none at all for presence).
"""

from __future__ import annotations

import bisect
import os
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from web_index.models import AttemptMetadata, Page, Query, RecordType, Response
from web_index.models._time import from_us
from web_index.query._plan import Candidate, Plan, month_bounds, plan
from web_index.storage._files import visible_files
from web_index.storage._layout import Partition, StoredFile
from web_index.storage._schema import KEY_COLUMNS, TS_COLUMN
from web_index.storage._store import Store

__all__ = ["Result", "run_queries"]

Result = Page | AttemptMetadata | None
_RETRIES = 8


@dataclass(slots=True)
class _FileRows:
    """Where a candidate's rows are in a file."""

    handle: pq.ParquetFile
    rows: list[int] = field(default_factory=list)


@dataclass(slots=True)
class _Found:
    candidate: Candidate
    source: _FileRows | None  # None: in the insert buffer


def run_queries(store: Store, queries: Sequence[Query], *, bodies: bool) -> list[Result | bool]:
    """Answer ``queries`` in input order: results, or presence booleans if not ``bodies``."""
    unique: dict[Query, int] = {}
    for q in queries:
        unique.setdefault(q, len(unique))
    plans = [plan(q) for q in unique]
    answers: list[Result | bool] = [None] * len(plans)
    pending = list(range(len(plans)))
    for _ in range(_RETRIES):
        if not pending:
            break
        pending = _attempt(store, plans, pending, answers, bodies)
    if pending:
        from web_index.errors import StoreError

        raise StoreError(f"{len(pending)} queries kept racing with concurrent flushes; try again")
    index = list(unique.values())
    by_query = dict(zip(unique, index, strict=True))
    return [answers[by_query[q]] for q in queries]


def _attempt(
    store: Store, plans: list[Plan], todo: list[int], answers: list[Result | bool], bodies: bool
) -> list[int]:
    found: dict[int, _Found] = {}  # plan index -> best so far
    by_type: dict[RecordType, list[int]] = defaultdict(list)
    for i in todo:
        by_type[plans[i].type].append(i)

    for type, idxs in by_type.items():
        _from_buffer(store, type, [plans[i] for i in idxs], idxs, found)
        _from_files(store, type, plans, idxs, found)

    retry: list[int] = []
    if not bodies:
        for i in todo:
            answers[i] = i in found
        return retry
    for i in todo:
        if i not in found:
            answers[i] = None
    _load(store, plans, found, answers, retry)
    return retry


def _from_buffer(
    store: Store, type: RecordType, plans: list[Plan], idxs: list[int], found: dict[int, _Found]
) -> None:
    keys = {p.url_key for p in plans}
    by_key: dict[str, list[Candidate]] = defaultdict(list)
    for row in store.buffer.lookup(type.method, keys):
        if type.is_metadata or row.success:
            by_key[row.url_key].append(Candidate(row.ts_us, row.request_id, row.calibre))
    for i, p in zip(idxs, plans, strict=True):
        for c in by_key.get(p.url_key, ()):
            _offer(found, i, p, c, None)


_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(
            max_workers=min(16, 4 * (os.cpu_count() or 1)), thread_name_prefix="wi-read"
        )
    return _POOL


def _offer(found: dict[int, _Found], i: int, p: Plan, c: Candidate, source: _FileRows | None) -> None:
    if not p.accepts(c):
        return
    current = found.get(i)
    if current is None or p.better(c, current.candidate):
        found[i] = _Found(c, source)


def _from_files(
    store: Store, type: RecordType, plans: list[Plan], idxs: list[int], found: dict[int, _Found]
) -> None:
    active = list(idxs)
    for year, month in store.months(type):
        start, end = month_bounds(year, month)
        # Queries whose window reaches this month and that older records can still improve.
        wanted = [i for i in active if plans[i].lo_us < end and plans[i].hi_us >= start]
        if wanted:
            listing = store.month_files(type, year, month)
            by_domain: dict[str, list[int]] = defaultdict(list)
            for i in wanted:
                if plans[i].domain in listing:
                    by_domain[plans[i].domain].append(i)
            # Partitions are independent: read them concurrently (Parquet decoding
            # and object-store requests release the GIL), merge here.
            jobs = [
                (
                    members,
                    _pool().submit(
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
            for members, job in jobs:
                per_key = job.result()
                for i in members:
                    p = plans[i]
                    for cand, src in per_key.get(p.url_key, {}).values():
                        _offer(found, i, p, cand, src)
        active = [
            i for i in active if not plans[i].settled(found[i].candidate if i in found else None, start)
        ]
        if not active:
            break


def _read_partition(
    store: Store,
    type: RecordType,
    year: int,
    month: int,
    domain: str,
    files: list[StoredFile],
    keys: list[str],
) -> dict[str, dict[str, tuple[Candidate, _FileRows]]]:
    """Candidates per URL key and request id in one partition (key columns only)."""
    for _ in range(_RETRIES):
        try:
            opened, _dead = visible_files(store.backend, files)
            break
        except FileNotFoundError:
            # A compaction replaced files after we listed them: list again.
            files = store.partition_files(Partition(type, year, month, domain))
    else:
        from web_index.errors import StoreError

        raise StoreError(f"partition {type.value}/{year}/{month:02d}/{domain} kept changing while read")
    per_key: dict[str, dict[str, tuple[Candidate, _FileRows]]] = defaultdict(dict)
    ts_col = TS_COLUMN[type]
    for _file, handle in opened:
        for key, ts, rid, cal, row in _scan_keys(handle, type, keys, ts_col):
            entry = per_key[key].get(rid)
            if entry is None:
                entry = (Candidate(ts, rid, cal), _FileRows(handle))
                per_key[key][rid] = entry
            elif entry[1].handle is not handle:
                continue  # the same attempt seen in an older file: already have it
            entry[1].rows.append(row)
    return per_key


def _scan_keys(
    handle: pq.ParquetFile, type: RecordType, keys: list[str], ts_col: str
) -> list[tuple[str, int, str, int, int]]:
    """``(url_key, ts_us, request_id, calibre, row)`` of rows whose key is asked for."""
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
        table = handle.read_row_group(g, columns=columns)
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


def _load(
    store: Store, plans: list[Plan], found: dict[int, _Found], answers: list[Result | bool], retry: list[int]
) -> None:
    from_buffer = {f.candidate.request_id for f in found.values() if f.source is None}
    buffered = store.buffer.load(from_buffer) if from_buffer else {}
    # Group file reads by file so each row group is read once.
    by_handle: dict[int, tuple[pq.ParquetFile, set[int]]] = {}
    for f in found.values():
        if f.source is not None:
            entry = by_handle.setdefault(id(f.source.handle), (f.source.handle, set()))
            entry[1].update(f.source.rows)
    rows_of: dict[tuple[int, int], dict[str, Any]] = {}
    for hid, (handle, rows) in by_handle.items():
        for row, values in _read_rows(handle, sorted(rows)).items():
            rows_of[(hid, row)] = values
    for i, f in found.items():
        p = plans[i]
        if f.source is None:
            attempt = buffered.get(f.candidate.request_id)
            if attempt is None:
                retry.append(i)  # flushed meanwhile: look again, it is in a file now
                continue
            answers[i] = _build(p.type, attempt.metadata, attempt.responses)
        else:
            chain = [rows_of[(id(f.source.handle), r)] for r in f.source.rows]
            if p.type.is_metadata:
                answers[i] = _build(p.type, chain[0], [])
            else:
                answers[i] = _build(p.type, None, chain)


def _read_rows(handle: pq.ParquetFile, rows: list[int]) -> dict[int, dict[str, Any]]:
    """Full rows (bodies included) at these positions, reading only their row groups."""
    meta = handle.metadata
    starts: list[int] = []
    offset = 0
    for g in range(meta.num_row_groups):
        starts.append(offset)
        offset += meta.row_group(g).num_rows
    by_group: dict[int, list[int]] = defaultdict(list)
    for r in rows:
        by_group[bisect.bisect_right(starts, r) - 1].append(r)
    out: dict[int, dict[str, Any]] = {}
    for g, members in by_group.items():
        table = _timestamps_as_int(handle.read_row_group(g))
        # A chain's rows are contiguous (sorted by request id, chain index):
        # zero-copy slices of each run instead of a gathering take().
        for first, run in _runs(members):
            part = table.slice(first - starts[g], len(run)).to_pylist()
            out.update(zip(run, part, strict=True))
    return out


def _runs(rows: list[int]) -> list[tuple[int, list[int]]]:
    runs: list[tuple[int, list[int]]] = []
    for r in sorted(rows):
        if runs and runs[-1][1][-1] + 1 == r:
            runs[-1][1].append(r)
        else:
            runs.append((r, [r]))
    return runs


def _timestamps_as_int(table: pa.Table) -> pa.Table:
    for idx, fld in enumerate(table.schema):
        if pa.types.is_timestamp(fld.type):
            table = table.set_column(idx, fld.name, table.column(idx).cast(pa.int64()))
    return table


def _build(type: RecordType, metadata: dict[str, Any] | None, responses: list[dict[str, Any]]) -> Result:
    if type.is_metadata:
        assert metadata is not None
        m = metadata
        return AttemptMetadata(
            state=m["state"],
            url=m["url"],
            timestamp=from_us(m["timestamp"]),
            request_id=m["request_id"],
            fetcher_name=m["fetcher_name"],
            fetcher_version=m["fetcher_version"],
            fetcher_calibre=m["fetcher_calibre"],
            logs=m["logs"],
            traceback=m["traceback"],
            run_time=m["run_time"],
        )
    if not responses:
        return None
    chain = sorted({r["chain_index"]: r for r in responses}.values(), key=lambda r: r["chain_index"])
    first = chain[0]
    return Page(
        type=type,
        url=first["url"],
        timestamp=from_us(first["attempt_timestamp"]),
        request_id=first["request_id"],
        responses=[_response(type, r) for r in chain],
    )


def _response(type: RecordType, r: dict[str, Any]) -> Response:
    return Response(
        url=r["url"],
        request_url=r["request_url"],
        status_code=r["status_code"],
        headers=r["headers"],
        timestamp=from_us(r["timestamp"]),
        data=r.get("data") if type is RecordType.GET else None,
        retry_attempt=r["retry_attempt"],
        is_final=r["is_final"],
        request_id=r["request_id"],
        fetcher_name=r["fetcher_name"],
        fetcher_version=r["fetcher_version"],
        fetcher_calibre=r["fetcher_calibre"],
    )
