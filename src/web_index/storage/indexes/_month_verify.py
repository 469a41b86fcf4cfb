"""What ``verify`` says about a month index: whether it is used, and whether
the rows it is trusted for are the files' records.

Apart from opening and lookup (``_month``): queries never run these
checks, which read the whole index and, for the second, the files it covers.
"""

from __future__ import annotations

import polars as pl
import pyarrow as pa

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._files import list_partition_files
from web_index.storage.backends import Backend
from web_index.storage.indexes._month_build import read_records
from web_index.storage.indexes._month_format import (
    COVERS_KEY,
    LOOKUP_COLUMNS,
    SCHEMA,
    STAMP_KEY,
    VERSION,
    VERSION_KEY,
    index_path,
    wants_keys,
)
from web_index.storage.indexes._month_keys import encode_keys, keys_path
from web_index.storage.indexes._month_open import open_month_index

__all__ = ["index_disagreement", "index_note"]


def index_note(backend: Backend, type: RecordType, year: int, month: int) -> str | None:
    """What ``verify`` should say about a month's index: ``None`` if it is
    current or absent, else why it is not used (in full or in part)."""
    path = index_path(type, year, month)
    folder, name = path.rsplit("/", 1)
    if not any(i.name == name for i in backend.list_files(folder, name)):
        return None
    index = open_month_index(backend, type, year, month)
    if index is None:
        try:
            version = (backend.open_parquet(path).metadata.metadata or {}).get(VERSION_KEY)
        except (FileNotFoundError, pa.ArrowException, OSError, CorruptFileError):
            version = None
        if version is not None and version != VERSION:
            what = f"month index of format {version.decode(errors='replace')}, not {VERSION.decode()}"
        else:
            what = "month index unreadable"
        return f"{what}: queries read the partitions; `web-index compact` rebuilds it"
    listing = list_partition_files(backend, f"{type.value}/{year:04d}/{month:02d}", type, year, month)
    stale = sum(1 for domain, files in listing.items() if not index.authoritative(domain, files))
    if stale:
        return (
            f"month index does not cover {stale} partition(s) changed since; `web-index compact` refreshes it"
        )
    if index.keys is None and wants_keys(backend):
        return (
            f"no usable {keys_path(type, year, month)} (missing, damaged or of another build): batches"
            " read the Parquet index whole instead; `web-index compact` writes it again"
        )
    return None


def index_disagreement(backend: Backend, type: RecordType, year: int, month: int) -> str | None:
    """For ``verify``: whether the index's rows of every domain it claims to
    cover exactly (by the covers check queries use) are those domains' records.

    A disagreement here means wrong answers, not lost speed: queries trust the
    index for those domains and never look at their files.
    """
    index = open_month_index(backend, type, year, month)
    if index is None:
        return None
    if index.keys is not None:
        # Searched in place, trusted chunk by chunk: the file must be what the Parquet rows make.
        lookup = index.handle.read(columns=LOOKUP_COLUMNS)
        footer = index.handle.metadata.metadata or {}
        covers = footer.get(COVERS_KEY, b"").decode(errors="replace")
        stamp = footer[STAMP_KEY].decode(errors="replace") if STAMP_KEY in footer else None
        if encode_keys(lookup, index.keys.index, covers, stamp) != index.keys.content():
            return (
                f"{keys_path(type, year, month)} is not what {index_path(type, year, month)} makes"
                " (damaged, or written wrongly): batches fall back where a chunk fails its check and are"
                " wrong where none does; delete it (derived data) and run `web-index compact`"
            )
    listing = list_partition_files(backend, index.folder, type, year, month)
    trusted = {d: files for d, files in listing.items() if index.authoritative(d, files)}
    if not trusted:
        return None
    numbers = {c.name: n for n, c in enumerate(index.covers)}
    superseded: set[str] = set()
    fresh = read_records(backend, type, trusted, numbers, superseded)
    found = _lookup_frame(
        pl.concat([p.select(SCHEMA.names) for p in [_empty_frame(), *(fresh or [])]], how="vertical_relaxed")
    )
    held = _lookup_frame(pl.from_arrow(index.handle.read(columns=SCHEMA.names)))
    covered = [n for d in trusted for n in index.covered(d)]
    held = held.filter(pl.col("file_no").is_in(covered))
    record = ["key_hash", "ts_us", "request_id", "calibre"]
    missing = found.unique(subset=record).join(held, on=record, how="anti")
    # Every row it holds must point at that record's rows in that file, and say its
    # state and fetcher (what stats and the UI's overview count from it).
    wrong = held.join(found, on=SCHEMA.names, how="anti")
    # And each covered file's row count must be the file's (stats count records from it).
    rows = dict(found.group_by("file_no").agg(pl.col("rows").sum()).iter_rows())
    miscounted = [
        n
        for n in covered
        if index.covers[n].rows != (-1 if index.covers[n].name in superseded else rows.get(n, 0))
    ]
    if missing.is_empty() and wrong.is_empty() and not miscounted:
        return None
    bad = (*missing["file_no"], *wrong["file_no"], *miscounted)
    domains = sorted({index.covers[n].domain for n in bad})
    return (
        f"month index disagrees with the files of {len(domains)} domain(s) ({', '.join(domains[:5])}):"
        f" {missing.height} record(s) missing from it, {wrong.height} row(s) pointing wrong,"
        f" {len(miscounted)} file(s) miscounted;"
        f" queries answered from it are wrong: delete {index_path(type, year, month)} (derived data)"
        " and run `web-index compact`"
    )


def _empty_frame() -> pl.DataFrame:
    frame = pl.from_arrow(SCHEMA.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame


def _lookup_frame(frame: object) -> pl.DataFrame:
    """Index rows in one set of column types, so rows read and rows held compare."""
    assert isinstance(frame, pl.DataFrame)
    return frame.select(
        pl.col("key_hash").cast(pl.Binary),
        pl.col("ts_us").cast(pl.Int64),
        pl.col("request_id").cast(pl.Binary),
        pl.col("calibre").cast(pl.Int64),
        pl.col("file_no").cast(pl.Int64),
        pl.col("row").cast(pl.Int64),
        pl.col("rows").cast(pl.Int64),
        # Null outside the metadata types: "" so that rows compare (a join never matches nulls).
        pl.col("state").cast(pl.String).fill_null(""),
        pl.col("fetcher").cast(pl.String).fill_null(""),
    )
