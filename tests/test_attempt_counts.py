"""``attempt_counts`` and ``stats`` where the store is between two states: a flush
that wrote its part files but has not yet deleted its rows from the buffer (or died
there), and month indexes whose counts ``verify`` checks against the files."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex
from web_index.models import AttemptMetadata, RecordType
from web_index.storage.indexes import _month_format as _format
from web_index.storage.indexes import _month_open

STATES = ["success", "timeout", "error", "blocked"]


def _fill(index: WebIndex, n: int, start: int = 0) -> None:
    index.insert_many(
        [
            attempt(f"https://{'ab'[i % 2]}.example.org/p{i}", T0 + timedelta(hours=i), state=STATES[i % 4])
            for i in range(start, start + n)
        ]
    )


def _scanned(index: WebIndex) -> Counter[tuple[str, str]]:
    """The reference: every metadata record once, as a scan merges files and buffer."""
    return Counter(
        (kind, str(m.state))
        for kind in ("get-metadata", "head-metadata")
        for m in index.scan(kind)
        if isinstance(m, AttemptMetadata)
    )


def _counted(index: WebIndex) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for c in index.attempt_counts():
        out[(c.type, c.state)] += c.attempts
    return out


@pytest.mark.parametrize("compacted_before", [False, True])
def test_a_flush_caught_between_writing_and_completing_is_counted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compacted_before: bool
) -> None:
    with WebIndex(tmp_path / "s", policy=FlushPolicy(compact_parts=0, max_age_s=10**6)) as index:
        _fill(index, 12)
        if compacted_before:
            index.flush()
            index.compact()  # the month indexes count these
        _fill(index, 9, start=100)
        buffer = index._store.buffer
        monkeypatch.setattr(buffer, "complete", lambda flush_id: None)  # dies before deleting
        index.flush()
        assert sum(buffer.counts().get(mp, (0,))[0] for mp in buffer.counts()) > 0  # still buffered
        want = _scanned(index)
        assert sum(want.values()) == 21
        assert _counted(index) == want


@pytest.mark.parametrize("lie", ["state", "fetcher", "rows"])
def test_verify_finds_a_month_index_whose_counts_lie(tmp_path: Path, lie: str) -> None:
    """stats and the overview trust an index's states, fetchers and row counts for the
    partitions it covers, so verify checks them against the files (a problem, exit 3)."""
    with WebIndex(tmp_path / "s") as index:
        _fill(index, 8)
        index.flush()
        index.compact()
        assert index.verify().ok
        backend = index._store.backend
        month = _month_open.open_month_index(backend, RecordType.GET_METADATA, T0.year, T0.month)
        assert month is not None
        table, covers = month.handle.read(), list(month.covers)
        if lie == "rows":
            covers[0] = covers[0]._replace(rows=covers[0].rows + 1)
        else:
            column = table.column(lie).to_pylist()
            column[0] = "somebody else"
            table = table.set_column(table.schema.get_field_index(lie), lie, pa.array(column, pa.string()))
        _format.write_index(backend, RecordType.GET_METADATA, T0.year, T0.month, table, covers, None)
        problems = [str(p) for p in index.verify().problems]
        assert len(problems) == 1, problems
        said = "1 file(s) miscounted" if lie == "rows" else "1 row(s) pointing wrong"
        assert said in problems[0], problems
