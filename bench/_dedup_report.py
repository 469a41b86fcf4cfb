"""The report of bench/dedup_bench.py: its results as the Markdown tables of
bench/results/dedup.md, each row against issue 48's target."""

from __future__ import annotations

from typing import Any

PARTS = ("get", "get-metadata", "head", "head-metadata", "_index", "_captures")  # what a store counts
TARGETS = {
    "book_second_crawl": 0.1,
    "book_vs_warc": 1.0,
    "synthetic_growth": 0.15,
    "lookup": 1.2,
    "ingest": 0.9,
}


def table(head: list[str], rows: list[list[Any]]) -> list[str]:
    fmt = [lambda v: f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)][0]
    out = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    return ["", *out, *("| " + " | ".join(fmt(v) for v in r) + " |" for r in rows), ""]


def report(rec: dict[str, Any]) -> list[str]:
    b, s, lk, ing = (rec.get(k) for k in ("book", "synthetic", "lookups", "ingest"))
    rows: list[list[Any]] = []

    def row(name: str, text: str, value: float, target: float, most: bool = True) -> None:
        met = "yes" if (value <= target if most else value >= target) else "**no**"
        rows.append([name, text, f"{'≤' if most else '≥'} {target}", met])

    if b:
        n, o = b["new"], b["old"]
        added = f"{n['second_crawl_added']:,} B of {n['runs'][0]['bytes']['total']:,}"
        row(
            "book crawled twice: bytes the 2nd adds ÷ the 1st's",
            f"**{n['ratio_second']}** ({added}; old code {o['ratio_second']})",
            n["ratio_second"],
            TARGETS["book_second_crawl"],
        )
        for i, after in enumerate(("one crawl", "both crawls")):
            x = n["store_vs_export"][i]
            row(
                f"book store ÷ export-warc's WARC.gz + CDXJ, after {after}",
                f"**{x}** (old code {o['store_vs_export'][i]})",
                x,
                TARGETS["book_vs_warc"],
            )
    for when in (w for w in ("next-month", "same-month") if s and w in s):
        w = s[when]
        row(
            f"synthetic re-crawl ({when}): growth shared ÷ unshared",
            f"**{w['ratio']}** (+{w['shared']['growth']:.1%} against +{w['unshared']['growth']:.1%})",
            w["ratio"],
            TARGETS["synthetic_growth"],
        )
    if lk:
        r = lk["ratios"]
        row(
            "lookup, Resource API: holder req/s ÷ ref req/s",
            f"**{r['resource_rps_holder_vs_ref']}** (p50 ref ÷ "
            f"holder {r['resource_p50_ref_vs_holder']}; unshared ÷ ref {r['resource_rps_unshared_vs_ref']})",
            r["resource_rps_holder_vs_ref"],
            TARGETS["lookup"],
        )
        row(
            f"lookup, batch of {lk['n']:,} SimplePageQuery: ref s ÷ holder s",
            f"**{r['batch_ref_vs_holder']}** (ref ÷ the same URLs unshared: {r['batch_ref_vs_unshared']})",
            r["batch_ref_vs_holder"],
            TARGETS["lookup"],
        )
    for m, name in (("buffered", "insert_many (durable) + flush + compact"), ("bulk", "bulk_load")):
        if ing:
            x = ing["summary"][m]
            row(
                f"{name}: records/s new ÷ old",
                f"best **{x['best_new_vs_old']}**, median {x['median_new_vs_old']}",
                min(x["best_new_vs_old"], x["median_new_vs_old"]),
                TARGETS["ingest"],
                most=False,
            )
    code, old = rec["code"], rec["baseline_code"]
    lines = [
        f"# Identical payloads stored once (issue 48), {rec['date']}",
        "",
        f"Code {code['commit']} (src tree {code['tree']}) against {old['src']} ({old['commit']}), "
        f"{rec['machine']['cpus']} cores ({rec['machine']['cpu']}); `{rec['command']}`.",
        *table(["workload", "figure", "target", "met"], rows),
    ]
    for part in ("book", "synthetic", "lookups", "ingest"):
        if (rec.get(part) or {}).get("kept_from"):
            lines.append(f"The {part} part is kept from an earlier run ({rec[part]['kept_from']}).")
    if b:
        lines += [
            "",
            "The book's store in bytes (counted: " + ", ".join(f"`{p}/`" for p in PARTS) + "; `get/`'s "
            "body column apart; not counted: `_buffer/`, `_crawl/`, `_locks/`, `_tmp/`, the rest):",
        ]
        lines += table(
            ["code, after", *PARTS, "body column", "store", "WARC.gz", "CDXJ"],
            [
                [
                    f"{side}, crawl {i + 1}",
                    *(r["bytes"]["parts"][p] for p in PARTS),
                    r["bytes"]["get_body_column"],
                    r["bytes"]["total"],
                    r["export"]["warc.gz"],
                    r["export"]["cdxj"],
                ]
                for side in ("new", "old")
                for i, r in enumerate(b[side]["runs"])
            ],
        )
        cols = b["new"]["get_columns"]
        lines.append(
            "The new code's `get/` after both crawls, by column (compressed bytes): "
            + ", ".join(f"`{k}` {v:,}" for k, v in list(cols.items())[:8])
            + "."
        )
        c = b["answers_compared"]
        lines.append(
            f"Every capture's body (`id_`, `resource`) compared between the codes: {c['captures']:,} "
            f"captures of {c['urls']} URLs, none differ."
        )
    if s:
        j, f = s["job"], s["first"]
        lines += [
            "",
            f"Synthetic: {j['pages']:,} pages over {j['domains']:,} domains (Zipf), bench/synth.py's URLs "
            f"and HTML bodies of ~{j['body_kb']} KB, 10% with a redirect hop, bulk-loaded in 2024-01 "
            f"({f['bytes']['total']:,} B, {f['load']['seconds']} s); the re-crawl ({j['changed']:.0%} of "
            "bodies changed) bulk-loaded into copies of it:",
        ]
        lines += table(
            ["re-crawl", "side", *PARTS, "store after", "growth", "load + verify s", "verify"],
            [
                [
                    w,
                    side,
                    *(s[w][side]["bytes"]["parts"][p] for p in PARTS),
                    s[w][side]["bytes"]["total"],
                    f"{s[w][side]['growth']:.1%}",
                    s[w][side]["load"]["seconds"],
                    s[w][side]["load"]["verify_ok"],
                ]
                for w in ("next-month", "same-month")
                if w in s
                for side in ("shared", "unshared")
            ],
        )
        if "next-month" in s:
            cols = s["next-month"]["shared"]["get_columns_2024_02"]
            lines.append(
                "The shared re-crawl's `get/2024/02` files by column (compressed bytes): "
                + ", ".join(f"`{k}` {v:,}" for k, v in list(cols.items())[:8])
                + "."
            )
        lines.append(
            "Before the re-crawl: " + ", ".join(f"`{p}` {f['bytes']['parts'][p]:,}" for p in PARTS) + "."
        )
    if lk:

        def got(k: str) -> Any:
            return lk.get(k, rec[k])

        lines += [
            "",
            f"Lookups on the next-month stores ({lk['marked']}); best of {got('rounds')} rounds, alternated; "
            f"Resource API: {got('connections')} connections for {got('seconds')} s each. "
            "Answers (payload SHA-1) equal the generator's bodies in every case.",
        ]
        lines += table(
            ["case", "batch s", "batch again s", "resource req/s", "p50 ms", "p99 ms", "server ms/req"],
            [
                [
                    c,
                    min(x["seconds"] for x in lk["batch"][c]),
                    min(x["again_s"] for x in lk["batch"][c]),
                    *(
                        lk["best_resource"][c][k]
                        for k in ("req_per_s", "p50_ms", "p99_ms", "server_cpu_ms_per_req")
                    ),
                ]
                for c in lk["batch"]
            ],
        )
    if ing:
        lines += [
            "",
            f"Ingest: load_bench.py's items ({ing['records_argument']:,} GET attempts, 2 KB bodies, none "
            "identical), timed to a compacted, indexed store, each round a fresh process and store:",
        ]
        lines += table(
            ["mode, code", "seconds, every round", "best GET records/s"],
            [
                [
                    k,
                    ", ".join(str(round(x["seconds"], 1)) for x in rs),
                    max(x["get_records_per_s"] for x in rs),
                ]
                for k, rs in ing["runs"].items()
            ],
        )
    return lines
