"""The naive baseline: one DuckDB statement per batch over every file of the type.

Same semantics as web-index (``reference()`` in tests/test_model_based.py and
``web_index/query/_plan.py``): among the rows of the type whose ``url_key``
equals the normalised query URL, inside the time window, passing the calibre
rule (or with the exact ``request_id`` for a page key), pick the attempt
nearest to ``timestamp`` (ties and no ``timestamp``: latest
``(attempt_timestamp, request_id)``) and return all rows of its
``request_id`` with their bodies.

It reads only the Parquet files: the benchmark flushes the insert buffer first.
It reads *every* file, which is right only if no compacted file lists a part
as superseded; :func:`assert_no_superseded` checks that.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from web_index.models import PageKey, Query, RecordType, SimplePageQuery, TimeAwarePageQuery
from web_index.models._time import to_us
from web_index.storage._layout import parse_file_name
from web_index.urls import url_key

# Answer of one query: (request_id, rows in the chain, crc32 of the final body or state), or None.
Answer = tuple[str, int, int] | None

_NEG = -(1 << 62)
_POS = 1 << 62
_BATCH_SCHEMA_FIELDS: list[pa.Field[Any]] = [
    pa.field("qi", pa.int64()),
    pa.field("url_key", pa.string()),
    pa.field("lo", pa.int64()),
    pa.field("hi", pa.int64()),
    pa.field("near", pa.int64()),
    pa.field("rid", pa.string()),
    pa.field("calibre", pa.int64()),
    pa.field("strict", pa.bool_()),
]
_BATCH_SCHEMA = pa.schema(_BATCH_SCHEMA_FIELDS)


def assert_no_superseded(root: Path) -> int:
    """Fail unless no compacted file lists a part file as superseded that still exists.

    Only partitions that have part files can fail, so only their compacted
    files are opened. Returns the number of data files (of the four types) seen.
    """
    files = [f for t in RecordType for f in (root / t.value).glob("*/*/*.parquet")]
    parts: dict[tuple[Path, str], set[str]] = {}
    compacted: list[tuple[Path, str]] = []
    for path in files:
        parsed = parse_file_name(path.name)
        if parsed is None:
            continue
        domain, part = parsed
        if part is None:
            compacted.append((path, domain))
        else:
            parts.setdefault((path.parent, domain), set()).add(part)
    for path, domain in compacted:
        live = parts.get((path.parent, domain))
        if not live:
            continue
        meta = pq.read_schema(path).metadata or {}
        listed = set(json.loads(meta.get(b"web_index.superseded", b"[]")))
        stale = sorted(listed & live)
        if stale:
            raise AssertionError(f"{path} supersedes part files that still exist: {stale[:3]}")
    return len(files)


def batch_table(queries: Sequence[Query]) -> pa.Table:
    """The batch as a table to join: one row per query, window in microseconds."""
    rows: list[dict[str, Any]] = []
    for qi, q in enumerate(queries):
        row: dict[str, Any] = {"qi": qi, "url_key": url_key(q.url), "lo": _NEG, "hi": _POS}
        row.update(near=None, rid=None, calibre=None, strict=False)
        if isinstance(q, PageKey):
            ts = to_us(q.timestamp)
            row.update(lo=ts, hi=ts, rid=q.request_id)
        elif isinstance(q, SimplePageQuery):
            row.update(calibre=q.calibre, strict=q.calibre_strict)
        elif isinstance(q, TimeAwarePageQuery):
            if q.not_before is not None:
                row["lo"] = to_us(q.not_before)
            if q.not_after is not None:
                row["hi"] = to_us(q.not_after)
            if q.timestamp is not None:
                row["near"] = to_us(q.timestamp)
            row.update(calibre=q.calibre, strict=q.calibre_strict)
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=_BATCH_SCHEMA)


def _sql(root: Path, type: RecordType, presence: bool) -> str:
    files = f"read_parquet('{root}/{type.value}/*/*/*.parquet')"
    ts = "timestamp" if type.is_metadata else "attempt_timestamp"
    candidates = f"""
        cand AS (
            SELECT b.qi, f.request_id AS rid, epoch_us(f.{ts}) AS ts,
                   CASE WHEN b.near IS NULL THEN 0 ELSE abs(epoch_us(f.{ts}) - b.near) END AS dist
            FROM {files} f JOIN batch b ON f.url_key = b.url_key
            WHERE epoch_us(f.{ts}) BETWEEN b.lo AND b.hi
              AND (b.rid IS NULL OR f.request_id = b.rid)
              AND (b.calibre IS NULL OR b.rid IS NOT NULL
                   OR (b.strict AND f.fetcher_calibre = b.calibre)
                   OR (NOT b.strict AND f.fetcher_calibre >= b.calibre))
        )"""
    if presence:
        return f"WITH {candidates} SELECT DISTINCT qi FROM cand"
    # Nearest first; equal distance (and no timestamp: all 0) goes to the latest (ts, request_id).
    order = "ORDER BY dist ASC, ts DESC, rid DESC"
    chain_order = "" if type.is_metadata else ", f.chain_index"
    return f"""
        WITH {candidates},
        winners AS (
            SELECT qi, rid FROM (
                SELECT qi, rid, row_number() OVER (PARTITION BY qi {order}) AS rn FROM cand
            ) WHERE rn = 1
        )
        SELECT w.qi, f.* FROM winners w JOIN {files} f ON f.request_id = w.rid
        ORDER BY w.qi{chain_order}
    """


def connect(threads: int | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    if threads:
        con.execute(f"SET threads = {int(threads)}")
    return con


def run(
    con: duckdb.DuckDBPyConnection, root: Path, queries: Sequence[Query], *, presence: bool = False
) -> list[Answer] | list[bool]:
    """Answer a batch of queries of one type with one SQL statement."""
    types = {q.type for q in queries}
    if len(types) != 1:
        raise ValueError(f"one type per batch, got {sorted(t.value for t in types)}")
    type = types.pop()
    con.register("batch", batch_table(queries))
    try:
        relation = con.sql(_sql(root, type, presence))
        # DuckDB 2 renamed fetch_arrow_table() / arrow() to to_arrow_table().
        fetch = getattr(relation, "to_arrow_table", None) or relation.fetch_arrow_table
        result: pa.Table = fetch()
    finally:
        con.unregister("batch")
    if presence:
        hit = set(result.column("qi").to_pylist())
        return [i in hit for i in range(len(queries))]
    return _answers(type, result, len(queries))


def _answers(type: RecordType, table: pa.Table, n: int) -> list[Answer]:
    """Per query: (request_id, rows, crc of the final body or of the state)."""
    out: list[Answer] = [None] * n
    qis: list[Any] = table.column("qi").to_pylist()
    rids: list[Any] = table.column("request_id").to_pylist()
    if type.is_metadata:
        states: list[Any] = table.column("state").to_pylist()
        for qi, rid, state in zip(qis, rids, states, strict=True):
            out[qi] = (rid, 1, zlib.crc32(state.encode()))
        return out
    finals = table.column("is_final").to_pylist()
    bodies = table.column("data").to_pylist() if "data" in table.column_names else [None] * len(qis)
    counts: dict[int, int] = {}
    for qi, rid, final, body in zip(qis, rids, finals, bodies, strict=True):
        counts[qi] = counts.get(qi, 0) + 1
        if final:
            out[qi] = (rid, 0, zlib.crc32(body or b""))
    for qi, count in counts.items():
        answer = out[qi]
        if answer is not None:
            out[qi] = (answer[0], count, answer[2])
    return out
