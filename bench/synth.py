"""A deterministic synthetic web-index store for the benchmarks.

The shape follows the performance issue: a Zipf-like spread of URLs over many
domains, six months of fetches, 1-4 fetches per URL, ~10% failed attempts
(metadata only), HEAD attempts, several calibres, redirect chains on ~10% of
GETs and HTML-like bodies of a few KB that compress like real pages.

Every attempt goes through the store's own validation (``validate_attempt``, as
``insert_many`` does), and its rows are written straight into the files a
``compact()`` would leave: one ``<domain>.parquet`` per partition, built with the
store's own ``rows_to_table``, ``sort_dedupe`` and ``write_partition_file``. Two
worker processes share the domains (balanced by planned load). A final
``WebIndex.compact()`` finds nothing to do. A built dataset is cached under
``bench/data/<records>-<params-hash>/`` and reused:

    <dataset>/store/          the web-index store
    <dataset>/manifest.parquet  one row per stored attempt (url, method, ts, request_id, ...)
    <dataset>/info.json       the parameters, counts, sizes and build times; written last
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import multiprocessing
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from web_index import WebIndex
from web_index.ingest import validate_attempt
from web_index.models import AttemptMetadata, AttemptState, RecordType, Response
from web_index.storage._files import WriteOptions, write_partition_file
from web_index.storage._layout import Partition
from web_index.storage._tables import rows_to_table, sort_dedupe
from web_index.storage.backends import LocalBackend
from web_index.storage.indexes._month_format import COVERS_KEY, read_covers

# Bump when the generator's output changes, so that stale caches are not reused.
# 2: files written directly in compacted form (request ids no longer in time order).
GENERATOR_VERSION = 2
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
    domain: int  # rank of the URL's domain (index into the domain list)


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
        rank = serial if serial < p.domains else bisect.bisect_left(cum, rng.random() * cum[-1])
        url = url_for(domains[rank], serial, rng)
        serial += 1
        fetches = rng.choices([1, 2, 3, 4], weights=[0.4, 0.3, 0.2, 0.1])[0]
        for ts in sorted(rng.randrange(_SPAN_US) for _ in range(fetches)):
            if pages >= p.records:
                break
            fetcher = bisect.bisect_left(fetcher_cum, rng.random() * fetcher_cum[-1])
            if rng.random() < p.fail_rate:
                specs.append(Spec("get", url, _ts0() + ts, fetcher, rng.choice(FAILED_STATES), 0, 0, rank))
                continue
            hops = 1 + (rng.choice([1, 1, 2]) if rng.random() < p.redirect_rate else 0)
            specs.append(Spec("get", url, _ts0() + ts, fetcher, "success", hops, rng.getrandbits(32), rank))
            pages += 1
        if rng.random() < p.head_rate:
            ts = _ts0() + rng.randrange(_SPAN_US)
            ok = rng.random() >= p.fail_rate
            fetcher = bisect.bisect_left(fetcher_cum, rng.random() * fetcher_cum[-1])
            specs.append(Spec("head", url, ts, fetcher, "success" if ok else "timeout", int(ok), 0, rank))
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
# A worker's share of the manifest also has each attempt's place in the plan, to merge in plan order.
_SHARE_SCHEMA = _MANIFEST_SCHEMA.append(pa.field("order", pa.int64()))
# A worker's phases: planning (every worker plans everything), building and validating the
# attempts, building the sorted tables, writing the files.
_PHASES = ("plan", "validate", "tables", "write")
_TYPES = [RecordType.GET, RecordType.GET_METADATA, RecordType.HEAD, RecordType.HEAD_METADATA]
# Attempts validated and held in memory at once by a worker (whole domain-months only, so a
# partition's rows are always all in one chunk).
CHUNK_ATTEMPTS = 20_000


def store_code() -> str:
    """A fingerprint of what the current store code writes, for telling stale datasets.

    A tiny fixed dataset (request ids fixed too) is written the generator's
    way, ``compact()`` builds its key index, and every file's bytes are hashed:
    equal fingerprints mean the store would write a dataset's files the same
    way today (rows, schemas, write options, key index). Not in the cache key:
    the store changes often while it is worked on, and a rebuild takes minutes.
    """
    p = SynthParams(records=60, domains=4, seed=7)
    specs, domains = plan_attempts(p)
    seconds = dict.fromkeys(_PHASES, 0.0)
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(prefix="wi-store-code-") as tmp:
        store = Path(tmp)
        attempts = list(enumerate(specs))
        stats = _new_stats(attempts)
        _write_chunk(
            LocalBackend(store),
            attempts,
            BodyMaker(p.seed, p.body_kb),
            domains,
            stats,
            seconds,
            fixed_ids=True,
        )
        with WebIndex(store) as idx:
            idx.compact()
        for path in sorted(store.rglob("*.parquet")):
            rel = path.relative_to(store).as_posix()
            if rel.startswith(("_buffer/", "_tmp/", "_locks/")):
                continue
            if rel.startswith("_index/"):
                # An index records its folder's version when the build was late
                # enough to take one (inode, mtime): hash what it says, not that.
                # Its covers name each file's version too (inode and mtime): keep name, size,
                # domain; and its checksum is of bytes that hold them.
                meta = dict(pq.read_metadata(path).metadata or {})
                meta.pop(b"web_index.index.listed", None)
                meta.pop(b"web_index.checksum", None)
                covers = read_covers(pq.ParquetFile(path))
                meta[COVERS_KEY] = repr([(c.name, c.size, c.domain) for c in covers or []]).encode()
                table = pq.read_table(path)
                digest.update(rel.encode() + b"\0" + repr(sorted(meta.items())).encode())
                digest.update(repr(table.to_pydict()).encode())
                continue
            digest.update(rel.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def dataset_dir(p: SynthParams) -> Path:
    return DATA_DIR / f"{p.records}-{p.digest()}"


def load_info(folder: Path) -> dict[str, Any] | None:
    """The dataset's info, or ``None`` if it is missing or was never finished."""
    path = folder / "info.json"
    if not path.exists():
        return None
    info: dict[str, Any] = json.loads(path.read_text())
    return info


