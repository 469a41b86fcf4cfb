"""A deterministic synthetic web-index store for the benchmarks.

The shape follows the performance issue: a Zipf-like spread of URLs over many
domains, six months of fetches, 1-4 fetches per URL, ~10% failed attempts
(metadata only), HEAD attempts, several calibres, redirect chains on ~10% of
GETs and HTML-like bodies of a few KB that compress like real pages.

The store is written through the store's own insert path (``insert_many`` with
``durable=False`` and a flush policy that never flushes on its own, then one
``flush()`` and one ``compact()``), so its files are exactly what web-index
writes. A built dataset is cached under ``bench/data/<params-hash>/`` and reused:

    <dataset>/store/          the web-index store
    <dataset>/manifest.parquet  one row per stored attempt (url, method, ts, request_id, ...)
    <dataset>/info.json       the parameters, counts and build times; written last
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import hashlib
import json
import random
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from web_index import FlushPolicy, WebIndex
from web_index.models import AttemptMetadata, AttemptState, Response

# Bump when the generator's output changes, so that stale caches are not reused.
GENERATOR_VERSION = 1
DATA_DIR = Path(__file__).resolve().parent / "data"
START = datetime(2024, 1, 1, tzinfo=UTC)
MONTHS = 6
_SPAN_US = int(timedelta(days=182).total_seconds() * 1_000_000)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# (name, version, calibre, weight): cheap fetchers do most of the work.
FETCHERS = [
    ("httpx", "0.28.1", 10, 0.55),
    ("curl-cffi", "0.7.4", 30, 0.25),
    ("playwright-chromium", "1.50.0", 60, 0.15),
    ("residential-browser", "2.3.0", 80, 0.05),
]
FAILED_STATES = ["timeout", "unreachable", "ssl-error", "blocked", "low-quality", "error", "retryable-error"]
_TLDS = ["com", "com", "com", "org", "net", "de", "co.uk", "io", "fr", "nl"]
_SECTIONS = ["news", "blog", "products", "docs", "about", "category", "article", "p", "shop", "help"]
_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dog",
    "market",
    "report",
    "update",
    "analysis",
    "price",
    "water",
    "energy",
    "city",
    "council",
    "school",
    "health",
    "research",
    "study",
    "data",
    "model",
    "system",
    "network",
    "service",
    "customer",
    "support",
    "review",
    "guide",
    "release",
    "notes",
    "version",
    "policy",
    "privacy",
    "terms",
    "contact",
    "team",
    "company",
    "history",
    "mission",
    "value",
    "growth",
    "season",
    "weather",
    "forecast",
    "travel",
    "hotel",
    "flight",
    "garden",
    "recipe",
    "kitchen",
    "music",
    "film",
    "book",
    "library",
]


@dataclass(frozen=True)
class SynthParams:
    """What a dataset is; its hash names the cache folder."""

    records: int = 200_000  # successful GET attempts (pages); each has a metadata record too
    domains: int = 10_000
    zipf_s: float = 1.0
    fail_rate: float = 0.10
    redirect_rate: float = 0.10
    head_rate: float = 0.10  # share of URLs that also get one HEAD attempt
    body_kb: float = 3.0  # mean body size
    seed: int = 20240101

    def digest(self) -> str:
        text = json.dumps({**dataclasses.asdict(self), "v": GENERATOR_VERSION}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Spec:
    """One attempt to insert, before its objects are built (cheap to hold by the million)."""

    method: str  # "get" | "head"
    url: str
    ts_us: int
    fetcher: int  # index into FETCHERS
    state: str
    hops: int  # responses in the chain (0 for a failed attempt)
    body_seed: int


# -- the shape of the data ------------------------------------------------------


def domain_names(n: int, rng: random.Random) -> list[str]:
    """``n`` distinct registrable domains, most popular first."""
    out = []
    for rank in range(n):
        word = rng.choice(_WORDS)
        out.append(f"{word}{rank}.{rng.choice(_TLDS)}")
    return out


def zipf_cum_weights(n: int, s: float) -> list[float]:
    total = 0.0
    out = []
    for rank in range(1, n + 1):
        total += 1.0 / rank**s
        out.append(total)
    return out


def url_for(domain: str, serial: int, rng: random.Random) -> str:
    host = rng.choice(["www.", "www.", "", "blog.", "shop."]) + domain
    path = f"/{rng.choice(_SECTIONS)}/{rng.choice(_WORDS)}-{serial}"
    if rng.random() < 0.15:
        path += f"?id={rng.randrange(10**6)}&ref={rng.choice(_WORDS)}"
    elif rng.random() < 0.5:
        path += ".html"
    return f"https://{host}{path}"


def missing_url(domain: str, serial: int) -> str:
    """A URL under ``domain`` that the generator never fetches (a query miss)."""
    return f"https://www.{domain}/never-fetched/page-{serial}"


def plan_attempts(p: SynthParams) -> tuple[list[Spec], list[str]]:
    """Every attempt of the dataset in time order, and the domain list.

    URLs are drawn until ``p.records`` successful GET attempts exist.
    """
    rng = random.Random(p.seed)
    domains = domain_names(p.domains, rng)
    cum = zipf_cum_weights(p.domains, p.zipf_s)
    fetcher_cum = list(_accumulate([f[3] for f in FETCHERS]))
    specs: list[Spec] = []
    pages = 0
    serial = 0
    # Every domain gets at least one URL first, so that all of them exist in the store.
    while pages < p.records:
        if serial < p.domains:
            domain = domains[serial]
        else:
            domain = domains[bisect.bisect_left(cum, rng.random() * cum[-1])]
        url = url_for(domain, serial, rng)
        serial += 1
        fetches = rng.choices([1, 2, 3, 4], weights=[0.4, 0.3, 0.2, 0.1])[0]
        for ts in sorted(rng.randrange(_SPAN_US) for _ in range(fetches)):
            if pages >= p.records:
                break
            fetcher = bisect.bisect_left(fetcher_cum, rng.random() * fetcher_cum[-1])
            if rng.random() < p.fail_rate:
                specs.append(Spec("get", url, _ts0() + ts, fetcher, rng.choice(FAILED_STATES), 0, 0))
                continue
            hops = 1 + (rng.choice([1, 1, 2]) if rng.random() < p.redirect_rate else 0)
            specs.append(Spec("get", url, _ts0() + ts, fetcher, "success", hops, rng.getrandbits(32)))
            pages += 1
        if rng.random() < p.head_rate:
            ts = _ts0() + rng.randrange(_SPAN_US)
            ok = rng.random() >= p.fail_rate
            fetcher = bisect.bisect_left(fetcher_cum, rng.random() * fetcher_cum[-1])
            specs.append(Spec("head", url, ts, fetcher, "success" if ok else "timeout", int(ok), 0))
    # Inserts arrive roughly in time order, as from a crawler.
    specs.sort(key=lambda s: s.ts_us)
    return specs, domains


def _accumulate(values: list[float]) -> Iterator[float]:
    total = 0.0
    for v in values:
        total += v
        yield total


def _ts0() -> int:
    return int((START - _EPOCH).total_seconds() * 1_000_000)


# -- building the objects ---------------------------------------------------------


class BodyMaker:
    """HTML-like bodies: shared boilerplate plus paragraphs from a fixed pool.

    Real pages of one site share most of their markup and pages of the web
    share vocabulary, so the bodies compress roughly like real HTML (several
    times), unlike random bytes (not at all) or one repeated page (absurdly).
    """

    def __init__(self, seed: int, mean_kb: float) -> None:
        rng = random.Random(seed ^ 0xB0D1)
        self.mean = mean_kb * 1024
        self.paragraphs = [
            "<p>" + " ".join(rng.choice(_WORDS) for _ in range(rng.randint(20, 80))) + "</p>\n"
            for _ in range(2048)
        ]

    def body(self, url: str, seed: int) -> bytes:
        rng = random.Random(seed)
        target = rng.uniform(0.3, 1.7) * self.mean
        parts = [
            "<!doctype html>\n<html lang=en><head><meta charset=utf-8>",
            f"<title>{url.rsplit('/', 1)[-1]}</title><link rel=stylesheet href=/static/site.css>",
            "</head>\n<body><nav><a href=/>Home</a> <a href=/news>News</a> <a href=/about>About</a></nav>",
            f"<main><h1>{url}</h1>\n",
        ]
        size = sum(map(len, parts))
        while size < target:
            para = self.paragraphs[rng.randrange(len(self.paragraphs))]
            parts.append(para)
            size += len(para)
        parts.append(f"</main><footer>id {seed:08x}</footer></body></html>\n")
        return "".join(parts).encode()


def build_item(spec: Spec, bodies: BodyMaker) -> tuple[str, str, datetime, AttemptMetadata, list[Response]]:
    """The ``insert_many`` item of one spec."""
    name, version, calibre, _ = FETCHERS[spec.fetcher]
    ts = _EPOCH + timedelta(microseconds=spec.ts_us)
    ok = spec.state == "success"
    meta = AttemptMetadata(
        state=AttemptState(spec.state),
        url=spec.url,
        fetcher_name=name,
        fetcher_version=version,
        fetcher_calibre=calibre,
        run_time=0.05 + (spec.body_seed % 1000) / 400,
        logs=None if ok else f"{spec.state} fetching {spec.url}",
        traceback=None if ok else "Traceback (most recent call last):\n  ...\nFetchError",
    )
    chain = []
    for i in range(spec.hops):
        final = i == spec.hops - 1
        request_url = spec.url if final else spec.url.replace("https://", "http://", 1) + f"?r={i}"
        body: bytes | None = None
        if spec.method == "get":
            body = bodies.body(spec.url, spec.body_seed) if final else b""
        chain.append(
            Response(
                url=spec.url,
                request_url=request_url,
                status_code=200 if final else 301,
                headers={"content-type": "text/html; charset=utf-8", "server": "nginx"}
                if final
                else {"location": spec.url},
                timestamp=ts + timedelta(milliseconds=80 * (i + 1)),
                data=body,
                is_final=final,
                fetcher_name=name,
                fetcher_version=version,
                fetcher_calibre=calibre,
            )
        )
    return spec.method, spec.url, ts, meta, chain


# -- the cached dataset -------------------------------------------------------------

_MANIFEST_SCHEMA_FIELDS: list[pa.Field[Any]] = [
    pa.field("url", pa.string()),
    pa.field("method", pa.string()),
    pa.field("ts_us", pa.int64()),
    pa.field("request_id", pa.string()),
    pa.field("calibre", pa.uint8()),
    pa.field("success", pa.bool_()),
    pa.field("hops", pa.uint8()),
]
_MANIFEST_SCHEMA = pa.schema(_MANIFEST_SCHEMA_FIELDS)


def dataset_dir(p: SynthParams) -> Path:
    return DATA_DIR / f"{p.records}-{p.digest()}"


def load_info(folder: Path) -> dict[str, Any] | None:
    """The dataset's info, or ``None`` if it is missing or was never finished."""
    path = folder / "info.json"
    if not path.exists():
        return None
    info: dict[str, Any] = json.loads(path.read_text())
    return info


