"""``stats`` and ``attempt_counts``: what a store holds, per type, month and
domain, counted from the month indexes where they cover a partition and from
the partition's footers (``stats``) or its state columns (``attempt_counts``)
where they do not. A store at scale S has ~150,000 partitions: a footer each
took 65 s cold; the index's covers and rows take one file a month."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from web_index.errors import StoreError
from web_index.models import RecordType
from web_index.storage._layout import Partition, StoredFile
from web_index.storage._store import Store
from web_index.storage.backends import CacheStats
from web_index.storage.indexes import MonthIndex, open_month_index

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["AttemptCount", "PartitionStats", "StoreStats", "attempt_counts", "stats"]


@dataclass(frozen=True)
class PartitionStats:
    type: str
    year: int
    month: int
    domain: str
    records: int
    bytes: int
    part_files: int
    compacted: bool


@dataclass
class StoreStats:
    partitions: list[PartitionStats] = field(default_factory=list)
    buffered_attempts: int = 0
    buffered_bytes: int = 0
    # The read-through cache's counters (object stores), taken before these stats were gathered.
    cache: CacheStats | None = None

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def files(self) -> int:
        return sum(p.part_files + p.compacted for p in self.partitions)


@dataclass(frozen=True)
class AttemptCount:
    """How many attempts of one metadata type, month and registrable domain
    ended in one state, by one fetcher of one calibre."""

    type: str
    year: int
    month: int
    domain: str
    state: str
    calibre: int
    fetcher: str
    attempts: int


def stats(store: Store) -> StoreStats:
    out = StoreStats()
    cache_stats = getattr(store.backend, "stats", None)
    if callable(cache_stats):
        out.cache = cache_stats()
    for _mp, (attempts, _successes, nbytes) in store.buffer.counts().items():
        out.buffered_attempts += attempts
        out.buffered_bytes += nbytes
    for type, year, month, index, listing in _months(store, list(RecordType)):
        for domain, files in sorted(listing.items()):
            rows = _covered_rows(index, domain, files)
            if rows is None:
                try:
                    files, opened, _dead = store.open_visible(Partition(type, year, month, domain), files)
                except StoreError:  # kept changing under a compaction: counted next time
                    continue
                visible = [(f, h.metadata.num_rows) for f, h in opened]
            else:
                visible = [(f, rows[f.name]) for f in files if rows[f.name] >= 0]
            out.partitions.append(
                PartitionStats(
                    type=type.value,
                    year=year,
                    month=month,
                    domain=domain,
                    records=sum(n for _, n in visible),
                    bytes=sum(f.size for f, _ in visible),
                    part_files=sum(1 for f, _ in visible if f.part is not None),
                    compacted=any(f.part is None for f, _ in visible),
                )
            )
    return out


def attempt_counts(store: Store) -> list[AttemptCount]:
    """Every metadata record, buffered ones included, counted by type, month,
    domain, state, calibre and fetcher; sorted by those."""
    counted: Counter[tuple[str, int, int, str, str, int, str]] = Counter()
    metadata = [RecordType.GET_METADATA, RecordType.HEAD_METADATA]
    # Buffered attempts by their claim: a flush writes a claim's part file before it
    # deletes the claim's rows, and an attempt found in both is counted from the file.
    buffered: Counter[tuple[str, int, int, str, str | None, str, int, str]] = Counter()
    for mp, claim, m in store.buffer.iter_metadata():
        type = RecordType.GET_METADATA if mp.method is RecordType.GET else RecordType.HEAD_METADATA
        where = (type.value, mp.year, mp.month, mp.domain, claim)
        buffered[(*where, str(m["state"]), int(m["fetcher_calibre"]), str(m["fetcher_name"]))] += 1
    written: set[tuple[str, int, int, str, str | None]] = set()  # part files, as a claim names them
    for type, year, month, index, listing in _months(store, metadata):
        written.update((type.value, year, month, d, f.part) for d, files in listing.items() for f in files)
        trusted = {d for d, files in listing.items() if _covered_rows(index, d, files) is not None}
        if index is not None and trusted:
            covers = index.covers
            for file_no, state, calibre, fetcher, n in zip(
                *(c.to_pylist() for c in index.tally().columns), strict=True
            ):
                c = covers[file_no]
                if c.domain in trusted and c.rows >= 0:
                    counted[(type.value, year, month, c.domain, state, calibre, fetcher)] += n
        for domain in sorted(set(listing) - trusted):
            try:
                _, opened, _ = store.open_visible(Partition(type, year, month, domain), listing[domain])
            except StoreError:  # kept changing under a compaction: counted next time
                continue
            for _, handle in opened:
                for row in _tallied(handle):
                    counted[(type.value, year, month, domain, *row[:3])] += row[3]
    for (kind, year, month, domain, claim, state, calibre, fetcher), n in buffered.items():
        if claim is None or (kind, year, month, domain, claim) not in written:
            counted[(kind, year, month, domain, state, calibre, fetcher)] += n
    return [AttemptCount(*key, attempts=n) for key, n in sorted(counted.items())]


def _months(
    store: Store, types: list[RecordType]
) -> Iterator[tuple[RecordType, int, int, MonthIndex | None, Mapping[str, list[StoredFile]]]]:
    """Each month of these types, newest first, with its index and its files by domain
    (from the index's covers while the folder is unchanged since it was listed: one ``stat``)."""
    for type in types:
        for year, month in store.months(type):
            index = open_month_index(store.backend, type, year, month)
            listing = index.current_listing(store.backend) if index is not None else None
            yield type, year, month, index, listing or store.month_files(type, year, month)


def _covered_rows(index: MonthIndex | None, domain: str, files: list[StoredFile]) -> dict[str, int] | None:
    """Each file's row count (-1: superseded) if the index covers the domain's files exactly."""
    if index is None or not index.authoritative(domain, files):
        return None
    return {index.covers[n].name: index.covers[n].rows for n in index.covered(domain)}


def _tallied(handle: pq.ParquetFile) -> Iterator[tuple[str, int, str, int]]:
    """A metadata file's (state, calibre, fetcher, records) groups."""
    columns = ["state", "fetcher_calibre", "fetcher_name"]
    table = handle.read(columns=columns, use_threads=False)
    counted = table.group_by(columns, use_threads=False).aggregate([([], "count_all")])
    yield from zip(*(c.to_pylist() for c in counted.columns), strict=True)
