"""A child process for the crash and concurrency tests.

    python -m tests._worker write STORE SEED [MAX_ROWS]   insert forever, print each acknowledged key
    python -m tests._worker compact STORE                 compact forever
    python -m tests._worker once STORE SEED N             insert N, flush, compact (for crash points)

Each acknowledged key is printed as one JSON line *after* insert returns, so
the parent knows exactly what the store has promised to keep.
"""

from __future__ import annotations

import json
import random
import sys
from datetime import timedelta

from tests.factories import T0, attempt
from web_index import FlushPolicy, WebIndex

HOSTS = ["a.example.com", "b.example.com", "c.example.org"]


def body_of(url: str) -> bytes:
    """Every attempt of a URL gets the same body, long enough to be stored once
    and referred to (storage/_dedupe.py) for half the paths: re-crawls share payloads."""
    if int(url.rsplit("/p", 1)[1]) % 2:
        return f"short {url}".encode()
    return f"the same payload for {url}, ".encode() * 12


def make(rng: random.Random, n: int) -> tuple[object, ...]:
    url = f"https://{rng.choice(HOSTS)}/p{rng.randrange(20)}"
    ts = T0 + timedelta(days=rng.randrange(50), seconds=rng.randrange(86400))
    state = rng.choice(["success", "success", "success", "timeout"])
    return attempt(
        url, ts, state=state, hops=rng.randint(1, 3), calibre=rng.choice([10, 60]), body=body_of(url)
    )


def emit(key: object, hops: int) -> None:
    k = key.to_dict()  # type: ignore[attr-defined]
    k["hops"] = hops
    sys.stdout.write(json.dumps(k) + "\n")
    sys.stdout.flush()


def main() -> None:
    mode, store = sys.argv[1], sys.argv[2]
    if mode == "compact":
        with WebIndex(store) as index:
            while True:
                index.compact()
    seed = int(sys.argv[3])
    rng = random.Random(seed)
    if mode == "write":
        max_rows = int(sys.argv[4]) if len(sys.argv) > 4 else 7
        with WebIndex(store, policy=FlushPolicy(max_rows=max_rows, compact_parts=3)) as index:
            n = 0
            while True:
                n += 1
                item = make(rng, n)
                key = index.insert(*item)  # type: ignore[arg-type]
                emit(key, len(item[4]))  # type: ignore[arg-type]
    elif mode == "once":
        count = int(sys.argv[4])
        with WebIndex(store, policy=FlushPolicy(max_rows=10**9, compact_parts=0)) as index:
            for n in range(count):
                item = make(rng, n)
                emit(index.insert(*item), len(item[4]))  # type: ignore[arg-type]
            index.flush()
            sys.stdout.write("flushed\n")
            sys.stdout.flush()
            for n in range(count, 2 * count):
                item = make(rng, n)
                emit(index.insert(*item), len(item[4]))  # type: ignore[arg-type]
            index.flush()
            index.compact()
            sys.stdout.write("done\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