def ensure_dataset(p: SynthParams, folder: Path, *, batch: int = 5_000, log: Any = print) -> dict[str, Any]:
    """Build the dataset in ``folder`` unless a finished one with these parameters is there."""
    info = load_info(folder)
    if info is not None and info["params"] == dataclasses.asdict(p):
        return info
    if folder.exists():
        shutil.rmtree(folder)  # a half-built or different dataset: start again
    folder.mkdir(parents=True)
    t0 = time.perf_counter()
    specs, domains = plan_attempts(p)
    t_plan = time.perf_counter() - t0
    log(f"generating {len(specs):,} attempts over {len(domains):,} domains into {folder}")
    store = folder / "store"
    # Nothing flushes or compacts until we say so: one part file per partition.
    policy = FlushPolicy(max_rows=1 << 40, max_bytes=1 << 60, max_age_s=1e9, compact_parts=0)
    bodies = BodyMaker(p.seed, p.body_kb)
    manifest: list[dict[str, Any]] = []
    t1 = time.perf_counter()
    with WebIndex(store, durable=False, policy=policy) as idx:
        for start in range(0, len(specs), batch):
            chunk = specs[start : start + batch]
            keys = idx.insert_many([build_item(s, bodies) for s in chunk])
            for s, k in zip(chunk, keys, strict=True):
                manifest.append(_manifest_row(s, k.request_id))
            if start // batch % 20 == 0:
                log(f"  inserted {start + len(chunk):,}/{len(specs):,}")
        t2 = time.perf_counter()
        log(f"  inserted in {t2 - t1:.1f}s; flushing")
        idx.flush()
        t3 = time.perf_counter()
        log(f"  flushed in {t3 - t2:.1f}s; compacting")
        with _memoised_listing(idx):
            idx.compact()
        t4 = time.perf_counter()
        log(f"  compacted in {t4 - t3:.1f}s")
    pq.write_table(pa.Table.from_pylist(manifest, schema=_MANIFEST_SCHEMA), folder / "manifest.parquet")
    info = {
        "params": dataclasses.asdict(p),
        "generator_version": GENERATOR_VERSION,
        "attempts": len(specs),
        "get_pages": sum(1 for s in specs if s.method == "get" and s.hops),
        "get_response_rows": sum(s.hops for s in specs if s.method == "get"),
        "get_failed": sum(1 for s in specs if s.method == "get" and not s.hops),
        "head_attempts": sum(1 for s in specs if s.method == "head"),
        "urls": len({s.url for s in specs}),
        "domains": len(domains),
        "seconds": {
            "plan": round(t_plan, 2),
            "insert_non_durable": round(t2 - t1, 2),
            "flush": round(t3 - t2, 2),
            "compact": round(t4 - t3, 2),
        },
    }
    (folder / "info.json").write_text(json.dumps(info, indent=2))  # last: marks the dataset complete
    return info


