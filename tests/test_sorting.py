"""Compaction's sort and deduplication against a plain reference: every record
once, in the sort order of its type, whatever order and repeats it came in."""

from __future__ import annotations

import functools
import uuid

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import T0, attempt
from web_index.ingest import validate_attempt
from web_index.models import RecordType
from web_index.storage._files import WriteOptions
from web_index.storage._merge import merge_sorted
from web_index.storage._schema import SORT_KEYS
from web_index.storage._tables import rows_to_table, sort_dedupe

_RECORDS = []
for n in range(6):
    meta, responses = validate_attempt(*attempt(f"https://a.example.com/{n % 3}", T0, hops=1 + n % 3)).rows()
    _RECORDS.append((meta, responses))


@given(
    picks=st.lists(st.integers(0, len(_RECORDS) - 1), min_size=1, max_size=20),
    type=st.sampled_from([RecordType.GET, RecordType.GET_METADATA]),
    data=st.data(),
)
@settings(max_examples=200, deadline=None)
def test_sorted_unique_matches_the_reference(picks: list[int], type: RecordType, data: st.DataObject) -> None:
    rows = []
    for i in picks:
        meta, responses = _RECORDS[i]
        rows.extend([meta] if type.is_metadata else responses)
    rows = data.draw(st.permutations(rows))
    got = sort_dedupe(type, rows_to_table(type, rows)).to_pylist()
    keys = SORT_KEYS[type]
    identity = keys[2:]
    unique = {tuple(r[k] for k in identity): r for r in rows}
    want = sorted(unique.values(), key=lambda r: tuple(r[k] for k in keys))
    assert got == rows_to_table(type, want).to_pylist()  # every column, every row
    assert len({uuid.UUID(r["request_id"]) for r in got}) == len({r["request_id"] for r in want})


@given(
    picks=st.lists(st.lists(st.integers(0, len(_RECORDS) - 1), max_size=8), min_size=1, max_size=5),
    chunk=st.integers(1, 4),
    rows=st.integers(1, 5),
    type=st.sampled_from([RecordType.GET, RecordType.GET_METADATA]),
    min_bytes=st.sampled_from([0, 2000, 10_000]),
    max_bytes=st.sampled_from([1 << 30, 1500, 6000]),
)
@settings(max_examples=300, deadline=None)
def test_streaming_merge_matches_sorting_everything_at_once(
    picks: list[list[int]], chunk: int, rows: int, type: RecordType, min_bytes: int, max_bytes: int
) -> None:
    """Sorted inputs (records repeated within and across them), read a few rows
    at a time, merge into exactly what sorting their concatenation gives."""
    inputs = []
    everything = []
    for pick in picks:
        recs = []
        for i in pick:
            meta, responses = _RECORDS[i]
            recs.extend([meta] if type.is_metadata else responses)
        table = sort_dedupe(type, rows_to_table(type, recs)) if recs else rows_to_table(type, [])
        everything.append(table)
        inputs.append([table.slice(s, chunk) for s in range(0, table.num_rows, chunk)])
    options = WriteOptions(
        row_group_rows=rows, body_row_group_rows=rows, group_min_bytes=min_bytes, group_max_bytes=max_bytes
    )
    out = list(merge_sorted(type, inputs, functools.partial(options.group_rows, type)))
    assert all(t.num_rows > 0 for t in out)
    if not min_bytes and max_bytes > 1 << 20:
        assert all(t.num_rows == rows for t in out[:-1]) and all(t.num_rows <= rows for t in out)
    if max_bytes > 1 << 20:  # a floor in bytes only ever adds rows to a row group
        assert all(t.num_rows >= rows for t in out[:-1])
    got = pa.concat_tables(out).to_pylist() if out else []
    want = sort_dedupe(type, pa.concat_tables(everything)).to_pylist()
    assert got == want
