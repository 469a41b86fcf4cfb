"""A real site through the archive server, issue 46's measurement: the same crawl's records read
buffered (right after the crawl), compacted, and compacted under an older checkout of the code, in
one run.

    .venv/bin/python bench/site_bench.py                                   # buffered, compacted
    git -C /work/main worktree add /work/old-9342323 9342323              # once, outside the repo
    .venv/bin/python bench/site_bench.py --against /work/old-9342323/src   # + baseline-code

The site (``--site``: a folder of HTML; by default the Rust book that rustup installs with the
toolchain's docs) is served by ``python -m http.server`` on 127.0.0.1 and crawled as the issue did:
``web-index crawl URL --scope prefix --page-requisites`` (with ``--allow-loopback --settle 0.5
--json``), once at the default depth, then again into the same store with ``--max-depth 500``.
The crawl is kept in ``--workdir`` (re-runs skip it; ``--fresh`` crawls again, as a change of
the buffer's format needs). Sides, each served by ``web-index serve --workers 1`` in a process
of its own, alone on the machine (the bench drives the CLI and HTTP only, importing no
``web_index``):

- ``buffered``: the store as the crawls leave it, every record still in the SQLite insert buffer.
  The crawl flushes nothing itself: the store's default ``FlushPolicy`` moves a partition to Parquet
  at 100,000 rows, 128 MiB or 15 minutes of age, checked only when attempts are inserted, and the
  two crawls (~330 attempts, ~14 MB) end within seconds of each other; ``serve`` opens the store
  read-only and never flushes. The bench checks it: ``web-index stats`` must count no file and
  every attempt buffered, before and after the runs.
- ``compacted``: a copy of that folder after ``web-index compact`` (flush, compaction, indexes),
  made again every run, so that the code measured is the code that compacted.
- ``baseline-code`` (with ``--against SRC``): the code in ``SRC`` (``PYTHONPATH=SRC``, the same
  venv), e.g. a worktree of main at 9342323 made by the command above (the bench never makes it),
  serving a copy of ``buffered`` compacted by that code: the store it would have made of these
  records. A store compacted by newer code is in a format the old code does not know: it answers
  the same, by slower paths (with the store of b80ae2c its CDX fell to ~200 req/s, from ~2,000 on
  its own store), which is not what the old code did. ``--against-shared-compact`` serves ``compacted``
  instead. Each server prints the ``web_index.__file__`` it imported; the run fails unless
  the baseline sides' are under ``SRC``.
- ``baseline-buffered`` (with ``--against SRC``): the code in ``SRC`` serving the ``buffered``
  store itself (the same insert buffer, read-only): whether the buffered side is as fast as before
  (issue 46: "the buffered side no slower than today's"), measured in the same run.

Workloads (collection ``store``): ``resource`` (``/store/resource?url=U&closest=TS``), ``id_``
(``/store/TSid_/U``) and ``cdx`` (``/store/cdx?url=U&closest=TS&limit=1``), U among the site's
HTML URLs answered 200 (the issue's 114), TS its latest capture. First every side is asked every
URL once in each workload and the answers compared (status; ``id_``: Memento-Datetime and the
body's SHA-1; ``resource``: the record's target, archived status and payload SHA-1; ``cdx``: the
line), and their capture listings too: a difference fails the run. Then ``--rounds`` rounds, the
sides' order reversed every other round; each start reads the store once (page cache), asks the
URLs once more (answers compared again), then runs each workload: ``--connections`` keep-alive
clients (bench/_http_client.py, a process of its own) for ``--seconds`` over ``--picks`` URLs
drawn at random. A run in which the rest of the machine used more than ``--max-other`` CPU
seconds a second (0.1) is run again, after waiting (up to 5 min) for 2 quiet seconds, up to
``--redo`` (5) times: disturbed runs are kept in the JSON, apart. The best round (req/s) is shown,
every round is in the JSON. Results:
bench/results/site.json and .md (``--out``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import _site
from _procs import stop
from _results import save

HERE = Path(__file__).resolve().parent
RUST_BOOKS = sorted(Path.home().glob(".rustup/toolchains/*/share/doc/rust/html/book"))
ISSUE = {"pages": 113, "requisites": 62, "attempts": 281, "html_urls": 114}
TARGETS = {
    "compacted ÷ buffered": 1.0,
    "compacted ÷ baseline-code": 3.0,
    "buffered ÷ baseline-buffered": 1.0,
    "resource ÷ cdx": 0.6,
}
SIDES = ("buffered", "compacted", "baseline-code", "baseline-buffered")
OLD_CODE = ("baseline-code", "baseline-buffered")


def git(path: Path) -> dict[str, Any]:
    def run(*args: str) -> str:
        return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True).stdout.strip()

    changed = run("status", "--porcelain", "--", ".").splitlines()
    tree = run("rev-parse", "--short", "HEAD:./")  # the folder's tree: the code, whatever else was committed
    diff = hashlib.sha1(run("diff", "HEAD", "--", ".").encode()).hexdigest()[:10]
    return {"commit": run("rev-parse", "--short", "HEAD"), "tree": tree, "uncommitted_files": len(changed),
            "uncommitted_diff_sha1": diff}  # fmt: skip


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((x.split(":", 1)[1].strip() for x in cpuinfo.splitlines() if x.startswith("model name")), "")
    mem = Path("/proc/meminfo").read_text().split("\n", 1)[0].split()[1]
    return {"platform": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
            "cpu": model, "mem_gib": round(int(mem) / 2**20, 1)}  # fmt: skip


def prepare(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Path]]:
    """The crawl (kept in the workdir), its checks, and each side's store."""
    work: Path = args.workdir
    buffered, info_path = work / "buffered", work / "crawled.json"
    info = json.loads(info_path.read_text()) if info_path.exists() and not args.fresh else None
    if info is None or info.get("site") != str(args.site) or "crawls" not in info:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        print(f"crawling {args.site} ...", flush=True)
        info = _site.crawl(args.site, buffered)
        info_path.write_text(json.dumps(info, indent=2) + "\n")
    info["stats"] = _site.stats(buffered)
    if info["stats"]["files"] or not info["stats"]["buffered_attempts"]:
        raise SystemExit(f"the crawl flushed: stats {info['stats']}; --fresh to crawl again")
    info["compact_s"] = _site.compacted_copy(buffered, work / "compacted")
    stores = {"buffered": buffered, "compacted": work / "compacted", "baseline-buffered": buffered}
    if "baseline-code" in args.sides:
        stores["baseline-code"] = work / "compacted"
        if not args.against_shared_compact:
            dest = work / "compacted-by-baseline-code"
            info["baseline_compact_s"] = _site.compacted_copy(
                buffered, dest, os.environ | {"PYTHONPATH": str(args.against)}
            )
            stores["baseline-code"] = dest
    return info, stores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--site", type=Path, default=RUST_BOOKS[-1] if RUST_BOOKS else None)
    ap.add_argument("--against", type=Path, help="an older checkout's src/: the baseline-code side")
    ap.add_argument(
        "--against-shared-compact", action="store_true", help="baseline-code serves compacted's store"
    )
    ap.add_argument("--sides", help=f"a subset of {','.join(SIDES)} (default: all given)")
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--rounds", type=int, default=2, help="each side served this many times, alternated")
    ap.add_argument(
        "--picks", type=int, default=4096, help="random draws of the HTML URLs a client goes round"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-other", type=float, default=0.1, help="CPU s a second others may use in a run")
    ap.add_argument("--redo", type=int, default=5, help="times a disturbed run is run again")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/web-index-site-bench"))
    ap.add_argument("--fresh", action="store_true", help="crawl again (the crawl is kept in --workdir)")
    ap.add_argument("--out", default="site")
    args = ap.parse_args()
    if args.site is None or not args.site.is_dir():
        raise SystemExit("no site: give --site DIR (a folder of HTML), or install the Rust docs (rustup)")
    if args.against is not None:
        args.against = args.against.resolve()
        if not (args.against / "web_index" / "__init__.py").is_file():
            raise SystemExit(f"--against {args.against}: no web_index package there (give a checkout's src/)")
    default = ["buffered", "compacted", *(OLD_CODE if args.against else ())]
    args.sides = args.sides.split(",") if args.sides else default
    if unknown := set(args.sides) - set(SIDES):
        ap.error(f"unknown sides {sorted(unknown)}")
    if set(OLD_CODE) & set(args.sides) and args.against is None:
        ap.error("the baseline sides need --against SRC")
    code = git(HERE.parent / "src")  # checked again at the end: others may commit meanwhile
    info, stores = prepare(args)
    paths = {s: str(args.against) if s in OLD_CODE else None for s in args.sides}
    logs = args.workdir / "logs"
    logs.mkdir(exist_ok=True)
    load_before = os.getloadavg()
    ref: dict[str, tuple[str, Any]] = {}  # what the first side started answered, and that side
    caught: list[tuple[str, str]] = []  # (time, URL) of the HTML URLs, from the first listing
    imported: dict[str, str] = {}

    def start(side: str) -> tuple[Any, str]:
        """The side's server, its web_index checked, the listing and every answer compared."""
        _site.warm(stores[side])
        proc, base, module = _site.serve(stores[side], logs / f"{side}.log", paths[side])
        imported[side] = module
        ours = Path(module).resolve().is_relative_to(args.against) if args.against else False
        if ours != (side in OLD_CODE):
            stop([proc])
            raise SystemExit(f"{side} imported {module}")
        got: dict[str, list[Any]] = {"listing": _site.listing(base, info["prefix"])}
        caught[:] = caught or _site.html_captures(got["listing"])
        got |= _site.answers(base, caught)
        for key, value in got.items():
            other, theirs = ref.setdefault(key, (side, value))
            if theirs != value:
                stop([proc])
                bad = next(i for i in range(len(value) + 1) if value[i : i + 1] != theirs[i : i + 1])
                mine, first = (x[bad] if bad < len(x) else "nothing" for x in (value, theirs))
                raise SystemExit(f"{key}: {side} answers differently from {other}, #{bad}: {mine} != {first}")
        return proc, base

    for side in args.sides:  # every answer compared before any timed run
        stop([start(side)[0]])
    rng = random.Random(f"site-bench-{args.seed}")
    picks = [rng.choice(caught) for _ in range(args.picks)]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {w: [] for w in _site.WORKLOADS} for s in args.sides
    }
    disturbed: dict[str, dict[str, list[dict[str, Any]]]] = {s: {w: [] for w in runs[s]} for s in runs}
    for n in range(args.rounds):
        for side in args.sides if n % 2 == 0 else args.sides[::-1]:
            proc, base = start(side)
            try:
                for w in _site.WORKLOADS:
                    urls = [_site.request(base, w, ts, u) for ts, u in picks]
                    for _ in range(args.redo + 1):
                        if not _site.wait_quiet(proc.pid, args.max_other):
                            print(
                                f"  {side} {w}: the machine still busy after 5 min, measured anyway",
                                flush=True,
                            )
                        r = _site.timed_run(proc.pid, urls, args.connections, args.seconds)
                        if r["other_cpu_s"] <= args.max_other * r["wall_s"]:
                            break
                        disturbed[side][w].append(r)
                        print(f"  {side} {w}: others used {r['other_cpu_s']} s of CPU, run again", flush=True)
                    runs[side][w].append(r)
                    print(
                        f"round {n + 1} {side} {w}: {r['req_per_s']} req/s, p50 {r['p50_ms']} ms, server CPU "
                        f"{r['server_cpu_ms_per_req']} ms/req, other CPU {r['other_cpu_s']} s",
                        flush=True,
                    )
            finally:
                stop([proc])
    after = _site.stats(stores["buffered"])
    if after != info["stats"]:
        raise SystemExit(f"the buffered store changed while served: {info['stats']} -> {after}")
    best = {
        s: {w: max(runs[s][w], key=lambda r: r["req_per_s"]) for w in _site.WORKLOADS} for s in args.sides
    }
    statuses: dict[str, int] = {}
    for _, _, _, _, status, _ in ref["listing"][1]:
        statuses[status] = statuses.get(status, 0) + 1
    record = {
        "benchmark": "site", "date": time.strftime("%Y-%m-%d %H:%M"), "code": code,
        "baseline_code": git(args.against) | {"src": str(args.against)} if args.against else None,
        "imported": imported, "machine": machine(), "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()], "crawl": info,
        "attempts": info["stats"]["buffered_attempts"], "captures_by_status": statuses,
        "html_urls": len(caught), "picks": args.picks, "seed": args.seed, "connections": args.connections,
        "seconds": args.seconds, "rounds": args.rounds, "sides": args.sides,
        "stores": {s: str(p) for s, p in stores.items()},
        "sizes": {s: _site.sizes(p) for s, p in stores.items()},
        "answers_compared": {"urls": len(caught), "workloads": list(_site.WORKLOADS), "differ": 0},
        "max_other_cpu_s_per_s": args.max_other, "runs": runs, "disturbed_runs": disturbed, "best": best,
    }  # fmt: skip
    end, same = git(HERE.parent / "src"), ("tree", "uncommitted_diff_sha1")
    if any(end[k] != code[k] for k in same):
        record["code_at_end"] = end  # src/ changed during the run: the rounds may have run different code
    record["ratios"] = ratios(best)
    lines = report(record)
    print("\n".join(lines))
    save(args.out, record, lines)