@contextlib.contextmanager
def _memoised_listing(idx: WebIndex) -> Iterator[None]:
    """Serve the store's month-folder listings from a cache while we compact.

    ``Store.compact`` lists the whole month folder again for every partition it
    compacts (``Store.partition_files`` -> ``month_files``), which is quadratic
    in the number of partitions: hours for this store. The generator is the
    only process touching the store and visits each partition once, so a
    listing taken before it changes is still right for every partition not yet
    compacted. The files written are exactly what ``compact()`` writes; only
    the repeated listing is skipped. The compaction workload measures the
    unpatched path. If the internals change, this falls back to doing nothing.
    """
    store = getattr(idx, "_store", None)
    original = getattr(store, "month_files", None)
    if store is None or original is None:
        yield
        return
    cache: dict[tuple[Any, int, int], Any] = {}

    def month_files(type: Any, year: int, month: int) -> Any:
        key = (type, year, month)
        if key not in cache:
            cache[key] = original(type, year, month)
        return cache[key]

    store.month_files = month_files
    try:
        yield
    finally:
        del store.month_files


def _manifest_row(s: Spec, request_id: str) -> dict[str, Any]:
    return {
        "url": s.url,
        "method": s.method,
        "ts_us": s.ts_us,
        "request_id": request_id,
        "calibre": FETCHERS[s.fetcher][2],
        "success": s.state == "success",
        "hops": s.hops,
    }
