"""WACZ export: time and peak memory of ``export_wacz`` next to ``export_warcs`` of the same records.

The store is warc_bench's: its generated ``.warc.gz`` files (``--size-mb``
MiB, cached under ``--workdir``) imported by warc_bench's own ``import`` step
(cached too, as ``store-<size>mib``). Then, each in a fresh process (its peak
RSS is that process's VmHWM), alternating which goes first from round to
round:

- ``export-warc``: ``export_warcs`` of the whole store into a folder;
- ``export-wacz``: ``export_wacz`` of the whole store into one ``.wacz``
  (page titles and text extracted: the default);
- ``export-wacz-no-text`` (only with ``--steps``): the same with ``text=False``.

Both write the same records, so the two report the same responses, revisits
and WARC bytes (checked). The last package is checked by ``wacz validate``
(py-wacz, untimed), then every output is deleted. MB/s is WARC bytes written
(10^6) / wall seconds of the call. Results: bench/results/wacz-export.json
and .md.

    nice -n 10 .venv/bin/python bench/wacz_export_bench.py [--size-mb 1024] [--rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _results import save  # noqa: E402
from warc_bench import MB, MIB, Params, _du, _git_head, _peak_rss, ensure_warcs, timed_step, warm  # noqa: E402


def _child(step: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run one export in this (fresh) process; return its figures."""
    from web_index import WebIndex
    from web_index.archive import export_wacz, export_warcs

    out = Path(args["out"])
    started = time.perf_counter()
    with WebIndex(args["store"], read_only=True) as index:
        if step == "export-warc":
            report: Any = export_warcs(index, out)
            extra = {"files": len(report.files)}
        else:
            report = export_wacz(index, out, text=step != "export-wacz-no-text")
            extra = {
                "members": len(report.members),
                "index_lines": report.index_lines,
                "zipnum": report.zipnum,
                "pages": report.pages,
            }
    seconds = time.perf_counter() - started
    return {
        "seconds": seconds,
        "peak_rss": _peak_rss(),
        "report": {
            "attempts": report.attempts,
            "responses": report.responses,
            "revisits": report.revisits,
            "bytes": report.bytes,
            **extra,
        },
    }


def _run(step: str, args: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--child", step, json.dumps(args)], stdout=subprocess.PIPE, text=True
    )
    if proc.returncode:
        raise SystemExit(f"step {step} failed (exit {proc.returncode})")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_seconds"] = round(time.perf_counter() - started, 2)
    result["load_before"] = round(os.getloadavg()[0], 2)
    result["head"] = _git_head()
    return result