def ratios(best: dict[str, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """req/s ratios the issue's targets read: compacted ÷ buffered and ÷ baseline-code, buffered ÷
    baseline-buffered a workload, resource ÷ cdx on each side."""
    out: dict[str, dict[str, float]] = {}
    pairs = [("compacted", "buffered"), ("compacted", "baseline-code"), ("buffered", "baseline-buffered")]
    for mine, other in pairs:
        if mine in best and other in best:
            out[f"{mine} ÷ {other}"] = {
                w: round(best[mine][w]["req_per_s"] / best[other][w]["req_per_s"], 2)
                for w in ("resource", "id_", "cdx")
            }
    out["resource ÷ cdx"] = {
        s: round(b["resource"]["req_per_s"] / b["cdx"]["req_per_s"], 2) for s, b in best.items()
    }
    return out


def report(rec: dict[str, Any]) -> list[str]:
    crawls, code, base = rec["crawl"]["crawls"], rec["code"], rec["baseline_code"]
    dirty = f" + {code['uncommitted_files']} uncommitted files in src/" if code["uncommitted_files"] else ""
    lines = [
        f"{rec['crawl']['site']} served by `python -m http.server` and crawled with `web-index crawl "
        f"--scope prefix --page-requisites` twice (default depth: {crawls[0]['pages']} pages, "
        f"{crawls[0]['requisites']} requisites; `--max-depth 500`: {crawls[1]['pages']} pages, "
        f"{crawls[1]['requisites']} requisites): {rec['attempts']} attempts in the store (captures by "
        f"status: {rec['captures_by_status']}), {rec['html_urls']} HTML URLs answered 200. Code at "
        f"{code['commit']}{dirty}"
        + (f"; baseline-code at {base['commit']} ({base['src']})" if base else "")
        + f". Each side served alone by `web-index serve --workers 1`: {rec['connections']} keep-alive "
        f"clients for {rec['seconds']:g} s a workload, the HTML URLs drawn at random ({rec['picks']:,} "
        f"draws); {rec['rounds']} rounds, the sides' order reversed every other round, **the best round "
        f"shown** (every round below and in the JSON). Every URL's answers and the capture listing equal "
        f"on every side at every start. {rec['machine']['cpus']} cores ({rec['machine']['cpu']}), "
        f"{rec['date']}, load before {rec['load_before'][0]}.",
        "",
        "| same server, same records | Resource API | `id_` mementos | CDX |",
        "|---|---|---|---|",
    ]
    for s, b in rec["best"].items():
        cells = [f"{b[w]['req_per_s']:,.0f} req/s, p50 {b[w]['p50_ms']} ms" for w in _site.WORKLOADS]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| side | workload | req/s | p50 ms | p99 ms | server CPU ms/req | req/s each round | other CPU s |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for s, by_w in rec["runs"].items():
        for w, rs in by_w.items():
            b = rec["best"][s][w]
            each = ", ".join(f"{r['req_per_s']:,.0f}" for r in rs)
            cells = [
                s,
                w,
                f"{b['req_per_s']:,.0f}",
                b["p50_ms"],
                b["p99_ms"],
                b["server_cpu_ms_per_req"],
                each,
            ]
            lines.append(
                "| " + " | ".join(map(str, cells)) + f" | {', '.join(str(r['other_cpu_s']) for r in rs)} |"
            )
    lines += ["", "| req/s ratio (best rounds) | resource | id_ | cdx | target (issue 46) | met |"]
    lines.append("|---|---:|---:|---:|---|---|")
    for name, r in rec["ratios"].items():
        if name != "resource ÷ cdx":
            met = all(r[w] >= TARGETS[name] for w in ("resource", "id_"))
            lines.append(
                f"| {name} | {r['resource']} | {r['id_']} | {r['cdx']} | resource and id_ ≥ {TARGETS[name]} "
                f"| {'yes' if met else '**no**'} |"
            )
    rc = rec["ratios"]["resource ÷ cdx"]
    met = "yes" if rc.get("compacted", 0) >= TARGETS["resource ÷ cdx"] else "**no**"
    lines += ["", "| resource ÷ cdx req/s, same server | " + " | ".join(rc) + " | target (compacted) | met |"]
    lines += ["|---|" + "---:|" * len(rc) + "---|---|"]
    lines += [f"| | {' | '.join(map(str, rc.values()))} | ≥ {TARGETS['resource ÷ cdx']} | {met} |"]
    lines += [
        "",
        "| store (bytes) | get files | get | get-metadata | `_captures/` | `_index/` | `_buffer/` |",
    ]
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for s, z in rec["sizes"].items():
        cells = [z[k] for k in ("get", "get-metadata", "_captures", "_index", "_buffer")]
        lines.append(f"| {s} | {z['get_files']} | " + " | ".join(f"{x:,}" for x in cells) + " |")
    m = rec["max_other_cpu_s_per_s"]
    busy = [
        f"{s} {w} round {i + 1}: {r['other_cpu_s']} s in {r['wall_s']} s"
        for s, by_w in rec["runs"].items()
        for w, rs in by_w.items()
        for i, r in enumerate(rs)
        if r["other_cpu_s"] > m * r["wall_s"]
    ]
    quiet = (
        "; ".join(busy) + f" (more than {m} s a second)" if busy else f"at most {m} s a second in every run"
    )
    redone = sum(len(rs) for by_w in rec["disturbed_runs"].values() for rs in by_w.values())
    lines += [
        "",
        f"Other CPU (the machine's busy time less the server's and the client's): {quiet}; {redone} runs "
        "disturbed by more were run again (in the JSON's `disturbed_runs`).",
    ]
    here = {"pages": crawls[1]["pages"], "requisites": crawls[1]["requisites"]}
    here |= {"attempts": rec["attempts"], "html_urls": rec["html_urls"]}
    if "code_at_end" in rec:
        lines += [
            "",
            f"**src/ changed during the run** (at the end: {rec['code_at_end']}): rounds may differ.",
        ]
    if odd := [f"{k} {ISSUE[k]} there, {v} here" for k, v in here.items() if v != ISSUE[k]]:
        lines += ["", "Counts that differ from the issue's: " + "; ".join(odd) + "."]
    return lines


if __name__ == "__main__":
    main()
