"""Reading every record of a type in order: what an export walks.

Partitions come month by month (oldest first), domains in name order, and each
partition's rows in its sort order (URL key, attempt time, request id, chain
index), merged from its visible files and the buffer's rows with one row group
of each file in memory (the merge compaction uses), each record once.

A partition changed under the walk (a compaction deleted the parts it was
reading, which only an object store notices) is read again from the start and
the rows already given are skipped: rows are in order, so the last key given
says where to go on.
"""

from __future__ import annotations

import bisect
import functools
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from web_index.errors import StoreError
from web_index.models import RecordType, month_bounds
from web_index.storage._files import row_groups
from web_index.storage._layout import Partition, StoredFile
from web_index.storage._merge import merge_sorted, sort_keys
from web_index.storage._schema import TS_COLUMN
from web_index.storage._store import Store
from web_index.storage._tables import rows_to_table, sort_dedupe
from web_index.storage.buffer import BufferedAttempt, MethodPartition
from web_index.storage.payloads import resolve_table

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["ScanFilter", "scan"]

_TRIES = 8


@dataclass(frozen=True, kw_only=True)
class ScanFilter:
    """Which records a scan gives: a partition domain, a URL key prefix, a time window."""

    domain: str | None = None
    url_key_prefix: str | None = None
    start_us: int | None = None  # attempt start, inclusive
    end_us: int | None = None

    def month(self, year: int, month: int) -> bool:
        lo, hi = month_bounds(year, month)
        return (self.start_us is None or hi > self.start_us) and (self.end_us is None or lo <= self.end_us)

    def rows(self, type: RecordType, table: pa.Table) -> pa.Table:
        import pyarrow as pa
        import pyarrow.compute as pc

        mask: Any = None
        if self.url_key_prefix is not None:
            mask = pc.starts_with(table.column("url_key"), self.url_key_prefix)
        ts = table.column(TS_COLUMN[type]).cast(pa.int64())
        for bound, op in ((self.start_us, pc.greater_equal), (self.end_us, pc.less_equal)):
            if bound is not None:
                cond = op(ts, pa.scalar(bound, pa.int64()))
                mask = cond if mask is None else pc.and_(mask, cond)
        return table if mask is None else table.filter(mask)


def scan(store: Store, type: RecordType, where: ScanFilter) -> Iterator[tuple[Partition, pa.Table]]:
    """Tables of ``type``'s rows (the type's schema) that ``where`` lets through,
    in order, buffered records included (read once, before any file); each row
    that refers to its payload has it (``storage.payloads``)."""
    buffered: dict[tuple[int, int, str], list[dict[str, Any]]] = defaultdict(list)
    method = type.method
    # One domain's attempts by its partitions' key: not every buffered attempt decoded.
    attempts: Iterable[tuple[MethodPartition, BufferedAttempt]] = (
        ((mp, a) for mp, _claim, a in store.buffer.iter_all() if mp.method is method)
        if where.domain is None
        else store.buffer.domain_attempts(method, where.domain)
    )
    for mp, attempt in attempts:
        rows = [attempt.metadata] if type.is_metadata else attempt.responses
        buffered[(mp.year, mp.month, mp.domain)].extend(rows)
    months = set(store.months(type)) | {(y, m) for y, m, _ in buffered}
    for year, month in sorted(m for m in months if where.month(*m)):
        listing = store.month_files(type, year, month)
        domains = set(listing) | {d for y, m, d in buffered if (y, m) == (year, month)}
        for domain in sorted(d for d in domains if where.domain in (None, d)):
            partition = Partition(type, year, month, domain)
            rows = buffered.get((year, month, domain), [])
            files = listing.get(domain, [])
            for table in _partition(store, partition, files, rows, where.url_key_prefix):
                table = where.rows(type, table)
                if table.num_rows:
                    # After the filter: only the payloads of rows returned are read.
                    yield partition, resolve_table(store.backend, table)


def _partition(
    store: Store,
    partition: Partition,
    files: list[StoredFile],
    rows: list[dict[str, Any]],
    prefix: str | None,
) -> Iterator[pa.Table]:
    last: tuple[Any, ...] | None = None
    listed: list[StoredFile] | None = files
    for _ in range(_TRIES):
        try:
            for table in _merged(store, partition, listed, rows, prefix):
                if last is not None:
                    table = table.slice(bisect.bisect_right(sort_keys(partition.type, table), last))
                if table.num_rows:
                    last = sort_keys(partition.type, table.slice(table.num_rows - 1))[0]
                    yield table
            return
        except FileNotFoundError:
            listed = None  # a compaction committed meanwhile: list the partition again
    raise StoreError(f"partition {partition} kept changing while it was read; try again")


def _merged(
    store: Store,
    partition: Partition,
    files: list[StoredFile] | None,
    rows: list[dict[str, Any]],
    prefix: str | None,
) -> Iterator[pa.Table]:
    _, opened, _ = store.open_visible(partition, files)
    inputs: list[Iterator[pa.Table]] = [_groups_under(handle, prefix) for _, handle in opened]
    if rows:
        inputs.append(iter([sort_dedupe(partition.type, rows_to_table(partition.type, rows))]))
    group_rows: Callable[[int, int], int] = functools.partial(store.write_options.group_rows, partition.type)
    yield from merge_sorted(partition.type, inputs, group_rows)


def _groups_under(handle: pq.ParquetFile, prefix: str | None) -> Iterator[pa.Table]:
    """The file's row groups that may hold URL keys starting with ``prefix``
    (all of them without one): files are sorted by URL key and keep its
    statistics, so one URL's records are read without the rest of its domain's."""
    if prefix is None:
        yield from row_groups(handle)
        return
    meta = handle.metadata
    column = meta.schema.to_arrow_schema().get_field_index("url_key")
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(column).statistics if column >= 0 else None
        if stats is not None and stats.has_min_max:
            low, high = stats.min, stats.max
            if (
                isinstance(low, str)
                and isinstance(high, str)
                and (high < prefix or not _reaches(low, prefix))
            ):
                continue
        yield handle.read_row_group(g, use_threads=False)


def _reaches(low: str, prefix: str) -> bool:
    """Whether a key at least ``low`` can start with ``prefix``: ``low`` is
    not past every key that does."""
    return low[: len(prefix)] <= prefix
