"""Finding every capture of a payload: ``lookup_digest`` against the peer a
store without stored digests would need (scanning every page and hashing its
body), on the same synthetic store in the same run.

    .venv/bin/python bench/digest_bench.py [--records 200000]

Results: bench/results/digest.json and .md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import synth
from web_index import WebIndex
from web_index.models import Page, sha1_text

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    params = synth.SynthParams(records=args.records)
    folder = synth.dataset_dir(params)
    info = synth.ensure_dataset(params, folder)
    store = folder / "store"
    with WebIndex(store, read_only=True) as index:
        # Some bodies to look for: the first pages a scan meets.
        pages = []
        for page in index.scan():
            assert isinstance(page, Page)
            pages.append(page)
            if len(pages) == 100:
                break
        digests = [p.final.payload_digest for p in pages if p.final.payload_digest]
        one = digests[:1]

        def timed(step: object) -> tuple[float, object]:
            best, result = float("inf"), None
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                result = step()  # type: ignore[operator]
                best = min(best, time.perf_counter() - t0)
            return best, result

        one_s, hits = timed(lambda: index.lookup_digest(*one))
        many_s, many_hits = timed(lambda: index.lookup_digest(*digests))
        # The peer: what finding a payload costs without stored digests.
        t0 = time.perf_counter()
        wanted = set(one)
        scanned = found = 0
        for page in index.scan():
            assert isinstance(page, Page)
            for r in page.responses:
                scanned += 1
                if r.data is not None:
                    found += sha1_text(hashlib.sha1(r.data).digest()) in wanted
        peer_s = time.perf_counter() - t0
    assert found == len(hits), (found, len(hits))  # type: ignore[arg-type]
    result = {
        "records": args.records,
        "store_bytes": info.get("store_bytes"),
        "responses_scanned": scanned,
        "lookup_one_s": round(one_s, 3),
        "lookup_one_hits": len(hits),  # type: ignore[arg-type]
        "lookup_100_s": round(many_s, 3),
        "lookup_100_hits": len(many_hits),  # type: ignore[arg-type]
        "peer_scan_and_hash_s": round(peer_s, 2),
        "speedup_vs_peer": round(peer_s / one_s, 1),
    }
    out = HERE / "results"
    (out / "digest.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "digest.md").write_text(
        "| store | lookup_digest (1 digest) | (100 digests) | peer: scan + hash every body | speed-up |\n"
        "|---|---|---|---|---|\n"
        f"| {args.records:,} pages, {scanned:,} responses | {one_s:.2f} s | {many_s:.2f} s | "
        f"{peer_s:.1f} s | {peer_s / one_s:.0f}x |\n"
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
