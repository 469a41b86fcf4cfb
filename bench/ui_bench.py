"""Server time of the web pages (issue 39's targets: a URL's history with 1,000 captures and
1,000 failed attempts under 150 ms p50, a capture page under 100 ms), and their weight.

    .venv/bin/python bench/ui_bench.py [--others 200000] [--repeat 21]
    .venv/bin/python bench/ui_bench.py --synth 1000000      # on a copy of the S store (synth.py)

Builds (once; cached under bench/data/ui-<others>/) a store where one URL has ``--captures``
successful and ``--failures`` failed GET attempts among ``--others`` records of other URLs of the
same domain (or, with ``--synth N``, on a copy of synth.py's store of N records over 10,000 domains,
in its biggest domain), flushed and compacted, then asks the app (``create_app`` + ``add_ui``, in process
through httpx's ASGI transport: server time, no socket) for the history page (first and last page
of attempts), a capture page, the archived page of its frame, the lookup of the domain and the
store's overview, each ``--repeat`` times after one warm-up, alternating. Writes
``bench/results/ui.json`` and ``ui.md`` (p50, p90, bytes), quoted in docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import random
import shutil
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import httpx

from _results import save
from web_index import WebIndex, __version__
from web_index.models import AttemptMetadata, Response
from web_index.server import create_app
from web_index.ui import add_ui
from web_index.urls import domain_of

HERE = Path(__file__).resolve().parent
URL = "https://big.example.com/page"
T0 = datetime(2024, 1, 1, tzinfo=UTC)
TARGETS_MS = {"history": 150.0, "capture": 100.0}


def _response(url: str, ts: datetime, body: bytes) -> Response:
    return Response(
        url=url, request_url=url, status_code=200, headers={"content-type": "text/html"}, timestamp=ts,
        data=body, is_final=True, fetcher_name="bench", fetcher_version="1", fetcher_calibre=10,
    )  # fmt: skip


def _attempts(captures: int, failures: int, others: int, url: str = URL) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    states = ["success"] * captures + [("timeout", "blocked", "error")[i % 3] for i in range(failures)]
    random.Random(7).shuffle(states)  # failures between the captures, as a flaky site's
    for i, state in enumerate(states):
        ts = T0 + timedelta(hours=3 * i)
        ok = state == "success"
        meta = AttemptMetadata(
            state=state, url=url, fetcher_name="bench", fetcher_version="1", fetcher_calibre=10
        )
        body = f"<html><head><title>Version {i}</title></head><body><p>{'words ' * 800}</p></body></html>"
        out.append(("get", url, ts, meta, [_response(url, ts, body.encode())] if ok else []))
    for j in range(others):
        other = f"https://big.example.com/other/{j}"
        ts = T0 + timedelta(seconds=97 * j)
        meta = AttemptMetadata(
            state="success", url=other, fetcher_name="bench", fetcher_version="1", fetcher_calibre=10
        )
        out.append(("get", other, ts, meta, [_response(other, ts, b"<p>other</p>" * 200)]))
    return out


def _synth_copy(records: int, store: Path) -> str:
    """A copy of synth.py's store of ``records`` at ``store``; the URL to look at, in its biggest domain."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import synth

    params = synth.SynthParams(records=records, domains=10_000)
    source = synth.dataset_dir(params)
    synth.ensure_dataset(params, source)
    urls = pq.read_table(source / "manifest.parquet", columns=["url"]).column(0).combine_chunks()
    hosts = pc.struct_field(pc.extract_regex(urls, r"^https?://(?P<host>[^/]+)/"), [0])
    top = max(pc.value_counts(hosts).to_pylist(), key=lambda kv: kv["counts"])["values"]
    shutil.copytree(source / "store", store)
    return f"https://{top}/history-bench"


def build(
    folder: Path, captures: int, failures: int, others: int, synth_records: int | None
) -> tuple[Path, str]:
    store = folder / "store"
    if (folder / "built.json").exists():
        return store, json.loads((folder / "built.json").read_text())["url"]
    started = time.monotonic()
    url = _synth_copy(synth_records, store) if synth_records else URL
    with WebIndex(store, create=True) as index:
        attempts = _attempts(captures, failures, others, url)
        for k in range(0, len(attempts), 5000):
            index.insert_many(attempts[k : k + 5000])  # type: ignore[arg-type]
            index.flush()
        index.compact()
    (folder / "built.json").write_text(json.dumps({"seconds": time.monotonic() - started, "url": url}))
    return store, url


