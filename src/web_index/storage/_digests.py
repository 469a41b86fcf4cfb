"""Every stored response whose body has a given payload digest: the seed's
"one hash, every location".

The buffer is read first, then every ``get`` file's digest columns (a file
written before digests were stored has them derived from its bodies), the
same order every reader keeps: an attempt flushed meanwhile is found in at
least one of the two, and found twice it is one hit.

This reads the digest columns of every ``get`` partition (20 + 32 bytes a
response, never a body of a format-3 file; small files in batches): its cost
grows with the store, 5.2 s for 200,000 pages (docs/performance.md). A
digest-sorted index beside the month key index would make it one row group a
month; it is not built yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from web_index._retry import retrying
from web_index.models import Digest, DigestHit, RecordType, from_us, payload_digests, sha1_text, sha256_text
from web_index.storage._files import read_small_files
from web_index.storage._layout import Partition, StoredFile
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS
from web_index.storage._store import Store
from web_index.storage._tables import conform
from web_index.storage.backends import LocalBackend

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["find_payloads"]

_COLUMNS = ["url", "attempt_timestamp", "request_id", "chain_index", "request_url", "status_code"]
_TRIES = 8  # a partition relisted this often while it was read (compactions) is an error
_SMALL_FILE = 1 << 20  # files up to this size are read whole, in batches of _BATCH_FILES
_BATCH_FILES = 2000


def find_payloads(store: Store, digests: Sequence[Digest]) -> list[DigestHit]:
    """Every stored response (buffer and files) whose body has one of ``digests``,
    ordered by attempt time, request id and position in the chain."""
    wanted = _Wanted(digests)
    hits: dict[tuple[str, int], DigestHit] = {}
    for mp, _claim, attempt in store.buffer.iter_all():
        if mp.method is not RecordType.GET:
            continue
        for row in attempt.responses:
            sha1, sha256 = payload_digests(row[BODY_COLUMN])
            if sha1 in wanted.sha1 or sha256 in wanted.sha256:
                hit = _hit({**row, DIGEST_COLUMNS[0]: sha1, DIGEST_COLUMNS[1]: sha256}, "buffer")
                hits[(hit.request_id, hit.chain_index)] = hit
    local = store.backend if isinstance(store.backend, LocalBackend) else None
    for year, month in store.months(RecordType.GET):
        small: list[StoredFile] = []  # compacted files alone in their partition: read in batches
        found: list[DigestHit] = []
        for domain, files in store.month_files(RecordType.GET, year, month).items():
            if (
                local is not None
                and len(files) == 1
                and files[0].part is None
                and files[0].size <= _SMALL_FILE
            ):
                small.append(files[0])
            else:
                found += _partition_hits(store, Partition(RecordType.GET, year, month, domain), files, wanted)
        for start in range(0, len(small), _BATCH_FILES):
            assert local is not None
            found += _small_file_hits(store, local, small[start : start + _BATCH_FILES], wanted)
        for hit in found:
            hits.setdefault((hit.request_id, hit.chain_index), hit)
    return sorted(hits.values(), key=lambda h: (h.timestamp, h.request_id, h.chain_index))


def _small_file_hits(
    store: Store, local: LocalBackend, files: list[StoredFile], wanted: _Wanted
) -> list[DigestHit]:
    """Hits in small files read in one multi-file read: per-file overhead is
    most of the cost of a month of small partitions (as for the month index).
    A batch holding a file without digests, or one replaced meanwhile, is read
    file by file instead."""
    import polars as pl  # here, not at the top: imported with the store, it costs every lookup

    try:
        frame = read_small_files(
            local, [f.path for f in files], [*_COLUMNS, *DIGEST_COLUMNS], missing_as_null=True
        )
    except (FileNotFoundError, pl.exceptions.PolarsError):
        return [h for f in files for h in _partition_hits(store, f.partition, None, wanted)]
    # A file without digests read after one with them gets nulls (a stored digest never is).
    older = set(frame.filter(pl.col(DIGEST_COLUMNS[0]).is_null()).get_column("_file").to_list())
    sha1s, sha256s = (pl.Series(sorted(s), dtype=pl.Binary) for s in (wanted.sha1, wanted.sha256))
    found = frame.filter(
        pl.col(DIGEST_COLUMNS[0]).is_in(sha1s.implode()) | pl.col(DIGEST_COLUMNS[1]).is_in(sha256s.implode())
    )
    hits = _hits(found.to_arrow(), found.get_column("_file").to_list())
    return hits + [
        h for f in files if f.path in older for h in _partition_hits(store, f.partition, None, wanted)
    ]


class _Wanted:
    def __init__(self, digests: Iterable[Digest]) -> None:
        import pyarrow as pa

        self.sha1 = {d.raw for d in digests if d.algorithm == "sha1"}
        self.sha256 = {d.raw for d in digests if d.algorithm == "sha256"}
        self._arrays = (
            pa.array(sorted(self.sha1), pa.binary(20)),
            pa.array(sorted(self.sha256), pa.binary(32)),
        )

    def mask(self, table: pa.Table) -> pa.BooleanArray:
        import pyarrow.compute as pc

        sha1, sha256 = (
            pc.is_in(table.column(name), value_set=values)
            for name, values in zip(DIGEST_COLUMNS, self._arrays, strict=True)
        )
        return pc.or_(sha1, sha256)


def _partition_hits(
    store: Store, partition: Partition, files: list[StoredFile] | None, wanted: _Wanted
) -> list[DigestHit]:
    listed: list[list[StoredFile] | None] = [files]

    def read() -> list[DigestHit]:
        try:
            _, opened, _ = store.open_visible(partition, listed[0])
            return [hit for stored, handle in opened for hit in _file_hits(stored.path, handle, wanted)]
        except FileNotFoundError:
            listed[0] = None  # a compaction committed meanwhile: list the partition again
            raise

    return retrying(
        read,
        tries=_TRIES,
        on=(FileNotFoundError,),
        gave_up=f"partition {partition} kept changing while it was read; try again",
    )


def _file_hits(path: str, handle: pq.ParquetFile, wanted: _Wanted) -> list[DigestHit]:
    names = handle.schema_arrow.names
    if DIGEST_COLUMNS[0] in names:
        table = handle.read(columns=[*_COLUMNS, *DIGEST_COLUMNS], use_threads=False)
    else:  # written before digests were stored: derived from the bodies
        table = conform(RecordType.GET, handle.read(use_threads=False).replace_schema_metadata(None))
    found = table.filter(wanted.mask(table))
    return _hits(found, [path] * found.num_rows)


def _hits(found: pa.Table, paths: list[str]) -> list[DigestHit]:
    import pyarrow as pa

    # As microseconds, so that a hit's time is the same object from a file as from the buffer.
    ts = found.column_names.index(_COLUMNS[1])
    found = found.set_column(ts, _COLUMNS[1], found.column(ts).cast(pa.int64()))
    rows = found.select([*_COLUMNS, *DIGEST_COLUMNS]).to_pylist()
    return [_hit(row, path) for row, path in zip(rows, paths, strict=True)]


def _hit(row: dict[str, Any], location: str) -> DigestHit:
    """A hit from a response row (times in microseconds, raw digests)."""
    return DigestHit(
        url=row["url"],
        timestamp=from_us(row["attempt_timestamp"]),
        request_id=row["request_id"],
        request_url=row["request_url"],
        chain_index=row["chain_index"],
        status_code=row["status_code"],
        location=location,
        sha1=sha1_text(row[DIGEST_COLUMNS[0]]),
        sha256=sha256_text(row[DIGEST_COLUMNS[1]]),
    )
