"""``stats``: what a store holds, per type, month and domain (from footers only)."""

from __future__ import annotations

from dataclasses import dataclass, field

from web_index.errors import StoreError
from web_index.models import RecordType
from web_index.storage._layout import Partition
from web_index.storage._store import Store
from web_index.storage.backends import CacheStats

__all__ = ["PartitionStats", "StoreStats", "stats"]


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


def stats(store: Store) -> StoreStats:
    out = StoreStats()
    cache_stats = getattr(store.backend, "stats", None)
    if callable(cache_stats):
        out.cache = cache_stats()
    for _mp, (attempts, _successes, nbytes) in store.buffer.counts().items():
        out.buffered_attempts += attempts
        out.buffered_bytes += nbytes
    for type in RecordType:
        for year, month in store.months(type):
            for domain, files in sorted(store.month_files(type, year, month).items()):
                try:
                    files, opened, _dead = store.open_visible(Partition(type, year, month, domain), files)
                except StoreError:  # kept changing under a compaction: counted next time
                    continue
                out.partitions.append(
                    PartitionStats(
                        type=type.value,
                        year=year,
                        month=month,
                        domain=domain,
                        records=sum(h.metadata.num_rows for _, h in opened),
                        bytes=sum(f.size for f, _ in opened),
                        part_files=sum(1 for f, _ in opened if f.part is not None),
                        compacted=any(f.part is None for f, _ in opened),
                    )
                )
    return out
