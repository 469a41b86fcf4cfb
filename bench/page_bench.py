"""One record, one read (issue 38): a body by its page against its row group.

In one run, on the same files: the time to read one record's full row (all
columns, its body included) through the page path (``storage/pages/_reader.py``)
and through the row group (what queries did before), and the size of a
``get`` file written with and without the page settings (body pages of the
default size, the page index), and other page sizes. Then, for one-row-group
files of growing size, the same two reads: where the page path starts to pay is
where ``WriteOptions.paged_min_bytes`` belongs. Results: bench/results/pages.json and .md.

    .venv/bin/python bench/page_bench.py [--records 20000] [--reads 300]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import pyarrow.parquet as pq  # noqa: E402

from synth import BodyMaker  # noqa: E402
from web_index.models import RecordType  # noqa: E402
from web_index.storage import Partition, WriteOptions  # noqa: E402
from web_index.storage._files import write_partition_file  # noqa: E402
from web_index.storage._tables import columns_to_table  # noqa: E402
from web_index.storage.backends import LocalBackend  # noqa: E402
from web_index.storage.pages._reader import body_pages, read_group  # noqa: E402

PARTITION = Partition(RecordType.GET, 2024, 8, "example.com")
# The row-group path of queries before this change: everything off.
UNPAGED = {"paged_min_bytes": 1 << 62}


def bodies_of(kind: str, n: int, mean: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    if kind == "html":  # the store bench's bodies: shared markup, paragraphs from one pool
        maker = BodyMaker(seed, mean / 1024)
        return [maker.body(f"https://example.com/p{i}", i) for i in range(n)]
    # "text": words drawn at random from a large vocabulary, little shared between bodies
    vocab = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 10)))
        for _ in range(50000)
    ]
    out = []
    for _ in range(n):
        size = int(rng.uniform(0.5, 1.5) * mean)
        words: list[str] = []
        length = 0
        while length < size:
            w = rng.choice(vocab)
            words.append(w)
            length += len(w) + 1
        out.append(" ".join(words).encode()[:size])
    return out


def table_of(bodies: list[bytes]) -> Any:
    n = len(bodies)
    urls = [f"https://example.com/p{i:07d}" for i in range(n)]
    ts = [1722513600000000 + i for i in range(n)]
    return columns_to_table(
        RecordType.GET,
        dict(
            url_key=urls,
            url=urls,
            attempt_timestamp=ts,
            request_id=[str(uuid.UUID(int=i + 1)) for i in range(n)],
            chain_index=[0] * n,
            request_url=urls,
            status_code=[200] * n,
            headers=['{"content-type": "text/html; charset=utf-8", "server": "nginx"}'] * n,
            data=bodies,
            timestamp=ts,
            retry_attempt=[0] * n,
            is_final=[True] * n,
            fetcher_name=["bench"] * n,
            fetcher_version=["1"] * n,
            fetcher_calibre=[10] * n,
        ),
    )


def write(root: Path, table: Any, **options: Any) -> tuple[LocalBackend, int, float]:
    """The file written (size, and ms to write it: the best of three, as a flush or compaction pays)."""
    (root / "get/2024/08").mkdir(parents=True, exist_ok=True)
    backend = LocalBackend(root)
    took = []
    for _ in range(3):
        t0 = time.perf_counter()
        size = write_partition_file(backend, PARTITION, table, WriteOptions(**options), part=None)
        took.append((time.perf_counter() - t0) * 1000)
    return backend, size, round(min(took), 1)


def row_by_group(handle: pq.ParquetFile, g: int, r: int) -> dict[str, Any]:
    return handle.read_row_group(g, use_threads=False).slice(r, 1).to_pylist()[0]


def row_by_page(handle: pq.ParquetFile, g: int, r: int) -> dict[str, Any]:
    table, bodies = read_group(handle, g, [r])
    assert bodies is not None
    row = table.slice(r, 1).to_pylist()[0]
    row["data"] = bodies[r]
    return row


Read = Callable[[pq.ParquetFile, int, int], dict[str, Any]]


def timed(paths: list[tuple[LocalBackend, Read]], picks: list[tuple[int, int]]) -> list[dict[str, float]]:
    """Median ms of one record read with a fresh open (what one query pays) and
    warm (the handle kept), for each (file, way of reading) in ``paths``; the
    ways alternate pick by pick, in turn first, so that the load of a shared
    machine falls on both alike."""
    cold: list[list[float]] = [[] for _ in paths]
    warm: list[list[float]] = [[] for _ in paths]
    for n, (g, r) in enumerate(picks):
        order = list(range(len(paths)))
        if n % 2:
            order.reverse()
        for k in order:
            backend, read = paths[k]
            t0 = time.perf_counter()
            handle = backend.open_parquet(PARTITION.compacted_path)
            read(handle, g, r)
            t1 = time.perf_counter()
            read(handle, g, r)
            t2 = time.perf_counter()
            cold[k].append((t1 - t0) * 1000)
            warm[k].append((t2 - t1) * 1000)
    return [
        {"cold_ms": round(statistics.median(c), 3), "warm_ms": round(statistics.median(w), 3)}
        for c, w in zip(cold, warm, strict=True)
    ]


def picks_of(handle: pq.ParquetFile, reads: int, seed: int = 2) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    meta = handle.metadata
    out = []
    for _ in range(reads):
        g = rng.randrange(meta.num_row_groups)
        out.append((g, rng.randrange(meta.row_group(g).num_rows)))
    return out


def compare(root: Path, name: str, bodies: list[bytes], reads: int, **layout: Any) -> dict[str, Any]:
    table = table_of(bodies)
    paged_backend, paged_size, paged_ms = write(root / f"{name}-paged", table, **layout)
    plain_backend, plain_size, plain_ms = write(root / f"{name}-plain", table, **{**layout, **UNPAGED})
    paged = paged_backend.open_parquet(PARTITION.compacted_path)
    assert body_pages(paged) is not None
    picks = picks_of(paged, reads)
    for g, r in picks[:20]:  # the same row both ways
        plain = plain_backend.open_parquet(PARTITION.compacted_path)
        assert row_by_page(paged, g, r) == row_by_group(plain, g, r)
    pages = body_pages(paged)
    assert pages is not None
    sizes = [p.size for g in range(paged.metadata.num_row_groups) for p in pages._index(g)]
    by_group, by_page = timed([(plain_backend, row_by_group), (paged_backend, row_by_page)], picks)
    return {
        "case": name,
        "records": len(bodies),
        "body_bytes": sum(map(len, bodies)),
        "row_groups": paged.metadata.num_row_groups,
        "body_pages": len(sizes),
        "page_kb_median": round(statistics.median(sizes) / 1024, 1),
        "page_kb_max": round(max(sizes) / 1024, 1),
        "file_bytes_paged": paged_size,
        "file_bytes_unpaged": plain_size,
        "size_ratio": round(paged_size / plain_size, 4),
        "write_ms_paged": paged_ms,
        "write_ms_unpaged": plain_ms,
        "row_group_path": by_group,
        "page_path": by_page,
        "speedup_cold": round(by_group["cold_ms"] / by_page["cold_ms"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--reads", type=int, default=300)
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for kind in ("text", "html"):
            bodies = bodies_of(kind, args.records, 2048)
            # The owner's case: every body in one row group; then the store's own row groups.
            one = {"body_row_group_rows": args.records, "group_max_bytes": 1 << 40}
            rows.append(compare(root, f"{kind}, one row group", bodies, args.reads, **one))
            print(rows[-1], flush=True)
            rows.append(compare(root, f"{kind}, store row groups", bodies, args.reads))
            print(rows[-1], flush=True)
            # The page size: the trade between bytes and one body's read.
            for page_kb in (8, 16, 32):  # the default is 64
                layout = {"body_page_bytes": page_kb << 10}
                rows.append(
                    compare(
                        root, f"{kind}, store row groups, {page_kb} KB pages", bodies, args.reads, **layout
                    )
                )
                print(rows[-1], flush=True)
        # The threshold: one-row-group files of growing size (what a flush or a small compaction writes).
        for kb in (32, 64, 128, 256, 512, 1024):
            bodies = bodies_of("text", max(1, kb // 2), 2048, seed=kb)
            rows.append(compare(root, f"text, {kb} KB file", bodies, args.reads, paged_min_bytes=0))
            print(rows[-1], flush=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": commit.stdout.strip(),
        "cpus": os.cpu_count(),
        "rows": rows,
    }
    out_dir = HERE / "results"
    out_dir.mkdir(exist_ok=True)
    (out_dir / "pages.json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "| case | row groups | body pages (median / max KB) | file paged / unpaged | size | "
        "write ms paged / unpaged | one record by row group (open+read / warm) | by page (open+read / warm) "
        "| speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        g, p = r["row_group_path"], r["page_path"]
        pages = f"{r['body_pages']} ({r['page_kb_median']} / {r['page_kb_max']})"
        sizes = f"{r['file_bytes_paged'] / 1e6:.3f} / {r['file_bytes_unpaged'] / 1e6:.3f} MB"
        lines.append(
            f"| {r['case']} | {r['row_groups']} | {pages} | {sizes} | {r['size_ratio']:.3f} "
            f"| {r['write_ms_paged']} / {r['write_ms_unpaged']} "
            f"| {g['cold_ms']} / {g['warm_ms']} ms | {p['cold_ms']} / {p['warm_ms']} ms "
            f"| {r['speedup_cold']}x |"
        )
    head = f"Run {result['date']} at {result['commit']} ({result['cpus']} CPUs, shared)\n\n"
    (out_dir / "pages.md").write_text(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
