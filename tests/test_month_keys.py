"""The month index's keys file, searched in place: every lookup is the reference's, and a
damaged, stale or missing file costs speed (or is an error naming it), never an answer."""

from __future__ import annotations

import mmap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.test_index import _answers, _populate, _queries, _without_index
from web_index import WebIndex
from web_index.errors import CorruptFileError
from web_index.storage.indexes import MonthIndex, _month_build, _month_format, _month_keys, _month_open
from web_index.storage.indexes._month_keys import KeysFile, encode_keys

_EDGES = [b"\x00" * 16, b"\xff" * 16, b"a" + b"\x00" * 15, b"a" + b"\x00" * 14 + b"\x01", b"\x80" * 16]
_LOOKUP = pa.schema([f for f in _month_format.schema() if f.name in _month_format.LOOKUP_COLUMNS])

Row = tuple[bytes, int, bytes, int, int, int, int]


def _table(rows: list[Row]) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [[] for _ in _LOOKUP]
    return pa.table([pa.array(c, type=f.type) for c, f in zip(columns, _LOOKUP, strict=True)], schema=_LOOKUP)


def _opened(tmp: Path, data: bytes) -> KeysFile:
    path = tmp / "k.keys"
    path.write_bytes(data)
    with path.open("rb") as fh:
        return KeysFile(str(path), mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))


@st.composite
def _index_rows(draw: st.DrawFn) -> tuple[list[Row], list[bytes]]:
    pool = draw(
        st.lists(
            st.one_of(st.sampled_from(_EDGES), st.binary(min_size=16, max_size=16)), max_size=12, unique=True
        )
    )
    rows: list[Row] = []
    for key in pool:
        for _ in range(draw(st.integers(0, 9))):  # runs long enough to cross chunk ends
            rows.append(
                (
                    key,
                    draw(st.integers(-(2**62), 2**62)),
                    draw(st.binary(min_size=16, max_size=16)),
                    draw(st.integers(0, 255)),
                    draw(st.integers(0, 2**32 - 1)),
                    draw(st.integers(0, 2**32 - 1)),
                    draw(st.integers(0, 2**32 - 1)),
                )
            )
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    asked = draw(st.lists(st.sampled_from([*pool, *_EDGES, b"\x7f" * 16]), unique=True))
    return rows, asked


def _reference(rows: list[Row], asked: list[bytes]) -> list[Row]:
    return sorted(r for r in rows if r[0] in set(asked))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(drawn=_index_rows(), chunk_rows=st.integers(1, 8))
