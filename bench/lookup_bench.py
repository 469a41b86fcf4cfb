"""Single lookups in one process, web-index against pywb 2.10 over the same captures, in one
run: what a CDX server does for ``?url=U&closest=TS&limit=1`` (``closest``) and
``?url=U&sort=reverse&limit=1`` (``latest``) once the request is parsed, without HTTP.

    .venv/bin/python bench/lookup_bench.py            # both datasets of server_bench.py

- web-index: ``find_captures`` on the store (``WebIndex.captures``: the capture indexes, with
  the closest query's windows, the latest's months from the newest), in a process of its own;
- pywb: ``CDXQuery`` + ``FileIndexSource.load_index`` + ``process_cdx`` on the CDXJ that
  ``export_warcs`` wrote of the same store (``_pywb_lookup.py``, in pywb's venv).

The datasets are server_bench.py's (built there, cached in its ``--workdir``): ``main``, 113,250
captures over 1,000 domains, and ``prefix-1m``, 1,000,000 captures of one site. Each side gets the
same warm-up and the same queries (captures drawn from the CDXJ, each asked for within 3 days of
it), one at a time; every answer (timestamp and URL of the capture found) is compared. Results:
``results/lookup.json`` and ``.md``.

    .venv/bin/python bench/lookup_bench.py --batch --queries 10000 --datasets prefix-1m

``--batch``: the same lookups as one batch a side, timed as a whole: web-index answers them with
``WebIndex.query`` (the standard's latest and nearest queries: a ``SimplePageQuery`` and a
``TimeAwarePageQuery`` with the moment and no window; every answer a whole record with its body),
pywb with its lookups one after another (the sum of their times); each side's peak RSS is the
batch's process's. Results: ``results/lookup-batch.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import _pywb
from _results import save
from _timed_lookups import cdx_params, peak_rss_mib, rss_mib, timed_lookups
from web_index import WebIndex, __version__
from web_index.archive import closest_capture, find_captures, parse_cdx_query
from web_index.models import Page, Query, SimplePageQuery, TimeAwarePageQuery

# server_bench (datasets, queries) is imported by the parent alone: it imports pyarrow and numpy,
# which a side's process must not carry into its peak RSS unless the side itself needs them.
HERE = Path(__file__).resolve().parent


def web_index_side(job: dict[str, Any]) -> dict[str, Any]:
    """The web-index side of a job (``_pywb_lookup.py``'s form), in this process."""
    if job.get("batch"):
        return batch_side(job)
    with WebIndex(job["store"], read_only=True) as index:

        def lookup(q: dict[str, str]) -> list[str] | None:
            params = {name: [value] for name, value in cdx_params(q, job["kind"]).items()}
            if job.get("body"):  # the capture with its response, as the Resource API and id_ load it
                found = closest_capture(index, parse_cdx_query(params), source="store")
                if found is None:
                    return None
                fields = found.capture[0]
                return [
                    fields["timestamp"],
                    fields["url"],
                    hashlib.sha1(found.response.data or b"").hexdigest(),
                ]
            for fields, _ in find_captures(index, parse_cdx_query(params), source="store"):
                return [fields["timestamp"], fields["url"]]
            return None

        return dict(timed_lookups(lookup, job))


def batch_query(q: dict[str, str], kind: str) -> Query:
    """The standard's query for one lookup: the latest record, or the one nearest the moment."""
    if kind == "closest":
        when = datetime.strptime(q["closest"], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        return TimeAwarePageQuery(url=q["url"], timestamp=when)
    return SimplePageQuery(url=q["url"])


def batch_side(job: dict[str, Any]) -> dict[str, Any]:
    """The job's queries as one ``WebIndex.query`` batch (the warm-up's first): its
    time as the one entry of ``seconds``, answers as the single lookups give them."""
    warmup = [batch_query(q, job["kind"]) for q in job["warmup"]]
    queries = [batch_query(q, job["kind"]) for q in job["queries"]]
    with WebIndex(job["store"], read_only=True) as index:
        index.query(warmup)
        t = time.perf_counter()
        results = index.query(queries)
        seconds = time.perf_counter() - t
        time.sleep(0.3)  # the reader threads give their memory back once idle
        after = rss_mib()
    answers = [
        [r.timestamp.strftime("%Y%m%d%H%M%S"), r.url] if isinstance(r, Page) else None for r in results
    ]
    return {"seconds": [seconds], "answers": answers, "peak_rss_mib": peak_rss_mib(), "rss_after_mib": after}


def run_side(command: list[str], job: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(command, input=json.dumps(job), capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{command[0]} failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)

    def at(p: float) -> float:
        return round(1000 * ordered[min(len(ordered) - 1, int(p * len(ordered)))], 3)

    mean = round(1000 * statistics.mean(seconds), 3)
    return {"p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "mean_ms": mean}


def median_round(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median p50, and every round's p50."""
    rounds = sorted(
        (summary(run["seconds"]) | {"peak_rss_mib": run["peak_rss_mib"]} for run in runs),
        key=lambda s: s["p50_ms"],
    )
    return rounds[len(rounds) // 2] | {"round_p50s_ms": [s["p50_ms"] for s in rounds]}


def median_batch(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The round whose batch took the median time, and every round's time."""
    rounds = sorted(
        (
            {"batch_s": round(sum(run["seconds"]), 3), "peak_rss_mib": run["peak_rss_mib"]}
            | ({"rss_after_mib": run["rss_after_mib"]} if "rss_after_mib" in run else {})
            for run in runs
        ),
        key=lambda s: s["batch_s"],
    )
    return rounds[len(rounds) // 2] | {"round_batch_s": [s["batch_s"] for s in rounds]}


def compare(job: dict[str, Any], folder: Path, rounds: int) -> dict[str, Any]:
    """Both sides' runs of ``job`` on a dataset, alternated, and their answers compared."""
    runs: dict[str, list[dict[str, Any]]] = {"web-index": [], "pywb": []}
    for r in range(rounds):  # ABBA...: a change in the machine's load hits both sides
        for side in ("web-index", "pywb") if r % 2 == 0 else ("pywb", "web-index"):
            if side == "web-index":
                me = [sys.executable, str(Path(__file__)), "--side", "web-index"]
                runs[side].append(run_side(me, {**job, "store": str(folder / "store")}))
            else:
                pywb = [str(_pywb.pywb_bin("python")), str(HERE / "_pywb_lookup.py")]
                cdxj = str(folder / "warc" / "bench.cdxj")
                job_pywb = {**job, "cdxj": cdxj, "warcs": str(folder / "warc")}
                runs[side].append(run_side(pywb, job_pywb, env=_pywb.clean_env()))
    mine, theirs = runs["web-index"][0], runs["pywb"][0]
    median = median_batch if job.get("batch") else median_round
    return {
        **{side: median(side_runs) for side, side_runs in runs.items()},
        "answers_differ": sum(a != b for a, b in zip(mine["answers"], theirs["answers"], strict=True)),
        "not_found": sum(a is None for a in mine["answers"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=500)
    ap.add_argument("--seed", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="runs a side, alternated (ABBA...); the median")
    ap.add_argument("--datasets", default="main,prefix-1m")
    ap.add_argument("--kinds", default="closest,latest", help="closest: ?closest=TS; latest: ?sort=reverse")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/web-index-server-bench"))
    ap.add_argument("--batch", action="store_true", help="each side's lookups as one batch (see above)")
    ap.add_argument("--body", action="store_true", help="single lookups with the capture's body (see above)")
    ap.add_argument("--out", help="results stem with --batch (default lookup-batch)")
    ap.add_argument("--side", help=argparse.SUPPRESS)  # internal: run one side's job from stdin
    args = ap.parse_args()
    if args.side == "web-index":
        json.dump(web_index_side(json.load(sys.stdin)), sys.stdout)
        return
    pywb_version = _pywb.check_venv()
    from server_bench import MainParams, PrefixParams, _git_head, ensure_dataset, sample_queries

    params = {"main": MainParams(100_000, 1_000, 1), "prefix-1m": PrefixParams(1_000_000, 50, 1)}
    res: dict[str, Any] = {
        "benchmark": "lookup",
        "date": time.strftime("%Y-%m-%d"),
        "commit": _git_head(),
        "web_index": __version__,
        "pywb": pywb_version,
        "queries": args.queries,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "batch": args.batch,
        "body": args.body,
        "out": args.out,
        "datasets": {},
    }
    for name in args.datasets.split(","):
        folder, info = ensure_dataset(params[name], args.workdir)
        sample = sample_queries(folder / "warc" / "bench.cdxj", args.queries + args.warmup, args.seed)
        res["datasets"][name] = {"captures": info["captures"]}
        for kind in args.kinds.split(","):
            job = {
                "kind": kind,
                "batch": args.batch,
                "body": args.body,
                "warmup": sample[: args.warmup],
                "queries": sample[args.warmup :],
            }
            print(f"{name}, {kind}: {len(job['queries'])} lookups a side ...", flush=True)
            entry = compare(job, folder, args.rounds)
            res["datasets"][name][kind] = entry
            print(f"  web-index {entry['web-index']}\n  pywb      {entry['pywb']}", flush=True)
            print(f"  differ {entry['answers_differ']}", flush=True)
    write(res)


def write(res: dict[str, Any]) -> None:
    """``results/lookup.*`` (single lookups) or ``results/lookup-batch.*`` (``--batch``)."""
    head = f"Run {res['date']} at {res['commit']}, web-index {res['web_index']} against pywb {res['pywb']}: "
    if res.get("batch"):
        stem = res.get("out") or "lookup-batch"
        intro = head + (
            f"{res['queries']:,} lookups a side as one batch (web-index: one `WebIndex.query` call of "
            "`SimplePageQuery` (latest) or `TimeAwarePageQuery` with the moment (closest), whole records "
            "with bodies; pywb: its CDXJ lookups one after another, the sum of their times), after a "
            f"warm-up batch of {res['warmup']:,}; {res['rounds']} rounds a side, alternated, the median "
            "round shown; every answer compared."
        )
        columns = ["batch s", "lookups/s", "peak RSS MiB", "RSS after MiB", "rounds s"]

        def cells(s: dict[str, Any]) -> list[Any]:
            rounds = ", ".join(f"{x:.2f}" for x in s["round_batch_s"])
            rate = f"{round(res['queries'] / s['batch_s']):,}"
            return [s["batch_s"], rate, s["peak_rss_mib"], s.get("rss_after_mib", ""), rounds]
    else:
        stem = "lookup-body" if res.get("body") else "lookup"
        body = (
            " with the capture's body (web-index: `closest_capture`, the capture and its response, as "
            "the Resource API and `id_` load it; pywb: the CDXJ lookup, then its WARC record read at "
            "its offset, inflated and parsed with warcio, the payload read)"
            if res.get("body")
            else ""
        )
        intro = head + (
            f"{res['queries']:,} single lookups a side (limit 1; closest: `closest=TS`, latest: "
            f"`sort=reverse`){body}, one at a time in one process, "
            f"after {res['warmup']:,} warm-up lookups; {res['rounds']} rounds a side, alternated, the round "
            "with the median p50 shown (every round's p50 in the JSON); every answer compared."
        )
        columns = ["p50 ms", "p90 ms", "p99 ms", "mean ms", "peak RSS MiB"]

        def cells(s: dict[str, Any]) -> list[Any]:
            return [s["p50_ms"], s["p90_ms"], s["p99_ms"], s["mean_ms"], s["peak_rss_mib"]]

    lines = [
        intro,
        "",
        "| " + " | ".join(["dataset", "captures", "lookup", "side", *columns, "differing"]) + " |",
        "|---|---:|---|---|" + "---:|" * len(columns) + "---:|",
    ]
    for name, d in res["datasets"].items():
        for kind, k in d.items():
            if kind == "captures":
                continue
            for side in ("web-index", "pywb"):
                first = side == "web-index"
                row = [name, d["captures"], kind] if first else ["", "", ""]
                row += [side, *cells(k[side]), k["answers_differ"] if first else ""]
                lines.append("| " + " | ".join(str(x) for x in row) + " |")
    save(stem, res, lines)


if __name__ == "__main__":
    main()