def ensure_dataset(
    p: SynthParams,
    folder: Path,
    *,
    workers: int = 2,
    chunk_attempts: int = CHUNK_ATTEMPTS,
    log: Any = print,
) -> dict[str, Any]:
    """Build the dataset in ``folder`` unless a finished one with these parameters is there."""
    info = load_info(folder)
    if (
        info is not None
        and info["params"] == dataclasses.asdict(p)
        and info.get("generator_version") == GENERATOR_VERSION
    ):
        # Derived indexes of an older format (written by older code) are not read: compact()
        # writes those of this code's formats and removes the others (nothing to do otherwise).
        t0 = time.perf_counter()
        with WebIndex(folder / "store") as idx:
            idx.compact()
        log(f"reusing {folder}: its indexes brought up to date in {time.perf_counter() - t0:.1f}s")
        return info
    if folder.exists():
        shutil.rmtree(folder)  # a half-built or different dataset: start again
    folder.mkdir(parents=True)
    store = folder / "store"
    store.mkdir()
    code = store_code()  # before the workers start: the code they import
    log(f"generating {p.records:,} GET records over {p.domains:,} domains into {folder} ({workers} workers)")
    t0 = time.perf_counter()
    # Spawned, not forked: the parent may have polars' and Arrow's thread pools running.
    # A worker that dies fails the build (BrokenProcessPool), where multiprocessing.Pool would
    # start another one forever.
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        jobs = [pool.submit(build_share, p, str(folder), k, workers, chunk_attempts) for k in range(workers)]
        shares: list[dict[str, Any]] = [job.result() for job in jobs]
    t1 = time.perf_counter()
    log(f"  workers done in {t1 - t0:.1f}s; merging the manifest")
    _merge_manifest(folder, workers)
    t2 = time.perf_counter()
    log(f"  manifest in {t2 - t1:.1f}s; compacting (nothing to do: every file is compacted already)")
    with WebIndex(store) as idx:
        changed = idx.compact()
    t3 = time.perf_counter()
    log(f"  compact() in {t3 - t2:.1f}s, {changed} partitions changed")
    counts = [
        "attempts",
        "get_pages",
        "get_response_rows",
        "get_failed",
        "head_attempts",
        "urls",
        "domains",
        "body_bytes",
        "body_zstd_bytes",
    ]
    info = {
        "params": dataclasses.asdict(p),
        "generator_version": GENERATOR_VERSION,
        "store_code": code,
        **{name: sum(s[name] for s in shares) for name in counts},
        "files": {t.value: sum(s["files"][t.value] for s in shares) for t in _TYPES},
        "file_bytes": {t.value: sum(s["file_bytes"][t.value] for s in shares) for t in _TYPES},
        "compact_changed_partitions": changed,
        "seconds": {
            # Per phase, the slowest worker's; the workers run side by side.
            **{k: round(max(s["seconds"][k] for s in shares), 2) for k in _PHASES},
            "workers": round(t1 - t0, 2),
            "manifest": round(t2 - t1, 2),
            "compact": round(t3 - t2, 2),
            "total": round(t3 - t0, 2),
        },
        "worker_seconds": [{k: round(s["seconds"][k], 2) for k in _PHASES} for s in shares],
        "worker_peak_rss_mb": [round(s["peak_rss_mb"]) for s in shares],
        "workers": workers,
    }
    (folder / "info.json").write_text(json.dumps(info, indent=2))  # last: marks the dataset complete
    return info


