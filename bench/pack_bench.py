"""Search packs: build_pack, compress_pack and searches through a PackReader,
next to the floor in the same run: the bare FTS5 query (``MATCH ... ORDER BY
bm25 LIMIT 10``, rowids only, no count, snippets or query parsing) on the
same pack and queries.

    .venv/bin/python bench/pack_bench.py [--pages 100000]

Pages are synthetic: ~2 KB of text each (and a short title) drawn from a
vocabulary of made-up words with Zipf frequencies (s = 1), so that common
words have long posting lists, as in real text. Queries are one or two words
drawn from the same law, so some hit most pages. Results: a table on stdout
and, if bench/results exists, bench/results/pack_bench.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import sqlite3
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from web_index.search import PackReader, PageText, build_pack, compress_pack, decompress_pack, fts_query

HERE = Path(__file__).resolve().parent
_LETTERS = "abcdefghijklmnopqrstuvwxyzéü"


def vocabulary(rng: random.Random, size: int) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choices(_LETTERS, k=rng.randint(2, 10))))
    return sorted(words, key=lambda w: rng.random())


def pages(n: int, seed: int, vocab: list[str], text_bytes: int) -> list[PageText]:
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1 / (i + 1) for i in range(len(vocab))))
    t0 = datetime(2024, 1, 1, tzinfo=UTC)
    out = []
    words_per_page = text_bytes // 7  # ~6 letters and a space a word
    for i in range(n):
        text = " ".join(rng.choices(vocab, cum_weights=cum, k=words_per_page))
        title = " ".join(rng.choices(vocab, cum_weights=cum, k=rng.randint(3, 8)))
        url = f"https://site.example/{i // 1000}/page-{i}.html"
        out.append(PageText(url=url, title=title, text=text, fetched=t0 + timedelta(seconds=i), lang="xx"))
    return out


def queries(n: int, seed: int, vocab: list[str]) -> list[str]:
    rng = random.Random(seed)
    cum = list(itertools.accumulate(1 / (i + 1) for i in range(len(vocab))))
    return [" ".join(rng.choices(vocab, cum_weights=cum, k=rng.choice((1, 1, 2)))) for _ in range(n)]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--pages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--vocabulary", type=int, default=50_000)
    ap.add_argument("--text-bytes", type=int, default=2048)
    args = ap.parse_args()
    rng = random.Random(1)
    vocab = vocabulary(rng, args.vocabulary)
    t = time.perf_counter()
    texts = pages(args.pages, 2, vocab, args.text_bytes)  # generated before timing the build
    gen_s = time.perf_counter() - t
    text_bytes = sum(len(p.text.encode()) for p in texts)
    qs = queries(args.queries, 3, vocab)
    with tempfile.TemporaryDirectory() as tmp:
        pack, packed, unpacked = Path(tmp, "site.db"), Path(tmp, "site.db.zst"), Path(tmp, "copy.db")
        t = time.perf_counter()
        info = build_pack(pack, "site.example", texts, watermark="bench")
        build_s = time.perf_counter() - t
        del texts
        t = time.perf_counter()
        packed_bytes = compress_pack(pack, packed)
        compress_s = time.perf_counter() - t
        t = time.perf_counter()
        decompress_pack(packed, unpacked)
        decompress_s = time.perf_counter() - t
        pack_bytes = pack.stat().st_size
        reader_s: list[float] = []
        floor_s: list[float] = []
        hits = 0
        floor = sqlite3.connect(pack.absolute().as_uri() + "?mode=ro&immutable=1", uri=True)
        floor_sql = "SELECT rowid FROM pages_fts WHERE pages_fts MATCH ? ORDER BY bm25(pages_fts) LIMIT 10"
        with PackReader(pack) as reader:
            for q in qs[:20]:  # warm both: page cache and statement caches
                reader.search(q)
                floor.execute(floor_sql, (fts_query(q),)).fetchall()
            for q in qs:  # alternated, so that neither side gets a warmer cache
                t = time.perf_counter()
                page = reader.search(q)
                reader_s.append(time.perf_counter() - t)
                hits += page.total
                expression = fts_query(q)
                t = time.perf_counter()
                floor.execute(floor_sql, (expression,)).fetchall()
                floor_s.append(time.perf_counter() - t)
        floor.close()
    ms = 1000
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE
        ).stdout.strip(),
        "machine": platform.platform(),
        "cpus": os.cpu_count(),
        "sqlite": sqlite3.sqlite_version,
        "pages": info.pages,
        "text_mib": round(text_bytes / 2**20, 1),
        "vocabulary": args.vocabulary,
        "generate_s": round(gen_s, 2),
        "build_s": round(build_s, 2),
        "build_pages_per_s": round(info.pages / build_s),
        "pack_mib": round(pack_bytes / 2**20, 1),
        "compressed_mib": round(packed_bytes / 2**20, 1),
        "compress_s": round(compress_s, 2),
        "decompress_s": round(decompress_s, 2),
        "queries": len(qs),
        "mean_total_hits": round(hits / len(qs)),
        "search_p50_ms": round(statistics.median(reader_s) * ms, 3),
        "search_p99_ms": round(percentile(reader_s, 99) * ms, 3),
        "floor_p50_ms": round(statistics.median(floor_s) * ms, 3),
        "floor_p99_ms": round(percentile(floor_s, 99) * ms, 3),
    }
    rows = [
        ("build_pack", f"{build_s:.2f} s",
         f"{result['build_pages_per_s']:,} pages/s, {text_bytes / 2**20 / build_s:.1f} MiB of text/s"),
        ("pack size", f"{result['pack_mib']} MiB", f"text {result['text_mib']} MiB"),
        ("compress_pack", f"{compress_s:.2f} s",
         f"{result['compressed_mib']} MiB ({pack_bytes / packed_bytes:.1f}x smaller)"),
        ("decompress_pack", f"{decompress_s:.2f} s", ""),
        ("search p50 / p99", f"{result['search_p50_ms']} / {result['search_p99_ms']} ms",
         "PackReader.search, limit 10, with total and snippets"),
        ("floor p50 / p99", f"{result['floor_p50_ms']} / {result['floor_p99_ms']} ms",
         "bare MATCH ... ORDER BY bm25 LIMIT 10"),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    print(f"{info.pages:,} pages, {result['mean_total_hits']:,} hits a query on average")
    for name, figure, note in rows:
        print(f"{name:<{width}}  {figure:>18}  {note}")
    if (HERE / "results").is_dir():
        (HERE / "results" / "pack_bench.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
