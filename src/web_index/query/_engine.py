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
import logging
import os
import threading
from collections import defaultdict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, cast

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from web_index._retry import retrying
from web_index.errors import CorruptFileError
from web_index.models import AttemptMetadata, Page, Query, RecordType, Response, from_us, month_bounds
from web_index.query._plan import Candidate, Plan, plan
from web_index.storage import (
    KEY_COLUMNS,
    TS_COLUMN,
    IndexHit,
    LocalBackend,
    Partition,
    Store,
    StoredFile,
    open_month_index,
    read_small_files,
)

log = logging.getLogger("web_index.query")

__all__ = ["Result", "run_queries"]

Result = Page | AttemptMetadata | None
_TRIES = 8


@dataclass(slots=True)
class _FileRows:
    """Where a candidate's rows are in a file."""

    path: str
    size: int
    handle: pq.ParquetFile | None  # None: not opened yet (found through the month index)
    rows: list[int] = field(default_factory=list)
    from_index: bool = False  # the month index said so: check the rows hold the record


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
    no_index: set[int] = set()  # plans the month index misled: read their partitions
    pending = list(range(len(plans)))

    # A query that raced a flush or a compaction (a file replaced between
    # listing and reading, a buffered row flushed meanwhile) is answered again;
    # the ones settled stay settled.
    def again() -> list[int]:
        nonlocal pending
        pending = _attempt(store, plans, pending, answers, bodies, no_index)
        return pending

    retrying(
        again,
        tries=_TRIES,
        on=(FileNotFoundError,),
        done=lambda left: not left,
        gave_up="the store kept changing under this query batch; try again",
    )
    index = list(unique.values())
    by_query = dict(zip(unique, index, strict=True))
    return [answers[by_query[q]] for q in queries]


def _attempt(
    store: Store,
    plans: list[Plan],
    todo: list[int],
    answers: list[Result | bool],
    bodies: bool,
    no_index: set[int],
) -> list[int]:
    found: dict[int, _Found] = {}  # plan index -> best so far
    by_type: dict[RecordType, list[int]] = defaultdict(list)
    for i in todo:
        by_type[plans[i].type].append(i)

    for type, idxs in by_type.items():
        _from_buffer(store, type, [plans[i] for i in idxs], idxs, found)
        _from_files(store, type, plans, idxs, found, no_index)

    retry: list[int] = []
    if not bodies:
        for i in todo:
            answers[i] = i in found
        return retry
    for i in todo:
        if i not in found:
            answers[i] = None
    _load(store, plans, found, answers, retry, no_index)
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


_POOLS: dict[bool, ThreadPoolExecutor] = {}  # by whether the store is local
_POOLS_LOCK = threading.Lock()


def _pool(store: Store) -> ThreadPoolExecutor:
    """The reader threads for this store's backend.

    Reading local files is decoding, CPU-bound: one thread per core. More only
    fight over the GIL and the caches (a batch of 10,000 queries at 2S spent
    13% more CPU with 8 threads than with 2 on 2 cores). Object-store reads
    wait on the network, so a remote store gets more threads than cores.
    """
    local = isinstance(store.backend, LocalBackend)
    with _POOLS_LOCK:
        pool = _POOLS.get(local)
        if pool is None:
            cores = os.cpu_count() or 1
            threads = cores if local else min(16, 4 * cores)
            pool = _POOLS[local] = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="wi-read")
    return pool


def _offer(found: dict[int, _Found], i: int, p: Plan, c: Candidate, source: _FileRows | None) -> None:
    if not p.accepts(c):
        return
    current = found.get(i)
    if current is None or p.better(c, current.candidate):
        found[i] = _Found(c, source)


