"""The insert buffer gives its space back after flushes (it grew to the largest
backlog it ever held and stayed there: 525 MB for an emptied buffer), and
compacting it loses and changes nothing."""

from __future__ import annotations

import os
import random
from datetime import timedelta
from pathlib import Path

from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex
from web_index.models import SimplePageQuery
from web_index.storage import MethodPartition

MiB = 1 << 20


def _buffer_bytes(store: Path) -> int:
    base = store / "_buffer" / "buffer.sqlite3"
    return sum(os.path.getsize(f"{base}{s}") for s in ("", "-wal") if os.path.exists(f"{base}{s}"))


def test_flushing_gives_the_space_back_and_keeps_every_record(store_path: Path) -> None:
    rng = random.Random(5)
    urls = [f"https://www.d{n % 6}.com/{n}" for n in range(3000)]
    with WebIndex(store_path, policy=FlushPolicy(compact_parts=0)) as idx:
        for start in range(0, len(urls), 500):
            idx.insert_many(
                [
                    attempt(u, T0 + timedelta(days=n % 60), body=rng.randbytes(20_000))
                    for n, u in enumerate(urls[start : start + 500], start)
                ]
            )
        full = _buffer_bytes(store_path)
        assert full > 50 * MiB
        # Flush all but one partition: most of the file is free now, the rest still buffered.
        parts = sorted(idx._store.buffer.partitions())
        kept = parts[0]
        idx._store.flush([p for p in parts if p != kept])
        live = sum(n for mp, (n, _s, _b) in idx._store.buffer.counts().items() if mp == kept)
        assert live > 0
        partly = _buffer_bytes(store_path)
        assert partly < full // 2, (full, partly)
        answers = idx.query([SimplePageQuery(url=u) for u in urls])
        assert all(a is not None and a.url == u for a, u in zip(answers, urls, strict=True))
        idx.flush()
        assert _buffer_bytes(store_path) < 1 * MiB, _buffer_bytes(store_path)
        again = idx.query([SimplePageQuery(url=u) for u in urls])
        assert [a.request_id for a in again if a] == [a.request_id for a in answers if a]
        # The compacted buffer takes inserts as before.
        key = idx.insert(*attempt("https://www.d0.com/after", T0))
        assert idx.query([key])[0] is not None
    assert isinstance(kept, MethodPartition)