def build_share(p: SynthParams, folder: str, share: int, shares: int, chunk_attempts: int) -> dict[str, Any]:
    """One worker: plan everything, keep this share's domains, write their files.

    Each partition (type, year, month, domain) is written once, in final
    compacted form, from the rows ``validate_attempt`` returns: the same rows,
    sorted and de-duplicated by the store's own ``sort_dedupe``, written by its
    own ``write_partition_file``, as ``insert_many`` + ``flush()`` + ``compact()``
    would leave them.
    """
    t0 = time.perf_counter()
    specs, domains = plan_attempts(p)
    owner = assign_domains(specs, p.domains, shares)
    # Stable sort: by domain, then (already) by time, so that a domain-month is one run.
    mine = sorted(
        ((i, s) for i, s in enumerate(specs) if owner[s.domain] == share), key=lambda x: x[1].domain
    )
    del specs
    t_plan = time.perf_counter() - t0
    backend = LocalBackend(Path(folder) / "store")
    bodies = BodyMaker(p.seed, p.body_kb)
    stats = _new_stats(mine)
    manifest = pq.ParquetWriter(Path(folder) / f"manifest.{share}.parquet", _SHARE_SCHEMA)
    seconds = {"plan": t_plan, "validate": 0.0, "tables": 0.0, "write": 0.0}
    done, last_log = 0, time.perf_counter()
    for chunk in _chunks(mine, chunk_attempts):
        done += len(chunk)
        if time.perf_counter() - last_log > 60:
            last_log = time.perf_counter()
            files = sum(stats["files"].values())
            print(
                f"  worker {share}: {done:,}/{len(mine):,} attempts, {files:,} files, {last_log - t0:.0f}s",
                flush=True,
            )
        manifest_rows = _write_chunk(backend, chunk, bodies, domains, stats, seconds)
        manifest.write_table(pa.Table.from_pylist(manifest_rows, schema=_SHARE_SCHEMA))
    manifest.close()
    stats["seconds"] = seconds
    stats["peak_rss_mb"] = _peak_rss_mb()
    return stats


def _new_stats(attempts: list[tuple[int, Spec]]) -> dict[str, Any]:
    return {
        "attempts": len(attempts),
        "get_pages": 0,
        "get_response_rows": 0,
        "get_failed": 0,
        "head_attempts": 0,
        "urls": len({s.url for _, s in attempts}),  # a URL has one domain: the shares' URLs are disjoint
        "domains": len({s.domain for _, s in attempts}),
        "body_bytes": 0,
        "body_zstd_bytes": 0,
        "files": {t.value: 0 for t in _TYPES},
        "file_bytes": {t.value: 0 for t in _TYPES},
    }


_CODEC = pa.Codec("zstd", compression_level=3)


