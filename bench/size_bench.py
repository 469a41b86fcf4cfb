"""The store's bytes against what pywb keeps for the same records, issue 46's size limit.

    .venv/bin/python bench/size_bench.py                 # the S dataset of bench/synth.py
    .venv/bin/python bench/size_bench.py --store DIR     # any store

pywb's side is made of the store itself: ``web-index export-warc`` writes every stored GET
capture as per-record-gzip WARC/1.1 files (a response and its request record each, a revisit for
a payload written already, as the export always does), and ``cdxj-indexer`` (the dev dependency,
pywb's own indexer) indexes them into the CDXJ pywb serves: both measured in bytes. The store's
side is every byte under its folder but its insert buffer: the Parquet files (HEAD responses and
the metadata of every attempt, failures included, which pywb's side leaves out: the comparison
favours pywb), the month key indexes (``_index/``) and the capture indexes (``_captures/``). Results:
``bench/results/size-<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _procs import CLI
from _results import save

HERE = Path(__file__).parent
PARTS = ("get", "get-metadata", "head", "head-metadata", "_index", "_captures")


def tree_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) if folder.exists() else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--store", type=Path, help="a store folder (default: the S dataset of bench/data)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/web-index-size-bench"))
    ap.add_argument("--name", default="S")
    args = ap.parse_args()
    store = args.store
    if store is None:
        found = sorted((HERE / "data").glob("1000000-*/store"))
        if not found:
            sys.exit("no S dataset: .venv/bin/python bench/synth.py --records 1000000 --domains 10000")
        store = found[0]
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    warc = args.work / "warc"
    began = time.monotonic()
    subprocess.run(
        [CLI, "export-warc", str(warc), "--store", str(store)], check=True, stdout=subprocess.DEVNULL
    )
    export_s = time.monotonic() - began
    files = sorted(warc.glob("*.warc.gz"))
    cdxj = args.work / "index.cdxj"
    began = time.monotonic()
    with cdxj.open("wb") as out:
        indexer = [str(Path(sys.executable).parent / "cdxj-indexer"), *map(str, files)]
        subprocess.run(indexer, check=True, stdout=out)
    index_s = time.monotonic() - began
    parts = {p: tree_bytes(store / p) for p in PARTS}
    mine = sum(parts.values())
    peer = {"warc_gz": sum(f.stat().st_size for f in files), "cdxj": cdxj.stat().st_size}
    lines = sum(1 for _ in cdxj.open("rb"))
    theirs = peer["warc_gz"] + peer["cdxj"]
    record: dict[str, Any] = {
        "store": str(store),
        "store_bytes": parts,
        "store_total": mine,
        "pywb_bytes": peer,
        "pywb_total": theirs,
        "ratio": round(mine / theirs, 3),
        "cdxj_lines": lines,
        "warc_files": len(files),
        "export_s": round(export_s, 1),
        "index_s": round(index_s, 1),
        "machine": platform.platform(),
        "commit": subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    }
    shutil.rmtree(args.work, ignore_errors=True)
    md = [
        f"Store size against pywb's files for the same records ({args.name}: {store}, commit"
        f" {record['commit']}): the store's every file but its insert buffer (HEAD responses and every"
        f" attempt's metadata, failures included), against per-record-gzip WARC files of its GET"
        f" captures only (`web-index export-warc`, {len(files)} files) plus their CDXJ index"
        f" (`cdxj-indexer`, {lines:,} lines): what pywb keeps for less.",
        "",
        "| store part | bytes |",
        "|---|---:|",
        *(f"| `{p}` | {b:,} |" for p, b in parts.items()),
        f"| **store** | **{mine:,}** |",
        f"| WARC.gz | {peer['warc_gz']:,} |",
        f"| CDXJ | {peer['cdxj']:,} |",
        f"| **pywb's** | **{theirs:,}** |",
        "",
        f"store / pywb's: **{record['ratio']}** (issue 46: at most 1.0)",
    ]
    print(json.dumps(record, indent=2))
    save(f"size-{args.name}", record, md)


if __name__ == "__main__":
    main()