async def measure(store: Path, url: str, repeat: int) -> dict[str, dict[str, float]]:
    with WebIndex(store, read_only=True) as index:
        app = add_ui(create_app(index))
        stamp = next(index.captures(url)).split(" ")[1]  # the first capture's own address
        pages = {
            "history": f"/ui/store/history?url={quote(url)}",
            "history-last-page": f"/ui/store/history?url={quote(url)}&page=20",
            "capture": f"/ui/store/{stamp}/{url}",
            "frame": f"/ui/store/{stamp}if_/{url}",
            "lookup-domain": "/lookup?url=" + quote("*." + domain_of(url)),
            "domain page (its states by month, its failing URLs)": "/ui/store/domain?d=" + domain_of(url),
        }
        once = {
            "overview (cold: counts every attempt; kept 60 s)": "/ui/store/",
            "home (cold: every domain's captures and attempts; kept 60 s)": "/",
        }
        times: dict[str, list[float]] = {name: [] for name in pages}
        sizes: dict[str, int] = {}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://bench"
        ) as client:
            for round_ in range(repeat + 1):
                for name, path in pages.items():
                    began = time.perf_counter()
                    got = await client.get(path)
                    spent = time.perf_counter() - began
                    if got.status_code != 200:
                        raise SystemExit(f"{path}: {got.status_code} {got.text[:200]}")
                    if round_:  # the first round warms caches and imports
                        times[name].append(spent * 1000)
                    sizes[name] = len(got.content)
            for name, path in once.items():  # read once a minute: its first answer is the cost
                began = time.perf_counter()
                got = await client.get(path)
                times[name] = [(time.perf_counter() - began) * 1000] * 2
                sizes[name] = len(got.content)
    return {
        name: {
            "p50_ms": statistics.median(t),
            "p90_ms": statistics.quantiles(t, n=10)[-1],
            "bytes": sizes[name],
        }
        for name, t in times.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--captures", type=int, default=1000)
    ap.add_argument("--failures", type=int, default=1000)
    ap.add_argument("--others", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=21)
    ap.add_argument("--synth", type=int, help="records of a synth.py store to add the URL to (S: 1000000)")
    ap.add_argument("--out", help="results' name under bench/results (default: ui, or ui-synth<N>)")
    args = ap.parse_args()
    others = 0 if args.synth else args.others
    name = f"synth{args.synth}" if args.synth else f"{args.others}"
    folder = HERE / "data" / f"ui-{args.captures}-{args.failures}-{name}"
    folder.mkdir(parents=True, exist_ok=True)
    store, url = build(folder, args.captures, args.failures, others, args.synth)
    results = asyncio.run(measure(store, url, args.repeat))
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    record = {
        "commit": commit, "version": __version__, "machine": platform.platform(),
        "captures": args.captures, "failures": args.failures, "others": others, "synth": args.synth,
        "url": url, "repeat": args.repeat,
        "results": results, "targets_ms": TARGETS_MS,
    }  # fmt: skip
    stem = args.out or (f"ui-synth{args.synth}" if args.synth else "ui")
    lines = [
        f"UI pages, server time in process ({args.repeat} runs each after a warm-up), at {commit}: "
        f"one URL with {args.captures:,} captures and {args.failures:,} failed attempts "
        + (
            f"added to the biggest domain of synth.py's store of {args.synth:,} records, compacted."
            if args.synth
            else f"among {args.others:,} other records of its domain, compacted."
        ),
        "",
        "| page | p50 ms | p90 ms | bytes | target |",
        "|---|---:|---:|---:|---|",
    ]
    for name, r in results.items():
        target = TARGETS_MS.get(name)
        met = "" if target is None else f"< {target:.0f} ms: {'met' if r['p50_ms'] < target else 'not met'}"
        lines.append(f"| {name} | {r['p50_ms']:.1f} | {r['p90_ms']:.1f} | {r['bytes']:,} | {met} |")
    print("\n".join(lines))
    save(stem, record, lines)


if __name__ == "__main__":
    main()
