"""Turning winners into results: reading their full rows and building the answers.

Only the winners found by :mod:`web_index.query._find` get here, so a body is
read only if it is returned. Their rows come from the insert buffer or from
the files, where two readers share the work (see ``_SMALL_FILE``). Every row
read from a file is checked against what was found: the file may have changed
since, or the month index may have pointed at the wrong rows. :data:`Result` lives here
because this is where results are built.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from web_index.models import AttemptMetadata, Page, RecordType, Response, from_us
from web_index.query._by_place import FileKey, answer_by_place, payloads_by_place
from web_index.query._find import Found
from web_index.query._plan import Candidate, Plan
from web_index.query._pool import reader_pool
from web_index.storage import LocalBackend, Store, read_group, read_small_files, resolve_rows

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["Result", "build_result", "load_results", "timestamps_as_int"]

Result = Page | AttemptMetadata | None

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
# A small file holding at least this many winners of a batch that touches many
# small files is read whole with them, not by place: one vectorised multi-file
# read costs less than a line and a page decoded in Python for each winner (a
# million queries at S, ~10 winners a file: 207.6 s by place). Its winners that
# refer to another month's payload are read by place all the same (_by_place).
_DENSE_SMALL_FILE = 4


def load_results(
    store: Store,
    plans: list[Plan],
    found: dict[int, Found],
    answers: list[Result | bool],
    retry: list[int],
    no_index: set[int],
) -> None:
    """Answer the plans in ``found`` with their winners' full rows.

    A plan whose rows are gone or changed goes to ``retry`` (and to ``no_index``
    if the month index pointed at them), to be looked up again.
    """
    placed = answer_by_place(store, plans, found, answers, lambda winners: _read_whole(store, winners))
    found = {i: f for i, f in found.items() if i not in placed}
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
    pool = reader_pool(store)
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
    # Rows that refer to their payload get it: by the place their capture line names
    # where they have one, else from the rows that hold them.
    payloads_by_place(store, plans, found, chains)
    resolve_rows(
        store.backend,
        itertools.chain(
            (row for rows in rows_of.values() for row in rows.values()),
            (row for chain in chains.values() for row in chain),
        ),
    )
    for chain in chains.values():
        for row in chain:
            row.pop("_row", None)
    for i, f in found.items():
        p = plans[i]
        src = f.source
        if src is None:
            attempt = buffered.get(f.candidate.request_id)
            if attempt is None:
                retry.append(i)  # flushed meanwhile: look again, it is in a file now
                continue
            answers[i] = build_result(p.type, attempt.metadata, attempt.responses)
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
            answers[i] = build_result(p.type, chain[0], [])
        else:
            answers[i] = build_result(p.type, None, chain)


def _read_whole(store: Store, winners: dict[FileKey, int]) -> set[FileKey]:
    """Of the files holding these many winners of a batch, those read whole, not by
    place: small files dense in winners, when the batch touches many."""
    if not isinstance(store.backend, LocalBackend):
        return set()
    dense = {key for key, n in winners.items() if key[1] <= _SMALL_FILE and n >= _DENSE_SMALL_FILE}
    return dense if len(dense) >= _MANY_SMALL_FILES else set()


def _mismatch(row: dict[str, Any], p: Plan, c: Candidate) -> bool:
    ts = row["timestamp"] if p.type.is_metadata else row["attempt_timestamp"]
    return bool(row["request_id"] != c.request_id or row["url_key"] != p.url_key or ts != c.ts_us)


def _read_small_files(
    backend: LocalBackend, paths: list[tuple[str, int]], request_ids: set[str]
) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """The rows of these records in these ``(store path, size)`` files, by (store path, request id)."""
    import polars as pl  # here, not at the top: a single lookup never reads files this way

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
        for row in frame.to_dicts():  # "_row" kept: a referring row's line is found by it
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
    import pyarrow as pa

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
    bodies: dict[int, bytes | None] = {}
    for g, members in sorted(by_group.items()):
        # Bodies by page where the file allows (storage/pages/_reader.py): the rest of
        # the row group, and one page per body.
        table, paged = read_group(handle, g, [r - starts[g] for r in members])
        if paged is not None:
            bodies.update((r, paged[r - starts[g]]) for r in members)
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
            # One chunk (a copy of the rows taken): to_pylist pays per chunk and column, and a
            # batch's hits are mostly one-row slices (14 -> 6 us a row at 432 slices).
            rows_taken = pa.concat_tables(pieces, promote_options="permissive").combine_chunks()
            out.update(zip(order, timestamps_as_int(rows_taken).to_pylist(), strict=True))
            for r in order:
                if r in bodies:
                    out[r]["data"] = bodies.pop(r)
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


def timestamps_as_int(table: pa.Table) -> pa.Table:
    import pyarrow as pa

    for idx, fld in enumerate(table.schema):
        if pa.types.is_timestamp(fld.type):
            table = table.set_column(idx, fld.name, table.column(idx).cast(pa.int64()))
    return table


def build_result(
    type: RecordType, metadata: dict[str, Any] | None, responses: list[dict[str, Any]]
) -> Result:
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