def _write_chunk(
    backend: LocalBackend,
    chunk: list[tuple[int, Spec]],
    bodies: BodyMaker,
    domains: list[str],
    stats: dict[str, Any],
    seconds: dict[str, float],
    *,
    fixed_ids: bool = False,
) -> list[dict[str, Any]]:
    """Validate a chunk of whole domain-months and write its partitions; return its manifest rows.

    ``fixed_ids``: request ids from the attempts' places in the plan instead of
    fresh ones (for :func:`store_code`, which must be deterministic).
    """
    options = WriteOptions()
    t = time.perf_counter()
    rows: dict[RecordType, list[dict[str, Any]]] = {t: [] for t in _TYPES}
    month_of: dict[str, tuple[int, int, str]] = {}  # request id -> (year, month, domain)
    manifest_rows: list[dict[str, Any]] = []
    for order, s in chunk:
        method, url, ts, meta, chain = build_item(s, bodies)
        rid = str(uuid.UUID(int=order + 1 | 0x7 << 76 | 0b10 << 62)) if fixed_ids else None
        a = validate_attempt(method, url, ts, meta, chain, request_id=rid)
        if a.domain != domains[s.domain]:
            raise AssertionError(f"{url}: partition domain {a.domain}, planned {domains[s.domain]}")
        month_of[a.request_id] = (a.year, a.month, a.domain)
        meta_row, response_rows = a.rows()
        rows[a.method.metadata].append(meta_row)
        rows[a.method].extend(response_rows)
        if s.method == "get":
            stats["get_response_rows"] += len(a.responses)
            if a.success:
                stats["get_pages"] += 1
                body = chain[-1].data or b""
                stats["body_bytes"] += len(body)
                stats["body_zstd_bytes"] += len(_CODEC.compress(body, asbytes=True))
            else:
                stats["get_failed"] += 1
        else:
            stats["head_attempts"] += 1
        manifest_rows.append({**_manifest_row(s, a.request_id), "order": order})
    seconds["validate"] += time.perf_counter() - t
    for type, type_rows in rows.items():
        if not type_rows:
            continue
        t = time.perf_counter()
        # One sort for the whole chunk, then each partition's rows taken in that order:
        # the sort key is unique (request id, chain index), so a partition's rows come out
        # exactly as sorting them alone would leave them.
        table = sort_dedupe(type, rows_to_table(type, type_rows))
        groups: dict[tuple[int, int, str], list[int]] = {}
        for i, request_id in enumerate(table.column("request_id").to_pylist()):
            groups.setdefault(month_of[request_id], []).append(i)
        seconds["tables"] += time.perf_counter() - t
        t = time.perf_counter()
        for (year, month, domain), index in groups.items():
            part = table if len(index) == table.num_rows else table.take(index)
            size = write_partition_file(
                backend, Partition(type, year, month, domain), part, options, part=None
            )
            stats["files"][type.value] += 1
            stats["file_bytes"][type.value] += size
        seconds["write"] += time.perf_counter() - t
    return manifest_rows


def assign_domains(specs: list[Spec], domains: int, shares: int) -> list[int]:
    """The worker of each domain rank: greedy, most popular first, to the least loaded.

    The load of a domain is its attempts plus a dozen per domain-month (each
    partition costs a few files to write). Deterministic, so every worker
    computes the same assignment from the same plan.
    """
    load = [0] * domains
    months: set[tuple[int, int]] = set()
    for s in specs:
        load[s.domain] += 1
        months.add((s.domain, s.ts_us // (28 * 86_400_000_000)))  # roughly a month: for weights only
    for rank, _ in months:
        load[rank] += 12
    totals = [0] * shares
    owner = [0] * domains
    for rank in sorted(range(domains), key=lambda r: -load[r]):
        k = min(range(shares), key=lambda i: totals[i])
        owner[rank] = k
        totals[k] += load[rank]
    return owner


def _chunks(mine: list[tuple[int, Spec]], size: int) -> Iterator[list[tuple[int, Spec]]]:
    """Runs of about ``size`` attempts, cut only between domain-months."""
    chunk: list[tuple[int, Spec]] = []
    last: tuple[int, int, int] | None = None
    for item in mine:
        s = item[1]
        when = _EPOCH + timedelta(microseconds=s.ts_us)
        unit = (s.domain, when.year, when.month)
        if unit != last and len(chunk) >= size:
            yield chunk
            chunk = []
        last = unit
        chunk.append(item)
    if chunk:
        yield chunk


def _merge_manifest(folder: Path, shares: int) -> None:
    """The shares' manifests as one, in plan (time) order."""
    paths = [folder / f"manifest.{k}.parquet" for k in range(shares)]
    table = pa.concat_tables([pq.read_table(path) for path in paths])
    table = table.sort_by("order").drop_columns(["order"])
    pq.write_table(table.cast(_MANIFEST_SCHEMA), folder / "manifest.parquet")
    for path in paths:
        path.unlink()


def _peak_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


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


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Build (or find) a cached synthetic dataset; print its info.")
    ap.add_argument("--records", type=int, default=SynthParams.records, help="successful GET attempts")
    ap.add_argument("--domains", type=int, default=SynthParams.domains)
    ap.add_argument("--folder", type=Path, help="default: bench/data/<records>-<hash>")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    params = SynthParams(records=args.records, domains=args.domains)
    folder = args.folder or dataset_dir(params)
    info = ensure_dataset(params, folder, workers=args.workers)
    print(folder)
    print(json.dumps(info, indent=2))


if __name__ == "__main__":
    main()
