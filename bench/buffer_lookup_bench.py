"""Lookups of a domain whose records wait in the insert buffer, against the same store compacted,
in one run (issue 38: a lookup's cost must not grow with what waits in the buffer).

    .venv/bin/python bench/buffer_lookup_bench.py                   # 113, 2,000 and 10,000 records
    .venv/bin/python bench/buffer_lookup_bench.py --sizes 2000 --profile captures

For each size N, a fresh store gets N successful GET attempts of one domain (``example.com``, one
URL each, over one month, bodies of ``--body-kib`` random bytes), inserted in batches and left in
the SQLite buffer (a policy that never flushes by itself). Each lookup kind is timed on the same
sample of URLs, one lookup at a time, ``--rounds`` rounds (the median round's median lookup shown);
then the store is flushed and compacted, and the same lookups are timed again, and their answers
compared with the buffered ones (they must be equal). Kinds:

- ``captures``: ``WebIndex.captures(url)`` read whole (an exact match: one line), compared by the
  CDX fields of each line (a compacted file's line also holds its place, a buffered one not);
- ``cdx-latest``: ``find_captures`` of ``?url=U&sort=reverse&limit=1`` (what a CDX server does);
- ``cdx-closest``: ``find_captures`` of ``?url=U&closest=TS&limit=1``;
- ``resource``: ``closest_capture`` (the capture, then its record by ``PageKey``, body included:
  what ``/{coll}/{ts}/{url}`` loads);
- ``query-latest``, ``query-closest``, ``query-exact``: ``WebIndex.query`` of one
  ``SimplePageQuery``, ``TimeAwarePageQuery`` (the capture's moment) or ``PageKey``.

Results: ``results/buffer-lookup.json`` and ``.md``. ``--profile KIND``: no timing, a cProfile of
20 lookups of that kind against the buffered store of each size (top functions printed).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _results import save
from web_index import WebIndex, __version__
from web_index.archive import closest_capture, find_captures, parse_cdx_query
from web_index.models import AttemptMetadata, Page, PageKey, Response, SimplePageQuery, TimeAwarePageQuery
from web_index.storage import FlushPolicy, parse_capture_line

HERE = Path(__file__).resolve().parent
T0 = datetime(2024, 5, 1, tzinfo=UTC)
NEVER = FlushPolicy(max_rows=1 << 40, max_bytes=1 << 50, max_age_s=1e12, compact_parts=0)
KINDS = ("captures", "cdx-latest", "cdx-closest", "resource", "query-latest", "query-closest", "query-exact")


def fill(store: Path, n: int, body_bytes: int, seed: int) -> list[tuple[str, datetime, PageKey]]:
    """``n`` attempts of example.com in the buffer: (url, time, key) of each."""
    rng = random.Random(seed)
    out: list[tuple[str, datetime, PageKey]] = []
    with WebIndex(store, policy=NEVER, durable=False) as index:
        for start in range(0, n, 250):
            items = []
            for i in range(start, min(n, start + 250)):
                url = f"https://example.com/page/{i}"
                when = T0 + timedelta(seconds=rng.randrange(28 * 86400))
                meta = AttemptMetadata(
                    state="success", url=url, fetcher_name="bench", fetcher_version="1", fetcher_calibre=10
                )
                response = Response(
                    url=url,
                    request_url=url,
                    status_code=200,
                    headers={"content-type": "text/html; charset=utf-8"},
                    timestamp=when,
                    data=rng.randbytes(body_bytes),
                    is_final=True,
                    fetcher_name="bench",
                    fetcher_version="1",
                    fetcher_calibre=10,
                )
                items.append(("get", url, when, meta, [response]))
            keys = index.insert_many(items)
            out += [(item[1], item[2], key) for item, key in zip(items, keys, strict=True)]
    return out


def lookups(index: WebIndex) -> dict[str, Callable[[str, datetime, PageKey], Any]]:
    """Each kind: a lookup of one URL (its capture's moment, its key), and the answer to compare."""

    def cdx(params: dict[str, str]) -> Any:
        found = find_captures(index, parse_cdx_query({k: [v] for k, v in params.items()}), source="store")
        return [(fields["timestamp"], fields["url"], fields["digest"]) for fields, _ in found]

    def cdx_view(line: str) -> Any:
        # A compacted file's line also holds its record's place (format 2), a buffered one not.
        key, stamp, fields = parse_capture_line(line)
        return (key, stamp, fields.url, fields.mime, fields.status, fields.digest)

    def page(result: Any) -> Any:
        if not isinstance(result, Page):
            return None
        return (
            result.request_id,
            result.timestamp.isoformat(),
            [len(r.data or b"") for r in result.responses],
        )

    def stamp(when: datetime) -> str:
        return when.strftime("%Y%m%d%H%M%S")

    def resource(url: str, when: datetime, key: PageKey) -> Any:
        query = parse_cdx_query({"url": [url], "closest": [stamp(when)]})
        memento = closest_capture(index, query, source="store")
        return None if memento is None else (memento.request_id, len(memento.response.data or b""))

    return {
        "captures": lambda url, when, key: [cdx_view(line) for line in index.captures(url)],
        "cdx-latest": lambda url, when, key: cdx({"url": url, "sort": "reverse", "limit": "1"}),
        "cdx-closest": lambda url, when, key: cdx({"url": url, "closest": stamp(when), "limit": "1"}),
        "resource": resource,
        "query-latest": lambda url, when, key: page(index.query([SimplePageQuery(url=url)])[0]),
        "query-closest": lambda url, when, key: page(
            index.query([TimeAwarePageQuery(url=url, timestamp=when)])[0]
        ),
        "query-exact": lambda url, when, key: page(index.query([key])[0]),
    }


def timed(
    store: Path, sample: list[tuple[str, datetime, PageKey]], kinds: list[str], rounds: int
) -> tuple[dict[str, dict[str, Any]], dict[str, list[Any]]]:
    """Per kind: the median lookup's time (ms) of each round, and the answers of the first round."""
    times: dict[str, dict[str, Any]] = {}
    answers: dict[str, list[Any]] = {}
    with WebIndex(store, read_only=True) as index:
        run = lookups(index)
        for kind in kinds:
            fn = run[kind]
            for url, when, key in sample[:5]:  # warm-up
                fn(url, when, key)
            medians = []
            for r in range(rounds):
                seconds = []
                got = []
                for url, when, key in sample:
                    t = time.perf_counter()
                    got.append(fn(url, when, key))
                    seconds.append(time.perf_counter() - t)
                if r == 0:
                    answers[kind] = got
                medians.append(1000 * statistics.median(seconds))
            times[kind] = {
                "median_ms": round(statistics.median(medians), 4),
                "rounds_ms": [round(m, 4) for m in medians],
            }
    return times, answers


def profile(store: Path, sample: list[tuple[str, datetime, PageKey]], kind: str) -> None:
    with WebIndex(store, read_only=True) as index:
        fn = lookups(index)[kind]
        fn(*sample[0])
        prof = cProfile.Profile()
        prof.enable()
        for url, when, key in sample[:20]:
            fn(url, when, key)
        prof.disable()
    stats = pstats.Stats(prof)
    print(f"total {stats.total_tt * 1000:.1f} ms for 20 lookups")  # type: ignore[attr-defined]
    stats.sort_stats("cumulative").print_stats(25)


def git_head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=HERE)
    return done.stdout.strip() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--sizes", default="113,2000,10000")
    ap.add_argument("--body-kib", type=float, default=20)
    ap.add_argument("--lookups", type=int, default=40, help="URLs in the sample (each kind looks each up)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--seed", type=int, default=38)
    ap.add_argument("--profile", help="a kind: profile 20 buffered lookups of it instead of timing")
    ap.add_argument("--out", default="buffer-lookup", help="results/<out>.json and .md")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    res: dict[str, Any] = {
        "benchmark": "buffer-lookup",
        "date": time.strftime("%Y-%m-%d"),
        "commit": git_head(),
        "web_index": __version__,
        "body_bytes": int(args.body_kib * 1024),
        "lookups": args.lookups,
        "rounds": args.rounds,
        "sizes": {},
    }
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="wi-buffer-bench-") as tmp:
            store = Path(tmp) / "store"
            t = time.perf_counter()
            records = fill(store, n, res["body_bytes"], args.seed)
            insert_s = time.perf_counter() - t
            sample = random.Random(args.seed).sample(records, min(args.lookups, n))
            if args.profile:
                print(f"--- {n} buffered, {args.profile}")
                profile(store, sample, args.profile)
                continue
            buffered, before = timed(store, sample, kinds, args.rounds)
            with WebIndex(store, policy=NEVER) as index:
                index.flush()
                index.compact()
            compacted, after = timed(store, sample, kinds, args.rounds)
            differ = {
                kind: sum(a != b for a, b in zip(before[kind], after[kind], strict=True)) for kind in kinds
            }
            entry = {
                "insert_s": round(insert_s, 2),
                "kinds": {
                    kind: {
                        "buffered": buffered[kind],
                        "compacted": compacted[kind],
                        "ratio": round(buffered[kind]["median_ms"] / compacted[kind]["median_ms"], 2),
                        "answers_differ": differ[kind],
                    }
                    for kind in kinds
                },
            }
            res["sizes"][str(n)] = entry
            for kind, k in entry["kinds"].items():
                print(
                    f"{n:>6} {kind:<14} buffered {k['buffered']['median_ms']:8.3f} ms"
                    f"  compacted {k['compacted']['median_ms']:8.3f} ms  x{k['ratio']}"
                    f"  differ {k['answers_differ']}",
                    flush=True,
                )
    if not args.profile:
        write(res, args.out)


def write(res: dict[str, Any], stem: str) -> None:
    lines = [
        f"Run {res['date']} at {res['commit']}, web-index {res['web_index']}: N GET records of one domain "
        f"(bodies of {res['body_bytes']:,} bytes) in the SQLite buffer, then the same store flushed and "
        f"compacted; {res['lookups']} URLs looked up one at a time per kind, {res['rounds']} rounds, the "
        "median round's median lookup; answers compared (buffered against compacted).",
        "",
        "| records buffered | lookup | buffered ms | compacted ms | buffered / compacted | differing |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for n, entry in res["sizes"].items():
        for kind, k in entry["kinds"].items():
            row = [
                f"{int(n):,}",
                kind,
                k["buffered"]["median_ms"],
                k["compacted"]["median_ms"],
                k["ratio"],
                k["answers_differ"],
            ]
            lines.append("| " + " | ".join(str(x) for x in row) + " |")
    save(stem, res, lines)


if __name__ == "__main__":
    sys.exit(main())
