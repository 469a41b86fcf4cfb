"""WACZ import against ``import_warcs`` of the same WARCs, in the same run.

The WARCs are warc_bench's synthetic ones (``--size-mb`` MiB of per-record
gzip, cached under ``--workdir``). They are packed twice: by py-wacz's
``wacz create`` (the WARCs STORED, as every WACZ writer does; its ZipNum index
built too) and, here with zipfile, with the WARC members DEFLATED (the case
where each member is inflated as it is read). Then, rounds in rotating order,
each import a fresh process into a fresh store (its peak RSS is that
process's VmHWM):

- ``warc``: ``import_warcs(index, files)``, the floor;
- ``wacz``: ``import_wacz(index, [the py-wacz package])``;
- ``wacz-deflated``: ``import_wacz`` of the deflated package;
- ``check``: ``wacz_files`` alone (every member hashed, nothing stored): the
  price of checking a package whole before storing;
- ``re-import`` of the WARCs and of the package into their stores: nothing stored.

MB/s is the WARCs' bytes (10^6) / the import call's wall seconds, the same
bytes for every side. Results: bench/results/wacz-import.json and .md.

    nice -n 10 .venv/bin/python bench/wacz_import_bench.py [--size-mb 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import warc_bench
from _results import save

MB = 1_000_000


def _child(step: str, args: dict[str, Any]) -> dict[str, Any]:
    from web_index import WebIndex
    from web_index.archive import import_wacz, import_warcs, wacz_files

    started = time.perf_counter()
    if step == "check":
        members = wacz_files(args["package"])
        return {"seconds": time.perf_counter() - started, "members": len(members)}
    with WebIndex(args["store"], create=True) as index:
        started = time.perf_counter()
        if step == "warc":
            report = import_warcs(index, [Path(f) for f in args["files"]])
        else:
            report = import_wacz(index, [args["package"]])
        seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "records": report.records,
        "stored": report.stored,
        "already_stored": report.already_stored,
    }


def _run(step: str, args: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", step, json.dumps(args)], capture_output=True, text=True
    )
    if proc.returncode:
        raise SystemExit(f"{step} failed: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _deflated_package(files: list[Path], out: Path) -> None:
    """A WACZ whose WARC members are DEFLATED (no index or pages: import reads neither)."""
    resources = []
    with zipfile.ZipFile(out, "w") as zf:
        for f in files:
            data = f.read_bytes()
            zf.writestr(f"archive/{f.name}", data, zipfile.ZIP_DEFLATED, compresslevel=1)
            digest = hashlib.sha256(data).hexdigest()
            resources.append(
                {"name": f.name, "path": f"archive/{f.name}", "hash": f"sha256:{digest}", "bytes": len(data)}
            )
        package = {"profile": "data-package", "wacz_version": "1.1.1", "resources": resources}
        zf.writestr("datapackage.json", json.dumps(package), zipfile.ZIP_DEFLATED)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=128, help="MiB of .warc.gz (default 128)")
    ap.add_argument("--file-mb", type=int, default=32, help="MiB a WARC file, about (default 32)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/web-index-wacz-bench")
    ap.add_argument("--out", default="wacz-import")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], json.loads(args.child[1]))))
        return
    workdir = Path(args.workdir)
    params = warc_bench.Params(size_mb=args.size_mb, file_mb=args.file_mb)
    folder, manifest = warc_bench.ensure_warcs(params, workdir)
    files = sorted(folder.glob("*.warc.gz"))
    size = sum(f.stat().st_size for f in files)
    stored_pkg, deflated_pkg = folder / "py-wacz.wacz", folder / "deflated.wacz"
    if not stored_pkg.exists():
        wacz = Path(sys.executable).with_name("wacz")
        started = time.perf_counter()
        subprocess.run(
            [str(wacz), "create", "-o", str(stored_pkg), *map(str, files)], check=True, capture_output=True
        )
        print(f"wacz create: {time.perf_counter() - started:.1f} s", flush=True)
    if not deflated_pkg.exists():
        _deflated_package(files, deflated_pkg)
    sides = {"warc": {"files": [str(f) for f in files]}, "wacz": {"package": str(stored_pkg)},
             "wacz-deflated": {"package": str(deflated_pkg)}}  # fmt: skip
    times: dict[str, list[dict[str, Any]]] = {
        s: [] for s in [*sides, "check", "re-import warc", "re-import wacz"]
    }
    order = list(sides)
    loads = [os.getloadavg()[0]]  # others' work on the machine slows every side alike, not their ratio
    for r in range(args.rounds):
        for side in order[r % len(order) :] + order[: r % len(order)]:
            store = workdir / f"store-{side}"
            shutil.rmtree(store, ignore_errors=True)
            warc_bench.warm([folder])
            got = _run(side, {**sides[side], "store": str(store)})
            times[side].append(got)
            print(f"round {r + 1} {side}: {got['seconds']:.1f} s, stored {got['stored']}", flush=True)
        times["check"].append(_run("check", {"package": str(stored_pkg)}))
        for side, label in (("warc", "re-import warc"), ("wacz", "re-import wacz")):
            got = _run(side, {**sides[side], "store": str(workdir / f"store-{side}")})
            assert got["stored"] == 0, got
            times[label].append(got)
        loads.append(os.getloadavg()[0])
    stored = {times[s][0]["stored"] for s in sides}
    assert len(stored) == 1, f"the sides stored different counts: {stored}"
    floor = statistics.median(t["seconds"] for t in times["warc"])
    rows = []
    for label, runs in times.items():
        med = statistics.median(t["seconds"] for t in runs)
        all_s = [round(t["seconds"], 2) for t in runs]
        rows.append({"step": label, "median_s": round(med, 2), "mb_per_s": round(size / MB / med, 1),
                     "vs_warc": round(floor / med, 2), "all_s": all_s})  # fmt: skip
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    record = {"head": head, "size_bytes": size, "files": len(files), "records": manifest["records"],
              "stored": stored.pop(), "package_bytes": stored_pkg.stat().st_size,
              "deflated_package_bytes": deflated_pkg.stat().st_size, "rounds": args.rounds,
              "load_averages": loads, "rows": rows}  # fmt: skip
    lines = [
        f"# WACZ import against import-warc ({time.strftime('%Y-%m-%d')}, at {head})",
        "",
        f"{size / MB:.1f} MB of per-record-gzip WARCs in {len(files)} files, {manifest['records']:,} records"
        f" ({record['stored']:,} stored); medians of {args.rounds} rounds, each a fresh process and store;"
        " MB/s of WARC bytes. 1-minute load average at the start and after each round:"
        f" {', '.join(f'{x:.1f}' for x in loads)} (2 cores).",
        "",
        "| step | median | MB/s | speed ÷ warc | every round |",
        "|---|---:|---:|---:|---|",
        *(
            f"| {r['step']} | {r['median_s']} s | {r['mb_per_s']} | {r['vs_warc']} | {r['all_s']} |"
            for r in rows
        ),
    ]
    save(args.out, record, lines)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
