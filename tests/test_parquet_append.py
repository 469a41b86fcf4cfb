"""Parquet files joined by their bytes (``storage.pages._append``): what a query file's
workers write apart becomes one file, the file one writer would have written."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from web_index.storage import append_parquet
from web_index.storage.pages._append import _footer, _write_struct
from web_index.storage.pages._format import ThriftError

_SCHEMA = pa.schema(
    [
        ("n", pa.int64()),
        ("s", pa.string()),
        ("b", pa.binary()),
        ("t", pa.timestamp("us", tz="UTC")),
        ("l", pa.list_(pa.int32())),
        ("m", pa.map_(pa.string(), pa.string())),
        ("r", pa.struct([("x", pa.float64()), ("y", pa.bool_())])),
    ]
)


@st.composite
def _rows(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(min_value=1, max_value=60))
    maybe = st.none() | st.text(max_size=12)
    return pa.table(
        {
            "n": draw(st.lists(st.integers(-(2**62), 2**62) | st.none(), min_size=n, max_size=n)),
            "s": draw(st.lists(maybe, min_size=n, max_size=n)),
            "b": draw(st.lists(st.none() | st.binary(max_size=40), min_size=n, max_size=n)),
            "t": [None if k % 5 == 0 else k * 1_000_003 for k in range(n)],
            "l": draw(st.lists(st.none() | st.lists(st.integers(-9, 9), max_size=4), min_size=n, max_size=n)),
            "m": draw(
                st.lists(st.lists(st.tuples(st.text(max_size=3), maybe), max_size=3), min_size=n, max_size=n)
            ),
            "r": draw(
                st.lists(
                    st.none() | st.fixed_dictionaries({"x": st.floats(allow_nan=False), "y": st.booleans()}),
                    min_size=n,
                    max_size=n,
                )
            ),
        },
        schema=_SCHEMA,
    )


def _write(path: Path, groups: list[pa.Table], options: dict[str, Any]) -> None:
    with pq.ParquetWriter(path, _SCHEMA, **options) as writer:
        for group in groups:
            writer.write_table(group, row_group_size=max(1, group.num_rows))


_OPTIONS = st.fixed_dictionaries(
    {
        "compression": st.sampled_from(["zstd", "snappy", "none", "lz4"]),
        "use_dictionary": st.booleans(),
        "write_statistics": st.booleans(),
        "data_page_version": st.sampled_from(["1.0", "2.0"]),
        "data_page_size": st.sampled_from([64, 1 << 20]),
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(groups=st.lists(_rows(), min_size=1, max_size=6), cuts=st.data(), options=_OPTIONS)
def test_pieces_appended_are_the_file_one_writer_writes(
    tmp_path: Path, groups: list[pa.Table], cuts: st.DataObject, options: dict[str, Any]
) -> None:
    """Row groups written to several files, appended in order: byte for byte the file that
    one writer of the same options writes with the same row groups, its footer included."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    _write(work / "one.parquet", groups, options)
    at = sorted(cuts.draw(st.sets(st.integers(1, len(groups) - 1))) if len(groups) > 1 else set())
    pieces = [groups[lo:hi] for lo, hi in zip([0, *at], [*at, len(groups)], strict=True)]
    paths = [work / f"piece-{n}.parquet" for n in range(len(pieces))]
    for piece, path in zip(pieces, paths, strict=True):
        _write(path, piece, options)
    append_parquet(paths[0], paths[1:])
    assert paths[0].read_bytes() == (work / "one.parquet").read_bytes()
    assert [p.name for p in sorted(work.iterdir())] == ["one.parquet", "piece-0.parquet"]  # pieces removed


def test_a_footer_read_and_written_unchanged_is_the_same_bytes(tmp_path: Path) -> None:
    table = pa.table({"n": list(range(100)), "s": [str(k) * (k % 7) for k in range(100)]})
    pq.write_table(table, tmp_path / "f.parquet", row_group_size=9, write_page_index=True)
    raw = (tmp_path / "f.parquet").read_bytes()
    meta, end = _footer(tmp_path / "f.parquet")
    out = bytearray()
    _write_struct(meta, out)
    assert bytes(out) == raw[end:-8]


def test_a_piece_with_a_page_index_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    """A page index holds where its pages are (absolute offsets, in bytes that are copied,
    not rewritten): such a piece is refused before anything is written."""
    pq.write_table(pa.table({"n": list(range(30))}), tmp_path / "a.parquet", write_page_index=True)
    pq.write_table(pa.table({"n": [1, 2]}), tmp_path / "b.parquet")
    pq.write_table(pa.table({"n": [3]}), tmp_path / "c.parquet", write_page_index=True)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r"c\.parquet: a page index"):
        append_parquet(tmp_path / "a.parquet", [tmp_path / "b.parquet", tmp_path / "c.parquet"])
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
    append_parquet(tmp_path / "a.parquet", [tmp_path / "b.parquet"])  # the first file's own stays where it is
    assert pq.read_table(tmp_path / "a.parquet").column("n").to_pylist() == [*range(30), 1, 2]


def test_a_piece_that_is_not_parquet_is_named(tmp_path: Path) -> None:
    pq.write_table(pa.table({"n": [1]}), tmp_path / "a.parquet")
    (tmp_path / "b.parquet").write_bytes(b"PAR1 not a footer")
    with pytest.raises(ThriftError, match=r"b\.parquet"):
        append_parquet(tmp_path / "a.parquet", [tmp_path / "b.parquet"])
