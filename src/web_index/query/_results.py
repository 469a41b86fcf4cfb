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
from web_index.query._find import FileRows, Found
from web_index.query._plan import Candidate, Plan
from web_index.query._pool import in_chunks, reader_pool
from web_index.storage import (
    BODY_COLUMN,
    REF_COLUMN,
    LocalBackend,
    Store,
    StoredCapture,
    read_group,
    read_small_files,
    resolve_rows,
    stored_response,
)

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
# million queries at S, ~10 winners a file: 207.6 s by place).
_DENSE_SMALL_FILE = 4
# Bodies read by place are spread over the reader threads from this many a thread (fewer
# cost more to hand over than they save), when their pages average this many bytes a body
# (or the store is remote): see _heavy.
_SPREAD_BODIES = 64
_SPREAD_BYTES = 8192
_SPREAD_SAMPLE = 256  # wants whose pages decide it

_FileKey = tuple[str, int, str]  # a compacted file's path, size and version


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
    placed = _answer_by_place(store, plans, found, answers)
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
    _payloads_by_place(store, plans, found, chains)
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


def _answer_by_place(
    store: Store, plans: list[Plan], found: dict[int, Found], answers: list[Result | bool]
) -> set[int]:
    """Answer the plans whose winner the month index found in a compacted file
    with a capture index: each row's line, and its body by its place, with no
    row group decoded (``storage.indexes._capture_records``). Return the plans
    answered; the others (no index, a row it cannot give) are read by row group."""
    by_file: dict[_FileKey, list[tuple[int, Found, FileRows]]] = defaultdict(list)
    for i, f in found.items():
        src = f.source
        if src is not None and src.from_index and src.version and not plans[i].type.is_metadata:
            by_file[(src.path, src.size, src.version)].append((i, f, src))
    if isinstance(store.backend, LocalBackend):
        dense = [k for k, idxs in by_file.items() if k[1] <= _SMALL_FILE and len(idxs) >= _DENSE_SMALL_FILE]
        if len(dense) >= _MANY_SMALL_FILES:
            for k in dense:
                del by_file[k]
    if not by_file:
        return set()

    # Lines in this thread (Python's work under the GIL, which reader threads only contend
    # for), then the bodies, spread over the reader threads: their reads, zstd and SHA-1 let
    # each other run.
    read_files = _rows_by_place(
        store,
        {
            key: (plans[winners[0][0]].type, sorted({r for _i, _f, src in winners for r in src.rows}))
            for key, winners in by_file.items()
        },
    )
    done: set[int] = set()
    for key, winners in by_file.items():
        rows_read = read_files.get(key)
        if rows_read is None:
            continue
        for i, f, src in winners:
            p, c = plans[i], f.candidate
            responses: list[Response] = []
            for n, r in enumerate(src.rows):
                got = rows_read.get(r)
                if got is None:
                    break
                line, response = got
                if (line.request_id, line.page, line.attempt_us, line.position) != (
                    c.request_id,
                    p.url_key,
                    c.ts_us,
                    n,
                ):
                    break
                responses.append(response)
            else:
                answers[i] = Page(
                    type=p.type,
                    url=responses[0].url,
                    timestamp=from_us(c.ts_us),
                    request_id=c.request_id,
                    responses=responses,
                )
                done.add(i)
            # Else read the older way, which tells a stale place from a changed file.
    return done


def _rows_by_place(
    store: Store, files: dict[_FileKey, tuple[RecordType, list[int]]]
) -> dict[_FileKey, dict[int, tuple[StoredCapture, Response]]]:
    """The line and response of these rows of these files, read through their capture
    indexes; a file without one is left out, and so is a row it cannot give (no line, a
    place that does not hold its body)."""
    lines: dict[_FileKey, tuple[RecordType, dict[int, StoredCapture]]] = {}
    for key, (type, rows) in files.items():
        got = store.captures_by_row(type, *key, rows)
        if got is not None:
            lines[key] = (type, got)
    # Bodies in their rows' order, which is their pages' (a page decompressed once for its
    # bodies); the lines came in theirs (SURT order).
    wanted = [
        (key[0], c)
        for key, (type, got) in lines.items()
        if type is RecordType.GET
        for _row, c in sorted(got.items())
    ]
    least = _SPREAD_BODIES if store.remote or _heavy(wanted) else len(wanted) + 1
    bodies = iter(in_chunks(store, store.bodies_by_place, wanted, least=least))
    out: dict[_FileKey, dict[int, tuple[StoredCapture, Response]]] = {}
    for key, (type, got) in lines.items():
        rows_read = out[key] = {}
        for row, line in sorted(got.items()):
            data = next(bodies) if type is RecordType.GET else None
            if data is not None or type is not RecordType.GET:
                rows_read[row] = (line, stored_response(line, data))
    return out


def _heavy(wanted: list[tuple[str, StoredCapture]]) -> bool:
    """Whether decompressing is most of reading these bodies, worth spreading over threads:
    their pages average ``_SPREAD_BYTES`` a body (judged on an even sample of them). Small
    bodies sharing pages are Python's work under the GIL, which threads only fight over
    (10,000 latest lookups of one site's 72-byte bodies: 2-3% slower spread)."""
    if len(wanted) < 2 * _SPREAD_BODIES:
        return False  # too few to spread anyway
    sample = wanted[:: max(1, len(wanted) // _SPREAD_SAMPLE)]
    pages = {(path, c.held, c.body[0]): c.body[2] for path, c in sample if c.body is not None}
    return sum(pages.values()) >= _SPREAD_BYTES * len(sample)


def _payloads_by_place(
    store: Store,
    plans: list[Plan],
    found: dict[int, Found],
    chains: dict[tuple[str, str], list[dict[str, Any]]],
) -> None:
    """Give the referring rows read whole from small files (``chains``) their
    payloads through their files' capture indexes: each line names the place of
    the payload its row refers to, one read, where resolving the reference
    would open the holder's file and search it."""
    wanted: dict[_FileKey, dict[int, dict[str, Any]]] = defaultdict(dict)
    type = None
    for i, f in found.items():
        src = f.source
        if src is None or not src.from_index or not src.version or plans[i].type.is_metadata:
            continue
        for row in chains.get((src.path, f.candidate.request_id), []):
            if row.get(REF_COLUMN) is not None and "_row" in row:
                wanted[(src.path, src.size, src.version)][row["_row"]] = row
                type = plans[i].type
    if type is None:  # no referring row
        return
    got = _rows_by_place(store, {key: (type, sorted(rows)) for key, rows in wanted.items()})
    for key, rows in wanted.items():
        read = got.get(key, {})
        for n, row in rows.items():
            line = read.get(n)
            if line is not None and (line[0].request_id, line[0].position) == (
                row["request_id"],
                row["chain_index"],
            ):
                row[BODY_COLUMN] = line[1].data
                row[REF_COLUMN] = None  # resolved


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
