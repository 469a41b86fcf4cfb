"""Building a month index, incrementally: a domain whose files are unchanged
since the previous index keeps its rows, the others are read again.

Apart from opening and lookup (``_month``) because it is compaction's
work, not a query's, and reads the data files' key columns, which a lookup
never does. ``read_records`` is shared with ``verify``'s check of an index
against the files (``_month_verify``).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from web_index.errors import CorruptFileError, StoreError
from web_index.models import RecordType
from web_index.storage._crash import crash_point
from web_index.storage._files import list_partition_files, read_small_files, visible_files
from web_index.storage._layout import StoredFile
from web_index.storage._memory import release_freed_memory
from web_index.storage._schema import TS_COLUMN
from web_index.storage._tables import sorted_unique
from web_index.storage.backends import Backend, LocalBackend
from web_index.storage.indexes._month import MonthIndex
from web_index.storage.indexes._month_format import (
    SCHEMA,
    Covered,
    folder_stamp,
    wants_keys,
    write_index,
)
from web_index.storage.indexes._month_open import forget_month_index, open_month_index
from web_index.storage.indexes._month_rows import CANONICAL_RID, MonthRows, hashed_keys

if TYPE_CHECKING:  # polars imported where used: a build from rows a load made needs none
    import polars as pl

__all__ = ["build_month_index", "build_month_indexes_apart", "read_records"]

log = logging.getLogger("web_index.storage")


def build_month_index(
    backend: Backend, type: RecordType, year: int, month: int, given: MonthRows | None = None
) -> bool:
    """Write the month's index if it is missing or out of date; return whether written.

    Domains whose files are unchanged since the previous index keep their
    rows; of the others, files whose rows are ``given`` (as a bulk load wrote them)
    take those, the rest are read (key columns only).
    """
    folder = f"{type.value}/{year:04d}/{month:02d}"
    before = folder_stamp(backend.folder_version(folder))
    listing = list_partition_files(backend, folder, type, year, month)
    # Stamped only if the folder did not change while it was listed.
    stamp = before if before is not None and folder_stamp(backend.folder_version(folder)) == before else None
    files = [(domain, f) for domain in sorted(listing) for f in sorted(listing[domain], key=lambda f: f.path)]
    previous = open_month_index(backend, type, year, month)
    same_files = previous is not None and [c[:4] for c in previous.covers] == [
        (f.name, f.size, domain, f.version) for domain, f in files
    ]
    # An index of a local store without its keys file whole (written before there were any,
    # or damaged) is written again, its rows as they are.
    keyed = previous is not None and (
        not wants_keys(backend) or (previous.keys is not None and previous.keys.intact())
    )
    if previous is not None and same_files and keyed and (stamp is None or stamp == previous.stamp):
        return False
    old_rows = _rows_of(previous)  # None if absent or damaged: then rebuilt from the files
    if previous is not None and old_rows is not None and same_files:
        # Same files, but now the folder can be stamped (it was written to
        # just before the last build), or its keys file is missing: the same rows.
        write_index(backend, type, year, month, old_rows, previous.covers, stamp)
        return True
    file_no = {f.name: n for n, (_, f) in enumerate(files)}
    counted: dict[str, int] = {}  # rows of each file whose records are read here or kept
    pieces, reuse = _kept_rows(previous, old_rows, listing, file_no, counted)
    # The previous index let go: its files (mapped, and its keys file read whole to check it)
    # would otherwise be held through the sort and the write, the build's peak (~60 MiB of a
    # 10 GiB import's month).
    del old_rows, previous
    forget_month_index(backend, type, year, month)
    kept = {files[n][0] for n in reuse.values()}
    superseded: set[str] = set()
    unread = {d: f for d, f in listing.items() if d not in kept}
    names = [f.name for _, f in files]
    # Each frame a table as it comes (fixed-width keys, a third of the frame's bytes): a month
    # of a million records would otherwise be held as frames, then as tables.
    tables = [SCHEMA.empty_table(), *(_index_table(p) for p in pieces)]
    del pieces
    # A compacted file alone in its partition: the rows the load that wrote it made of it.
    alone = {file_no[f[0].name]: f[0] for f in unread.values() if len(f) == 1 and f[0].part is None}
    given_rows = given.rows_of(type, year, month, alone) if given is not None else None
    if given_rows is not None:
        tables.append(given_rows[0])
        counted.update(given_rows[1])
        unread = {d: f for d, f in unread.items() if not (len(f) == 1 and f[0].name in given_rows[1])}
    try:
        for piece in iter_records(backend, type, unread, file_no, superseded):
            import polars as pl  # here: a build from the rows a load made needs none

            # Before duplicates across files are dropped: a file's own row count.
            for number, rows in piece.group_by("file_no").agg(pl.col("rows").sum()).iter_rows():
                counted[names[number]] = counted.get(names[number], 0) + rows
            tables.append(_index_table(piece))
    except UncanonicalError:
        log.warning("%s holds request ids that are not canonical UUIDs: no month index", folder)
        release_freed_memory()
        return False
    covers = [
        Covered(f.name, f.size, domain, f.version, -1 if f.name in superseded else counted.get(f.name, 0))
        for domain, f in files
    ]
    table = pa.concat_tables(tables)
    del tables
    # The same attempt in two visible files (a flush redone beside its own
    # compaction) is one record, and its copies sort side by side: keep one.
    # (Sorted by arrow, not polars: polars' multi-column sort of the binary
    # keys cost six times the index's size in memory.)
    rows = sorted_unique(table, ["key_hash", "ts_us", "request_id"], ["request_id"])
    del table  # not held beside its sorted copy while that is written
    write_index(backend, type, year, month, rows, covers, stamp)
    del rows
    release_freed_memory()
    return True


def build_month_indexes_apart(
    backend: LocalBackend, months: Sequence[tuple[RecordType, int, int]], given: MonthRows | None = None
) -> None:
    """:func:`build_month_index` of each of ``months``, in order, in a process of their own
    for each record type, which exits once its months are written.

    A build holds its month's index rows and the key columns it reads (~400 bytes a
    record at its peak), and the process it ran in keeps much of that once freed (a bulk
    load's committing process ended ~60-150 MiB bigger after each; Arrow's allocator, the
    C library's heap and Python objects do not account for it, docs/performance.md). A
    load that indexes its months at every commit would otherwise carry its biggest build's
    memory to its end. The cost is a process start, ~0.3-0.6 s (most of it the new process
    importing the main module again, as any ``forkserver`` child does): one a type, not one
    a month. (One for every type's builds carried the first type's leftovers into the
    second's peak: a 10 GiB import peaked 134 MiB higher so.) A process that dies (killed,
    out of memory) is a :class:`StoreError` naming the months; those built before stay built.
    ``given``: as :func:`build_month_index` takes it."""
    from concurrent.futures.process import BrokenProcessPool

    from web_index.storage._workers import DEATH_CAUSES, worker_processes

    for type in sorted({t for t, _, _ in months}, key=lambda t: t.value):
        of_type = [m for m in months if m[0] is type]
        pool = worker_processes(1, ())
        try:
            pool.submit(_build_at, str(backend.root), of_type, given and given.of_type(type)).result()
        except BrokenProcessPool as exc:
            named = ", ".join(f"{t.value}/{y:04d}/{m:02d}" for t, y, m in of_type)
            raise StoreError(
                f"the process building the month indexes of {named} died ({DEATH_CAUSES}): {exc}"
            ) from exc
        finally:
            pool.shutdown(wait=True)


def _build_at(root: str, months: list[tuple[RecordType, int, int]], given: MonthRows | None) -> None:
    from pathlib import Path

    backend = LocalBackend(Path(root))
    for type, year, month in months:
        crash_point("month-build")
        build_month_index(backend, type, year, month, given)


def _kept_rows(
    previous: MonthIndex | None,
    old_rows: pa.Table | None,
    listing: Mapping[str, list[StoredFile]],
    file_no: Mapping[str, int],
    counted: dict[str, int],
) -> tuple[list[pl.DataFrame], dict[int, int]]:
    """The previous index's rows of the domains whose files it covers as listed, numbered
    as ``file_no`` says, and its file numbers so mapped (old -> new); their files' rows
    counted into ``counted``."""
    pieces: list[pl.DataFrame] = []
    reuse: dict[int, int] = {}
    if previous is None or old_rows is None:
        return pieces, reuse
    for domain, listed in listing.items():
        if previous.authoritative(domain, listed):
            for n in previous.covered(domain):
                reuse[n] = file_no[previous.covers[n].name]
                counted[previous.covers[n].name] = previous.covers[n].rows
    if reuse:
        import polars as pl

        old = pl.from_arrow(old_rows)
        assert isinstance(old, pl.DataFrame)
        mapping = pl.DataFrame(
            {"file_no": list(reuse), "new_no": list(reuse.values())},
            schema={"file_no": pl.UInt32, "new_no": pl.UInt32},
        )
        pieces.append(old.join(mapping, on="file_no").drop("file_no").rename({"new_no": "file_no"}))
    return pieces, reuse


def _rows_of(index: MonthIndex | None) -> pa.Table | None:
    if index is None:
        return None
    try:
        return index.handle.read(columns=SCHEMA.names)
    except CorruptFileError as exc:
        log.warning("%s: %s; rebuilding it from the files", exc.path, exc.problem)
        return None


class UncanonicalError(Exception):
    """A request id that the index's 16 bytes cannot give back exactly."""


def read_records(
    backend: Backend,
    type: RecordType,
    listing: Mapping[str, list[StoredFile]],
    file_no: Mapping[str, int],
    superseded: set[str] | None = None,
) -> list[pl.DataFrame] | None:
    """:func:`iter_records`' frames; ``None`` if a request id cannot be held."""
    try:
        return list(iter_records(backend, type, listing, file_no, superseded))
    except UncanonicalError:
        return None


def iter_records(
    backend: Backend,
    type: RecordType,
    listing: Mapping[str, list[StoredFile]],
    file_no: Mapping[str, int],
    superseded: set[str] | None = None,
) -> Iterator[pl.DataFrame]:
    """Index rows (hashed: see :func:`_hashed`) of these domains' visible files,
    each file numbered as ``file_no`` says; :class:`UncanonicalError` if a request
    id cannot be held. Read in batches, each hashed at once: a big file's URL keys
    as text would cost gigabytes. The names of files a compacted file supersedes
    go into ``superseded``."""
    alone: list[StoredFile] = []  # compacted files with no parts beside them: all visible
    opened: list[tuple[StoredFile, pq.ParquetFile]] = []
    for files in listing.values():
        if len(files) == 1 and files[0].part is None:
            alone.append(files[0])
        else:
            visible, dead = visible_files(backend, files)
            opened += visible
            if superseded is not None:
                superseded.update(f.name for f in dead)
    # Small files in one multi-file read instead of thousands of opens: per-file
    # overhead is most of the cost of a month of small partitions. The read is
    # of whole files, so a big one (bodies) is opened and its key columns read.
    local = backend if isinstance(backend, LocalBackend) else None
    small = [f for f in alone if local is not None and f.size <= _SMALL_FILE]
    big = [f for f in alone if local is None or f.size > _SMALL_FILE]

    def handles() -> Iterator[tuple[StoredFile, pq.ParquetFile]]:
        # Each dropped once read: the pages a mapped file's key columns touched (and the
        # kernel's fault-around with them) are this process's memory while it is open.
        opened.reverse()
        while opened:
            yield opened.pop()
        for f in big:
            yield f, backend.open_parquet(f.path)

    def small_records() -> Iterator[pl.DataFrame]:
        import polars as pl

        # A run read when the one before it has been hashed: never two runs' text at once.
        for batch in _batches(small):
            assert local is not None
            frame = read_small_files(local, [f.path for f in batch], _key_columns(type))
            numbers = pl.DataFrame(
                {"_file": [f.path for f in batch], "file_no": [file_no[f.name] for f in batch]},
                schema={"_file": pl.String, "file_no": pl.UInt32},
            )
            yield _records(type, frame.join(numbers, on="_file"))

    raw = itertools.chain(
        (records for f, handle in handles() for records in _file_records(type, handle, file_no[f.name])),
        small_records(),
    )
    for records in raw:
        hashed = _hashed(records)
        if hashed is None:
            raise UncanonicalError
        yield hashed


def _batches(small: list[StoredFile]) -> Iterator[list[StoredFile]]:
    """The small files in runs of ``_BATCH_FILES``, or fewer making ``_BATCH_BYTES``: a
    run is read as one frame, its URL keys and request ids as text."""
    batch: list[StoredFile] = []
    size = 0
    for f in small:
        if batch and (len(batch) == _BATCH_FILES or size + f.size > _BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(f)
        size += f.size
    if batch:
        yield batch


def _index_table(frame: pl.DataFrame) -> pa.Table:
    return frame.select(SCHEMA.names).to_arrow().cast(SCHEMA)


def _file_records(type: RecordType, handle: pq.ParquetFile, number: int) -> Iterator[pl.DataFrame]:
    """Records (one row per chain) of one file, a batch at a time. A chain's rows
    are contiguous (files are sorted by key, time, request id, chain index), so
    the chain a batch ends in is held back for the next."""
    import polars as pl

    carry: pl.DataFrame | None = None
    start = 0
    for batch in handle.iter_batches(batch_size=_READ_ROWS, columns=_key_columns(type), use_threads=False):
        frame = pl.from_arrow(pa.Table.from_batches([batch]))
        assert isinstance(frame, pl.DataFrame)
        frame = frame.with_row_index("_row", offset=start).with_columns(
            pl.lit(number, dtype=pl.UInt32).alias("file_no")
        )
        start += batch.num_rows
        if carry is not None:
            frame = pl.concat([carry, frame])
        if not frame.height:
            continue
        last = frame.get_column("request_id")[-1]
        carry = frame.filter(pl.col("request_id") == last)
        done = frame.filter(pl.col("request_id") != last)
        if done.height:
            yield _records(type, done)
    if carry is not None and carry.height:
        yield _records(type, carry)


def _hashed(frame: pl.DataFrame) -> pl.DataFrame | None:
    """Index rows read as text (``url_key``, ``request_id``) in the index's
    fixed-width form; ``None`` if a request id would not survive the trip."""
    import polars as pl

    rids = frame.get_column("request_id")
    if not rids.str.contains(CANONICAL_RID).all():
        return None
    return frame.with_columns(
        pl.Series("key_hash", hashed_keys(frame.get_column("url_key").to_list()), dtype=pl.Binary),
        pl.col("request_id").str.replace_all("-", "", literal=True).str.decode("hex"),
    ).drop("url_key")


_BATCH_FILES = 2000
_BATCH_BYTES = 16 << 20  # of small files read as one frame (a frame is ~5 times their size)
_READ_ROWS = 65536  # rows of a big file's key columns read (and hashed) at a time
_SMALL_FILE = 1 << 20  # read whole when building an index; bigger files by column


def _key_columns(type: RecordType) -> list[str]:
    tally = ["state", "fetcher_name"] if type.is_metadata else []
    return ["url_key", TS_COLUMN[type], "request_id", "fetcher_calibre", *tally]


def _records(type: RecordType, frame: pl.DataFrame) -> pl.DataFrame:
    """Index rows from key columns plus ``file_no`` and the row within the file (``_row``)."""
    # A chain's rows are contiguous (files are sorted by key, time, request id,
    # chain index): a record is its first row and a count.
    import polars as pl

    return frame.group_by("file_no", "request_id").agg(
        pl.col("url_key").first(),
        pl.col(TS_COLUMN[type]).first().cast(pl.Int64).alias("ts_us"),
        pl.col("fetcher_calibre").first().alias("calibre"),
        pl.col("_row").min().cast(pl.UInt32).alias("row"),
        pl.len().cast(pl.UInt32).alias("rows"),
        *(
            [pl.col("state").first(), pl.col("fetcher_name").first().alias("fetcher")]
            if type.is_metadata
            else [pl.lit(None, pl.String).alias("state"), pl.lit(None, pl.String).alias("fetcher")]
        ),
    )