def _from_files(
    store: Store,
    type: RecordType,
    plans: list[Plan],
    idxs: list[int],
    found: dict[int, _Found],
    no_index: set[int],
) -> None:
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
    found: dict[int, _Found],
    no_index: set[int],
) -> None:
    index = open_month_index(store.backend, type, year, month)
    listing = index.current_listing(store.backend) if index is not None else None
    if listing is None:
        listing = store.month_files(type, year, month)
    trusted: dict[str, bool] = {}  # domain -> whether the index covers its files exactly
    by_domain: dict[str, list[int]] = defaultdict(list)
    indexed: list[int] = []
    for i in wanted:
        domain = plans[i].domain
        if domain not in listing:
            continue
        if index is not None and i not in no_index:
            if domain not in trusted:
                trusted[domain] = index.authoritative(domain, listing[domain])
            if trusted[domain]:
                indexed.append(i)
                continue
        by_domain[domain].append(i)
    # Partitions the index does not cover are read from their files, concurrently
    # (Parquet decoding and object-store requests release the GIL).
    pool = _pool(store)
    jobs = [
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
    if indexed:
        assert index is not None
        hits: dict[str, list[IndexHit]] = defaultdict(list)
        try:
            looked_up = index.lookup({plans[i].key_hash: plans[i].url_key for i in indexed})
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
                rows = list(range(h.row, h.row + h.rows))
                _offer(
                    found,
                    i,
                    p,
                    Candidate(h.ts_us, h.request_id, h.calibre),
                    _FileRows(h.path, h.size, None, rows, from_index=True),
                )
    for members, job in jobs:
        per_key = job.result()
        for i in members:
            p = plans[i]
            for cand, src in per_key.get(p.url_key, {}).values():
                _offer(found, i, p, cand, src)


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
    _files, opened, _dead = store.open_visible(Partition(type, year, month, domain), files)
    per_key: dict[str, dict[str, tuple[Candidate, _FileRows]]] = defaultdict(dict)
    ts_col = TS_COLUMN[type]
    for file, handle in opened:
        for key, ts, rid, cal, row in _scan_keys(handle, type, keys, ts_col):
            entry = per_key[key].get(rid)
            if entry is None:
                entry = (Candidate(ts, rid, cal), _FileRows(file.path, file.size, handle))
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


# Files up to this size (about one row group of bodies) are read whole, many
# at once by polars' multi-file reader: per-file overhead, not bytes, is the
# cost of a batch that touches thousands of small partitions. Bigger files are
# read by row group, only those holding a winner.
_SMALL_FILE = 128 * 1024
_SMALL_BATCH_BYTES = 64 * 1024 * 1024  # bounds the memory of one multi-file read
# Decoded row groups one reader thread holds before turning them into rows.
_DECODED_BUDGET = 16 * 1024 * 1024
# Below this many small files, each is opened and only its rows' row group read
# (about 1 ms a file); polars' multi-file read costs more than that to start.
_MANY_SMALL_FILES = 8


def _load(
    store: Store,
    plans: list[Plan],
    found: dict[int, _Found],
    answers: list[Result | bool],
    retry: list[int],
    no_index: set[int],
) -> None:
    from_buffer = {f.candidate.request_id for f in found.values() if f.source is None}
    buffered = store.buffer.load(from_buffer) if from_buffer else {}
    local = store.backend if isinstance(store.backend, LocalBackend) else None
    if local is not None:
        small_files = {
            f.source.path for f in found.values() if f.source is not None and f.source.size <= _SMALL_FILE
        }
        if len(small_files) < _MANY_SMALL_FILES:
            local = None  # a few files: reading their rows directly costs less than a multi-file read
    small: dict[str, set[str]] = defaultdict(set)  # type folder -> request ids
    small_paths: dict[str, set[tuple[str, int]]] = defaultdict(set)
    large: dict[str, tuple[pq.ParquetFile | None, set[int]]] = {}
    for f in found.values():
        src = f.source
        if src is None:
            continue
        if local is not None and src.size <= _SMALL_FILE:
            kind = src.path.split("/", 1)[0]
            small[kind].add(f.candidate.request_id)
            small_paths[kind].add((src.path, src.size))
            continue
        handle, rows = large.setdefault(src.path, (src.handle, set()))
        if handle is None and src.handle is not None:
            large[src.path] = (src.handle, rows)
        rows.update(src.rows)
    rows_of: dict[str, dict[int, dict[str, Any]]] = {}
    if len(large) == 1 and not small:  # a single query's one file: no hand-off to the pool
        [(path, (handle, rows))] = large.items()
        rows_of[path] = _read_file_rows(store, path, handle, sorted(rows))
    pool = _pool(store)
    jobs = {
        path: pool.submit(_read_file_rows, store, path, handle, sorted(rows))
        for path, (handle, rows) in large.items()
        if path not in rows_of
    }
    chains: dict[tuple[str, str], list[dict[str, Any]]] = {}
    if local is not None:
        for kind, paths in small.items():
            chains.update(_read_small_files(local, sorted(small_paths[kind]), paths))
    rows_of.update((path, job.result()) for path, job in jobs.items())
    for i, f in found.items():
        p = plans[i]
        src = f.source
        if src is None:
            attempt = buffered.get(f.candidate.request_id)
            if attempt is None:
                retry.append(i)  # flushed meanwhile: look again, it is in a file now
                continue
            answers[i] = _build(p.type, attempt.metadata, attempt.responses)
            continue
        rid = f.candidate.request_id
        if src.path in rows_of:
            in_file = rows_of[src.path]
            chain = [in_file[r] for r in src.rows if r in in_file]
        else:
            chain = chains.get((src.path, rid), [])
        if len(chain) != len(src.rows) or any(_mismatch(r, p, f.candidate) for r in chain):
            if not src.from_index:
                retry.append(i)  # the file changed under us: look again
                continue
            # The month index pointed at rows that hold something else now.
            no_index.add(i)
            retry.append(i)
            continue
        if p.type.is_metadata:
            answers[i] = _build(p.type, chain[0], [])
        else:
            answers[i] = _build(p.type, None, chain)


def _mismatch(row: dict[str, Any], p: Plan, c: Candidate) -> bool:
    ts = row["timestamp"] if p.type.is_metadata else row["attempt_timestamp"]
    return bool(row["request_id"] != c.request_id or row["url_key"] != p.url_key or ts != c.ts_us)


def _read_small_files(
    backend: LocalBackend, paths: list[tuple[str, int]], request_ids: set[str]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The rows of these records in these ``(store path, size)`` files, by (store path, request id)."""
    wanted = sorted(request_ids)
    out: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for chunk in _chunks(paths, _SMALL_BATCH_BYTES):
        try:
            # Read whole and filter here: a pushed-down is_in over thousands of
            # ids costs polars more per file than decoding the (small) file.
            frame = read_small_files(backend, [p for p, _size in chunk])
        except FileNotFoundError:
            # A compaction committed: whatever is missing is read again by the caller's retry.
            continue
        frame = frame.filter(pl.col("request_id").is_in(wanted)).with_columns(
            pl.col(pl.Datetime).dt.epoch("us")
        )
        for row in frame.drop("_row").to_dicts():
            out[(row.pop("_file"), row["request_id"])].append(row)
    for chain in out.values():
        if len(chain) > 1:
            chain.sort(key=lambda r: r.get("chain_index", 0))
    return out


def _chunks(paths: list[tuple[str, int]], budget: int) -> list[list[tuple[str, int]]]:
    """Consecutive groups of files of at most ``budget`` bytes (at least one file each)."""
    out: list[list[tuple[str, int]]] = []
    used = budget
    for item in paths:
        if used + item[1] > budget:
            out.append([])
            used = 0
        out[-1].append(item)
        used += item[1]
    return out


def _read_file_rows(
    store: Store, path: str, handle: pq.ParquetFile | None, rows: list[int]
) -> dict[int, dict[str, Any]]:
    if handle is None:
        handle = store.backend.open_parquet(path)
    return _read_rows(handle, rows)


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
        if 0 <= r < offset:  # out of range: a stale index entry, caught by the caller
            by_group[bisect.bisect_right(starts, r) - 1].append(r)
    if not by_group:
        return {}
    out: dict[int, dict[str, Any]] = {}
    order: list[int] = []
    pieces: list[pa.Table] = []
    held = 0
    last = max(by_group)
    for g, members in sorted(by_group.items()):
        table = handle.read_row_group(g, use_threads=False)
        # A slice keeps its whole row group alive. (Table.nbytes counts only
        # the bytes referenced, and took ~100 us a row group to do it.)
        held += table.get_total_buffer_size()
        # A chain's rows are contiguous (sorted by request id, chain index):
        # zero-copy slices of each run instead of a gathering take().
        for first, run in _runs(members):
            pieces.append(table.slice(first - starts[g], len(run)))
            order.extend(run)
        # One conversion per several row groups, not per group: the casts and
        # to_pylist cost more per call than per row, and they hold the GIL. But
        # not one per file: a big partition's hits span most of its row groups,
        # and holding them all decoded grows with the partition.
        if held >= _DECODED_BUDGET or g == last:
            out.update(zip(order, _timestamps_as_int(pa.concat_tables(pieces)).to_pylist(), strict=True))
            order, pieces, held = [], [], 0
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
