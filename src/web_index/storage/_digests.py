"""Every stored response whose body has a given payload digest: the seed's
"one hash, every location".

The buffer is read first, then every ``get`` file's digest columns (a file
written before digests were stored has them derived from its bodies), the
same order every reader keeps: an attempt flushed meanwhile is found in at
least one of the two, and found twice it is one hit.

This reads the digest columns of every ``get`` partition (20 + 32 bytes a
response, never a body of a format-3 file): its cost grows with the store,
measured in docs/performance.md. A digest-sorted index beside the month key
index would make it one row group a month; it is not built yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from web_index._retry import retrying
from web_index.models import Digest, DigestHit, RecordType, from_us, payload_digests, sha1_text, sha256_text
from web_index.storage._files import conform
from web_index.storage._layout import Partition, StoredFile
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS
from web_index.storage._store import Store

__all__ = ["find_payloads"]

_COLUMNS = ["url", "attempt_timestamp", "request_id", "chain_index", "request_url", "status_code"]
_TRIES = 8  # a partition relisted this often while it was read (compactions) is an error


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
                hit = DigestHit(
                    url=row["url"],
                    timestamp=from_us(row["attempt_timestamp"]),
                    request_id=row["request_id"],
                    request_url=row["request_url"],
                    chain_index=row["chain_index"],
                    status_code=row["status_code"],
                    location="buffer",
                    sha1=sha1_text(sha1),
                    sha256=sha256_text(sha256),
                )
                hits[(hit.request_id, hit.chain_index)] = hit
    for year, month in store.months(RecordType.GET):
        for domain, files in store.month_files(RecordType.GET, year, month).items():
            partition = Partition(RecordType.GET, year, month, domain)
            for hit in _partition_hits(store, partition, files, wanted):
                hits.setdefault((hit.request_id, hit.chain_index), hit)
    return sorted(hits.values(), key=lambda h: (h.timestamp, h.request_id, h.chain_index))


class _Wanted:
    def __init__(self, digests: Iterable[Digest]) -> None:
        self.sha1 = {d.raw for d in digests if d.algorithm == "sha1"}
        self.sha256 = {d.raw for d in digests if d.algorithm == "sha256"}
        self._arrays = (
            pa.array(sorted(self.sha1), pa.binary(20)),
            pa.array(sorted(self.sha256), pa.binary(32)),
        )

    def mask(self, table: pa.Table) -> pa.BooleanArray:
        sha1, sha256 = (
            pc.is_in(table.column(name), value_set=values)
            for name, values in zip(DIGEST_COLUMNS, self._arrays, strict=True)
        )
        return pc.or_(sha1, sha256)


def _partition_hits(
    store: Store, partition: Partition, files: list[StoredFile], wanted: _Wanted
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
    # As microseconds, so that a hit's time is the same object from a file as from the buffer.
    ts = found.column_names.index(_COLUMNS[1])
    found = found.set_column(ts, _COLUMNS[1], found.column(ts).cast(pa.int64()))
    return [
        DigestHit(
            url=row["url"],
            timestamp=from_us(row["attempt_timestamp"]),
            request_id=row["request_id"],
            request_url=row["request_url"],
            chain_index=row["chain_index"],
            status_code=row["status_code"],
            location=path,
            sha1=sha1_text(row[DIGEST_COLUMNS[0]]),
            sha256=sha256_text(row[DIGEST_COLUMNS[1]]),
        )
        for row in found.select([*_COLUMNS, *DIGEST_COLUMNS]).to_pylist()
    ]