def ensure_store(files: list[Path], store: Path) -> dict[str, Any]:
    """The imported store (warc_bench's import step), built once."""
    done = store / "bench-built.json"
    if done.exists():
        return dict(json.loads(done.read_text()))
    shutil.rmtree(store, ignore_errors=True)
    print(f"importing {len(files)} files into {store} ...", flush=True)
    r = timed_step("import", {"files": [str(f) for f in files], "durable": True, "store": str(store)})
    built = {"import_seconds": round(r["total_seconds"], 1), "stored": r["report"]["stored"]}
    done.write_text(json.dumps(built) + "\n")
    return built


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="MiB of .warc.gz imported (default 1024)")
    ap.add_argument("--rounds", type=int, default=1, help="rounds of both exports (median)")
    ap.add_argument("--workdir", default="/tmp/web-index-warc-bench", help="WARCs and store (cached)")
    ap.add_argument(
        "--steps", default="export-warc,export-wacz", help="of export-warc, export-wacz, export-wacz-no-text"
    )
    ap.add_argument("--no-validate", action="store_true", help="skip wacz validate on the last package")
    ap.add_argument("--out", default="wacz-export", help="results file stem (default wacz-export)")
    ap.add_argument("--rewrite", action="store_true", help="no run: write --out's .md from its .json")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(_child(args.child[0], json.loads(args.child[1]))), flush=True)
        return
    if args.rewrite:  # the tables again, from a results file
        write_results(json.loads((HERE / "results" / f"{args.out}.json").read_text()), args.out)
        return

    workdir = Path(args.workdir)
    folder, info = ensure_warcs(Params(size_mb=args.size_mb), workdir)
    files = [folder / f["name"] for f in info["files"]]
    store = workdir / f"store-{args.size_mb}mib"
    built = ensure_store(files, store)
    store_bytes = _du(store)
    print(f"store: {store_bytes / MIB:,.0f} MiB, {built['stored']:,} captures stored", flush=True)
    steps = args.steps.split(",")
    runs: dict[str, list[dict[str, Any]]] = {step: [] for step in steps}
    targets = {step: workdir / (step if step == "export-warc" else f"{step}.wacz") for step in steps}
    validated: dict[str, Any] = {"skipped": "--no-validate"}
    for rnd in range(args.rounds):
        order = steps[:: 1 if rnd % 2 == 0 else -1]
        for step in order:
            target = targets[step]
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
            warm([store])
            r = _run(step, {"store": str(store), "out": str(target)})
            r["out_bytes"] = _du(target) if target.is_dir() else target.stat().st_size
            runs[step].append(r)
            print(
                f"{step}: {r['seconds']:.1f} s, {r['report']['bytes'] / MB / r['seconds']:.1f} MB/s of WARC, "
                f"peak RSS {r['peak_rss'] / MIB:.0f} MiB, {r['report']}",
                flush=True,
            )
            if step.startswith("export-wacz") and rnd == args.rounds - 1 and not args.no_validate:
                started = time.perf_counter()
                wacz = Path(sys.executable).parent / "wacz"
                done = subprocess.run([wacz, "validate", "-f", str(target)], capture_output=True, text=True)
                validated = {"ok": done.returncode == 0, "seconds": round(time.perf_counter() - started, 1)}
                print(f"wacz validate: {validated}", flush=True)
        for target in targets.values():
            shutil.rmtree(target, ignore_errors=True) if target.is_dir() else target.unlink(missing_ok=True)
    every = [r for step in steps for r in runs[step]]
    # WARC bytes may differ by a few a file: each warcinfo record is dated when written.
    same = all(
        all(a["report"][k] == b["report"][k] for k in ("attempts", "responses", "revisits"))
        and abs(a["report"]["bytes"] - b["report"]["bytes"]) < 64 * 8
        for a in every
        for b in every
    )
    result = {
        "when": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "head": _git_head(),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "dataset": {"size_mb": args.size_mb, "files": len(files), "warc_bytes": info["bytes"], **built},
        "store_bytes": store_bytes,
        "runs": runs,
        "same_records": same,
        "validate": validated,
    }
    write_results(result, args.out)


def write_results(result: dict[str, Any], stem: str) -> None:
    def med(step: str, key: str) -> float:
        return float(statistics.median(r[key] for r in result["runs"][step]))

    ds = result["dataset"]
    rounds = max(len(r) for r in result["runs"].values())
    lines = [
        f"Run {result['when']} UTC at {result['head']}, {result['machine']['cores']} cores, "
        f"niced (nice -n 10) beside other work: warc_bench's {ds['size_mb']} MiB of generated .warc.gz "
        f"({ds['files']} files) "
        f"imported into a store of {result['store_bytes'] / MIB:,.0f} MiB ({ds['stored']:,} captures); "
        f"{rounds} round(s), alternating the order of the exports; medians, the highest peak RSS.",
        "",
        "| step | wall (s) | MB/s of WARC | ÷ export_warcs | WARC written | output | peak RSS "
        "| load before |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    labels = {
        "export-warc": "export_warcs() (folder)",
        "export-wacz": "export_wacz() (.wacz)",
        "export-wacz-no-text": "export_wacz(text=False)",
    }
    base = med("export-warc", "seconds") if "export-warc" in result["runs"] else None
    for step, runs in result["runs"].items():
        seconds, written = med(step, "seconds"), runs[0]["report"]["bytes"]
        lines.append(
            f"| {labels[step]} | {seconds:.1f} | {written / MB / seconds:.2f} | "
            f"{seconds / base if base else float('nan'):.2f} | {written / MIB:,.0f} MiB | "
            f"{med(step, 'out_bytes') / MIB:,.0f} MiB | {max(x['peak_rss'] for x in runs) / MIB:.0f} MiB | "
            f"{', '.join(str(x['load_before']) for x in runs)} |"
        )
    wacz = next(runs[-1]["report"] for step, runs in result["runs"].items() if step != "export-warc")
    lines += [
        "",
        f"- the package: {wacz['members']} members, {wacz['index_lines']:,} index lines "
        f"({'ZipNum' if wacz['zipnum'] else 'plain'}), {wacz['pages']:,} pages",
        f"- same records in both (attempts, responses, revisits; WARC bytes but the warcinfo dates): "
        f"{result['same_records']}",
        f"- wacz validate (py-wacz) on the package: {result['validate']}",
        "- peak RSS: the export's own process (VmHWM), the store opened read-only included",
    ]
    save(stem, result, lines)


if __name__ == "__main__":
    main()
