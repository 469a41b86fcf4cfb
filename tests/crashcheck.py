"""Checks shared by the crash and concurrency tests."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from tests._worker import body_of
from web_index import WebIndex
from web_index.models import Page, PageKey, RecordType
from web_index.storage._files import visible_files

ROOT = Path(__file__).resolve().parent.parent


def parse_keys(lines: list[str]) -> list[tuple[PageKey, int]]:
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data: dict[str, Any] = json.loads(line)
        except ValueError:
            continue  # the last line may be cut by the kill: it was never acknowledged
        hops = data.pop("hops")
        out.append((PageKey.from_dict(data), hops))
    return out


def physical_counts(index: WebIndex) -> Counter[tuple[str, str]]:
    """How often each (type, request_id) is visible in files and the buffer."""
    store = index._store
    counts: Counter[tuple[str, str]] = Counter()
    for mp, _fid, attempt in store.buffer.iter_all():
        counts[(mp.method.metadata.value, attempt.request_id)] += 1
        if attempt.responses:
            counts[(mp.method.value, attempt.request_id)] += 1
    for type in RecordType:
        for year, month in store.months(type):
            for files in store.month_files(type, year, month).values():
                opened, _dead = visible_files(store.backend, files)
                for _f, handle in opened:
                    table = handle.read(
                        columns=["request_id"] + ([] if type.is_metadata else ["chain_index"])
                    )
                    if type.is_metadata:
                        rids = set(table.column("request_id").to_pylist())
                    else:
                        rids = {
                            r
                            for r, c in zip(
                                table.column("request_id").to_pylist(),
                                table.column("chain_index").to_pylist(),
                                strict=True,
                            )
                            if c == 0
                        }
                    for rid in rids:
                        counts[(type.value, rid)] += 1
    return counts


def check_acknowledged(store: Path, acked: list[tuple[PageKey, int]]) -> None:
    """Every acknowledged attempt is found, exactly once, and verify is clean."""
    with WebIndex(store) as index:
        check_index(index, acked)


def check_index(index: WebIndex, acked: list[tuple[PageKey, int]]) -> None:
    """:func:`check_acknowledged` on an open index (any backend and buffer)."""
    report = index.verify()
    assert report.ok, report.problems
    results = index.query([k for k, _ in acked])
    for (key, hops), page in zip(acked, results, strict=True):
        assert page is not None, f"acknowledged {key} lost"
        assert page.request_id == key.request_id
        if isinstance(page, Page):
            assert len(page.responses) == hops, key
            if page.responses:  # its body whole, whether stored or referred to
                assert page.responses[-1].data == body_of(page.url), key
    # Recovery (redoing interrupted flushes, removing absorbed parts) and
    # then the physical count: each record stored exactly once.
    index.flush()
    index.compact()
    counts = physical_counts(index)
    for key, _ in acked:
        assert counts[(key.type.value, key.request_id)] == 1, (
            key,
            counts[(key.type.value, key.request_id)],
        )
        assert counts[(key.type.metadata.value, key.request_id)] == 1, key
    assert all(v == 1 for v in counts.values()), [k for k, v in counts.items() if v != 1]
    report = index.verify()
    assert report.ok and not report.notes, (report.problems, report.notes)