def test_a_lookup_finds_exactly_the_rows_of_its_keys(
    drawn: tuple[list[Row], list[bytes]], chunk_rows: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows, asked = drawn
    monkeypatch.setattr(_month_keys, "CHUNK_ROWS", chunk_rows)
    keys = _opened(tmp_path, encode_keys(_table(rows), (1, "v"), "", None))
    assert sorted(keys.lookup(asked)) == _reference(rows, asked)


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(drawn=_index_rows(), chunk_rows=st.integers(1, 8), where=st.floats(0, 1), bit=st.integers(0, 7))
def test_a_flipped_bit_is_an_error_or_nothing_never_a_wrong_answer(
    drawn: tuple[list[Row], list[bytes]],
    chunk_rows: int,
    where: float,
    bit: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rows, asked = drawn
    monkeypatch.setattr(_month_keys, "CHUNK_ROWS", chunk_rows)
    data = bytearray(encode_keys(_table(rows), (1, "v"), "", None))
    at = min(int(where * len(data)), len(data) - 1)
    data[at] ^= 1 << bit
    try:
        found = sorted(_opened(tmp_path, bytes(data)).lookup(asked))
    except CorruptFileError as exc:
        assert "keys file" in str(exc)
        return
    assert found == _reference(rows, asked)


def test_a_truncated_or_foreign_file_is_refused_when_opened(tmp_path: Path) -> None:
    data = encode_keys(_table([(b"k" * 16, 1, b"r" * 16, 10, 0, 0, 1)]), (1, "v"), "", None)
    for bad in (data[:-1], data + b"\0", b"PAR1" + data[4:]):
        with pytest.raises(CorruptFileError):
            _opened(tmp_path, bad)


def _store(tmp_path: Path) -> tuple[Path, list[Any]]:
    root = tmp_path / "store"
    keys = _populate(root, seed=11, n=150)
    with WebIndex(root) as idx:
        idx.flush()
        idx.compact()
    return root, _queries(keys, seed=12)


def _opened_indexes() -> list[MonthIndex]:
    return list(_month_open._OPEN.values())


def test_batches_are_answered_from_the_keys_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, queries = _store(tmp_path)
    parquet = sorted(p.with_suffix("") for p in (root / "_index").rglob("*.parquet"))
    assert parquet and parquet == sorted(p.with_suffix("") for p in (root / "_index").rglob("*.keys"))
    expected = _without_index(root, tmp_path, queries)
    monkeypatch.setattr(_month_open, "_OPEN", {})
    assert _answers(root, queries) == expected
    opened = _opened_indexes()
    assert opened and all(ix.keys is not None and ix._table is None for ix in opened)


@pytest.mark.parametrize("damage", ["flipped", "another build", "deleted"])
def test_a_damaged_stale_or_missing_keys_file_costs_speed_not_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    root, queries = _store(tmp_path)
    expected = _without_index(root, tmp_path, queries)
    for path in (root / "_index").rglob("*.keys"):
        data = bytearray(path.read_bytes())
        if damage == "flipped":
            data[len(data) // 2] ^= 0x10  # in the columns: found when a lookup reads that chunk
            path.write_bytes(bytes(data))
        elif damage == "another build":
            table = pa.parquet.read_table(path.with_suffix(".parquet"), columns=_month_format.LOOKUP_COLUMNS)
            path.write_bytes(encode_keys(table, (1, "not-this-build"), "", None))
        else:
            path.unlink()
    monkeypatch.setattr(_month_open, "_OPEN", {})
    assert _answers(root, queries) == expected
    with WebIndex(root, read_only=True) as idx:
        report = idx.verify()
    said = " ".join(f.message for f in [*report.problems, *report.notes])
    assert ".keys" in said
    if damage != "flipped":  # a stale or missing file: a note, and never used
        assert not any(".keys" in f.message for f in report.problems)
        assert all(ix.keys is None for ix in _opened_indexes())
    with WebIndex(root) as idx:
        idx.compact()  # writes them again
    monkeypatch.setattr(_month_open, "_OPEN", {})
    assert _answers(root, queries) == expected
    assert all(ix.keys is not None for ix in _opened_indexes())
    with WebIndex(root, read_only=True) as idx:
        assert not [f for f in [*idx.verify().problems, *idx.verify().notes] if ".keys" in f.message]


def test_an_index_written_before_keys_files_gains_one_with_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        m.setattr(_month_format, "wants_keys", lambda backend: False)
        m.setattr(_month_build, "wants_keys", lambda backend: False)
        root, queries = _store(tmp_path)
    assert not list((root / "_index").rglob("*.keys"))
    before = {p: pa.parquet.read_table(p) for p in (root / "_index").rglob("*.parquet")}
    expected = _without_index(root, tmp_path, queries)
    with WebIndex(root) as idx:
        idx.compact()
    after = {p: pa.parquet.read_table(p) for p in (root / "_index").rglob("*.parquet")}
    assert {p: t.to_pylist() for p, t in before.items()} == {p: t.to_pylist() for p, t in after.items()}
    assert len(list((root / "_index").rglob("*.keys"))) == len(after)
    monkeypatch.setattr(_month_open, "_OPEN", {})
    assert _answers(root, queries) == expected
