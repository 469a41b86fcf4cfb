"""The month key index: where every record of a month is, in one sorted file.

The standard's layout puts each (type, month, domain) in its own files, so a
batch of queries over thousands of domains would open thousands of files just
to learn which of them hold the keys it asks for, and a latest-page query
would do so for every month. The month index answers that from one file per
(type, month): ``_index/<type>/<yyyy>/<mm>.parquet``, one row per record
(a 128-bit hash of its ``url_key``, attempt time, ``request_id``, calibre, and
where its rows are: file number, first row, row count), sorted by the hash in
row groups small enough for their statistics to prune.

Every column is fixed-width (the request id as its 16 UUID bytes), so that a
batch that touches most of a month decodes the index at memory speed: variable
length strings (URL keys, request ids as text) took twice as long to decode
and a third more space. A lookup matches on the hash; a false match needs a
BLAKE2b-128 collision (about 1e-33 per comparison), and answers read from the
data files check the URL key there as well.

The index is derived data, written by compaction, and never trusted blindly:

* its footer lists the files it covers, by name, size and version
  (``covers``; the version is the backend's change token, see
  ``Backend.FileInfo``: name and size alone miss a compacted file rewritten
  in as many bytes); a domain whose files in the month folder are not exactly
  those (a flush or a compaction since) is read from its own files instead;
* a reader checks the ``request_id`` (and URL key) at the row the index points
  to, and falls back to the partition's files if it differs;
* a month whose request ids are not all canonical UUIDs (only a hand-made file
  has such) gets no index.

So a stale, missing or deleted index costs speed, never an answer.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import logging
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgspec
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._files import list_partition_files, read_small_files, sorted_unique, visible_files
from web_index.storage._layout import INDEX_DIR, Partition, StoredFile, parse_file_name
from web_index.storage._schema import TS_COLUMN
from web_index.storage.backends import Backend, LocalBackend

__all__ = [
    "INDEX_ROW_GROUP",
    "IndexHit",
    "MonthIndex",
    "build_month_index",
    "index_disagreement",
    "index_note",
    "index_path",
    "open_month_index",
]

INDEX_ROW_GROUP = 4096
_COVERS_KEY = b"web_index.index.covers"
_VERSION_KEY = b"web_index.index.version"
# 4: covers carry each file's version. Format 3 trusted name and size, and a
# compaction can keep both while adding a record: such an index is never used.
# 5: the index file carries a checksum (older ones are rebuilt to gain one).
_VERSION = b"5"
# The month folder's version (Backend.folder_version) when the index listed it,
# if it had one; absent on object stores and for a folder changed just before.
_STAMP_KEY = b"web_index.index.listed"


def _stamp(version: object | None) -> str | None:
    return None if version is None else repr(version)


_FIELDS: list[pa.Field[Any]] = [
    pa.field("key_hash", pa.binary(16), nullable=False),
    pa.field("ts_us", pa.int64(), nullable=False),
    pa.field("request_id", pa.binary(16), nullable=False),
    pa.field("calibre", pa.uint8(), nullable=False),
    pa.field("file_no", pa.uint32(), nullable=False),
    pa.field("row", pa.uint32(), nullable=False),
    pa.field("rows", pa.uint32(), nullable=False),
]
_SCHEMA = pa.schema(_FIELDS)
_LOOKUP_COLUMNS = _SCHEMA.names
log = logging.getLogger("web_index.storage")
# A request id as the store writes it (UUIDv7, lower-case): its 16 bytes give it back exactly.
_CANONICAL_RID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"


def key_hash(url_key: str) -> bytes:
    """The index's key for a URL key: 16 bytes of BLAKE2b."""
    return hashlib.blake2b(url_key.encode(), digest_size=16).digest()


def _rid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def index_path(type: RecordType, year: int, month: int) -> str:
    return f"{INDEX_DIR}/{type.value}/{year:04d}/{month:02d}.parquet"


class Covered(NamedTuple):  # a tuple: a month index covers tens of thousands of files
    name: str  # file name in the month folder
    size: int
    domain: str
    version: str  # Backend.FileInfo.version when the index was built


# The covers list is JSON ``[[name, size, domain], ...]``: msgspec reads it
# straight into Covered tuples (the stdlib's json took 20 ms a month of 10,000 files).
_decode_covers = msgspec.json.Decoder(list[Covered]).decode
_encode_covers = msgspec.json.Encoder().encode


class IndexHit(msgspec.Struct, frozen=True, gc=False):
    """One record the index knows of, and where its rows are."""

    url_key: str
    ts_us: int
    request_id: str
    calibre: int
    path: str  # store path of the file holding its rows
    size: int  # of that file
    row: int
    rows: int


class MonthIndex:
    """An opened month index: its coverage and a sorted lookup by URL key."""

    def __init__(
        self,
        type: RecordType,
        year: int,
        month: int,
        handle: pq.ParquetFile,
        covers: list[Covered],
        file: tuple[int, str],
        stamp: str | None,
    ) -> None:
        self.type, self.year, self.month = type, year, month
        self.folder = f"{type.value}/{year:04d}/{month:02d}"
        self.handle = handle
        self.covers = covers
        self.file = file  # (size, version) of the index file itself
        self.stamp = stamp  # the month folder's version when it was listed for this index
        self._listing: _CoveredListing | None = None
        self._spans = _spans(covers)
        self._table: pa.Table | None = None  # the whole index, once kept (see lookup)
        self._point_reads = 0
        self._denied = False  # the memory budget could not take this index
        meta = handle.metadata
        self._groups: list[tuple[bytes, bytes]] = []  # key_hash range of each row group
        self._starts: list[int] = []  # first row of each row group
        start = 0
        for g in range(meta.num_row_groups):
            rg = meta.row_group(g)
            stats = rg.column(0).statistics
            lo, hi = (stats.min, stats.max) if stats is not None and stats.has_min_max else (None, None)
            if isinstance(lo, bytes) and isinstance(hi, bytes):
                self._groups.append((lo, hi))
            else:
                self._groups.append((b"", b"\xff" * 17))
            self._starts.append(start)
            start += rg.num_rows
        self._starts.append(start)

    def covered(self, domain: str) -> Sequence[int]:
        """The file numbers (positions in ``covers``) of ``domain``'s files."""
        return self._spans.get(domain, ())

    def current_listing(self, backend: Backend) -> Mapping[str, list[StoredFile]] | None:
        """The month folder's files by domain, if the folder is unchanged since
        this index listed it (then the index covers all of it); else ``None``.

        Saves listing (and ``stat``-ing) every file of the month: a local
        folder's version is one ``stat`` (see ``Backend.folder_version``).
        """
        if self.stamp is None or _stamp(backend.folder_version(self.folder)) != self.stamp:
            return None
        if self._listing is None:
            self._listing = _CoveredListing(self)
        return self._listing

    def authoritative(self, domain: str, files: Iterable[StoredFile]) -> bool:
        """Whether the index holds exactly what ``domain``'s listed files hold."""
        span = self._spans.get(domain)
        if span is None:
            return False
        covers = self.covers
        listed = files if isinstance(files, list) else list(files)
        if len(listed) != len(span):
            return False
        if len(span) == 1:  # most partitions: one compacted file, no dicts to build
            c, f = covers[span[0]], listed[0]
            return f.size == c.size and f.version == c.version and f.path.rsplit("/", 1)[-1] == c.name
        named = {f.path.rsplit("/", 1)[-1]: (f.size, f.version) for f in listed}
        return named == {covers[n].name: (covers[n].size, covers[n].version) for n in span}

    def lookup(self, by_hash: Mapping[bytes, str]) -> list[IndexHit]:
        """Every indexed record of these URL keys (given by :func:`key_hash`)."""
        import bisect

        hashes = sorted(by_hash)
        groups = []
        for g, (lo, hi) in enumerate(self._groups):
            i = bisect.bisect_left(hashes, lo)
            if i < len(hashes) and hashes[i] <= hi:
                groups.append(g)
        if not groups:
            return []
        wanted = pa.array(hashes, type=pa.binary(16))
        if self._table is None:
            self._point_reads += 1
            # A big batch touches most of the month; a process that keeps asking
            # (a server, a bulk run) soon will: read it all once and keep it for
            # the next lookups (bounded, see _TABLE_BUDGET). A one-off query
            # reads only its row groups.
            asked_often = self._point_reads > _POINT_READS_BEFORE_KEEP and not self._denied
            if len(groups) * 4 >= len(self._groups) or asked_often:
                table = self.handle.read(columns=_LOOKUP_COLUMNS, use_threads=False)
                if self._keep(table):
                    return self.lookup(by_hash)
                self._denied = True
                return self._hits(table.filter(pc.is_in(table.column("key_hash"), value_set=wanted)), by_hash)
            # The key column of their row groups first: most such lookups find
            # nothing in a month, and then nothing else is decoded.
            key_column = self.handle.read_row_groups(groups, columns=["key_hash"], use_threads=False)
            mask = pc.is_in(key_column.column("key_hash"), value_set=wanted)
            if not pc.any(mask).as_py():
                return []
            table = self.handle.read_row_groups(groups, columns=_LOOKUP_COLUMNS, use_threads=False)
            return self._hits(table.filter(mask), by_hash)
        table = self._table
        if len(groups) * 4 < len(self._groups):
            # Only the row groups that can hold the keys: zero-copy slices.
            starts = self._starts
            table = pa.concat_tables([table.slice(starts[g], starts[g + 1] - starts[g]) for g in groups])
        return self._hits(table.filter(pc.is_in(table.column("key_hash"), value_set=wanted)), by_hash)

    def _keep(self, table: pa.Table) -> bool:
        """Keep the whole index in memory if the budget allows; return whether kept."""
        global _TABLE_BYTES
        with _OPEN_LOCK:
            if self._table is not None:
                return True
            if _TABLE_BYTES + table.nbytes <= _TABLE_BUDGET:
                _TABLE_BYTES += table.nbytes
                self._table = table
                return True
        return False

    def _hits(self, sub: pa.Table, keys: Mapping[bytes, str]) -> list[IndexHit]:
        covers, folder, text = self.covers, self.folder, _rid_text
        cols = [sub.column(n).to_pylist() for n in _LOOKUP_COLUMNS]
        return [
            IndexHit(keys[h], ts, text(rid), cal, f"{folder}/{covers[fno].name}", covers[fno].size, row, n)
            for h, ts, rid, cal, fno, row, n in zip(*cols, strict=True)
        ]


def _spans(covers: list[Covered]) -> dict[str, Sequence[int]]:
    """Each domain's file numbers: one run of the covers list, which a build
    writes sorted by domain (a hand-made index may not: then lists)."""
    spans: dict[str, Sequence[int]] = {}
    start, current = 0, None
    for n, c in enumerate(covers):
        if c.domain != current:
            if current is not None:
                spans[current] = range(start, n)
            if c.domain in spans:  # not sorted by domain
                lists: dict[str, list[int]] = {}
                for m, d in enumerate(covers):
                    lists.setdefault(d.domain, []).append(m)
                return dict(lists)
            start, current = n, c.domain
    if current is not None:
        spans[current] = range(start, len(covers))
    return spans


class _CoveredListing(Mapping[str, list[StoredFile]]):
    """A month folder's files by domain, as the index covers them, each
    domain's list built when first asked for: a batch asks for a few thousand
    of a month's domains, and building all of them cost more than its lookups."""

    def __init__(self, index: MonthIndex) -> None:
        self._index = index
        self._built: dict[str, list[StoredFile]] = {}

    def __getitem__(self, domain: str) -> list[StoredFile]:
        files = self._built.get(domain)
        if files is None:
            ix = self._index
            partition = Partition(ix.type, ix.year, ix.month, domain)
            files = []
            for n in ix._spans[domain]:  # KeyError: not a domain of this month
                c = ix.covers[n]
                parsed = parse_file_name(c.name)
                # A name that is not a store file's (only a hand-made index has
                # one) is left out, as a listing of the folder leaves it out.
                if parsed is not None:
                    path = f"{ix.folder}/{c.name}"
                    files.append(StoredFile(partition, parsed[1], path, c.size, c.version))
            self._built[domain] = files
        return files

    def __contains__(self, domain: object) -> bool:
        return domain in self._index._spans

    def __iter__(self) -> Iterator[str]:
        return iter(self._index._spans)

    def __len__(self) -> int:
        return len(self._index._spans)


# Opened indexes by (store URL, path): a footer parsed once per process, reopened
# when the file's size or version changes (a rebuilt index is a new file under
# the same name, and can be as long as the one it replaces).
_OPEN: dict[tuple[str, str], MonthIndex] = {}
_OPEN_LOCK = threading.Lock()
# Whole indexes kept in memory by this process, at most this many bytes in all
# (about 110 bytes a record: 1 GiB holds the indexes of ~9 million records).
_TABLE_BUDGET = 1 << 30
_TABLE_BYTES = 0
# Row-group lookups in one index before the whole of it is read and kept:
# one-off queries stay cheap, a process that keeps asking gets memory speed.
_POINT_READS_BEFORE_KEEP = 4


def open_month_index(backend: Backend, type: RecordType, year: int, month: int) -> MonthIndex | None:
    """The month's index, or ``None`` if there is none (or it is unreadable)."""
    path = index_path(type, year, month)
    folder, name = path.rsplit("/", 1)
    info = next((i for i in backend.list_files(folder, name) if i.name == name), None)
    key = (backend.url, path)
    if info is None:
        with _OPEN_LOCK:
            _forget(_OPEN.pop(key, None))
        return None
    with _OPEN_LOCK:
        cached = _OPEN.get(key)
    if cached is not None and cached.file == (info.size, info.version):
        return cached
    try:
        handle = backend.open_parquet(path)
        covers = _read_covers(handle)
    except FileNotFoundError:
        return None
    except (pa.ArrowException, OSError, CorruptFileError):
        return None  # a damaged index only costs speed: read the partitions instead
    raw_stamp = (handle.metadata.metadata or {}).get(_STAMP_KEY)
    stamp = raw_stamp.decode(errors="replace") if raw_stamp else None
    opened = MonthIndex(type, year, month, handle, covers, (info.size, info.version), stamp)
    with _OPEN_LOCK:
        _forget(_OPEN.get(key))
        _OPEN[key] = opened
    return opened


def _forget(index: MonthIndex | None) -> None:
    """Give back the memory budget of an index replaced or gone (caller holds the lock)."""
    global _TABLE_BYTES
    if index is not None and index._table is not None:
        _TABLE_BYTES -= index._table.nbytes
        index._table = None


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
            version = (backend.open_parquet(path).metadata.metadata or {}).get(_VERSION_KEY)
        except (FileNotFoundError, pa.ArrowException, OSError, CorruptFileError):
            version = None
        if version is not None and version != _VERSION:
            what = f"month index of format {version.decode(errors='replace')}, not {_VERSION.decode()}"
        else:
            what = "month index unreadable"
        return f"{what}: queries read the partitions; `web-index compact` rebuilds it"
    listing = list_partition_files(backend, f"{type.value}/{year:04d}/{month:02d}", type, year, month)
    stale = sum(1 for domain, files in listing.items() if not index.authoritative(domain, files))
    if stale:
        return (
            f"month index does not cover {stale} partition(s) changed since; `web-index compact` refreshes it"
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
    listing = list_partition_files(backend, index.folder, type, year, month)
    trusted = {d: files for d, files in listing.items() if index.authoritative(d, files)}
    if not trusted:
        return None
    numbers = {c.name: n for n, c in enumerate(index.covers)}
    fresh = _read_records(backend, type, trusted, numbers)
    found = _lookup_frame(
        pl.concat(
            [p.select(_LOOKUP_COLUMNS) for p in [_empty_frame(), *(fresh or [])]], how="vertical_relaxed"
        )
    )
    held = _lookup_frame(pl.from_arrow(index.handle.read(columns=_LOOKUP_COLUMNS)))
    covered = [n for d in trusted for n in index.covered(d)]
    held = held.filter(pl.col("file_no").is_in(covered))
    record = ["key_hash", "ts_us", "request_id", "calibre"]
    missing = found.unique(subset=record).join(held, on=record, how="anti")
    # Every row it holds must point at that record's rows in that file.
    wrong = held.join(found, on=_LOOKUP_COLUMNS, how="anti")
    if missing.is_empty() and wrong.is_empty():
        return None
    domains = sorted({index.covers[n].domain for n in (*missing["file_no"], *wrong["file_no"])})
    return (
        f"month index disagrees with the files of {len(domains)} domain(s) ({', '.join(domains[:5])}):"
        f" {missing.height} record(s) missing from it, {wrong.height} row(s) pointing wrong;"
        f" queries answered from it are wrong: delete {index_path(type, year, month)} (derived data)"
        " and run `web-index compact`"
    )


def _empty_frame() -> pl.DataFrame:
    frame = pl.from_arrow(_SCHEMA.empty_table())
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
    )


def _read_covers(handle: pq.ParquetFile) -> list[Covered]:
    meta = handle.metadata.metadata or {}
    if meta.get(_VERSION_KEY) != _VERSION or _COVERS_KEY not in meta:
        raise CorruptFileError("index", "not a month index of this version")
    try:
        return _decode_covers(zlib.decompress(base64.b64decode(meta[_COVERS_KEY])))
    except (ValueError, TypeError, zlib.error, msgspec.DecodeError) as exc:
        raise CorruptFileError("index", f"unreadable covers list: {exc}") from None


def build_month_index(backend: Backend, type: RecordType, year: int, month: int) -> bool:
    """Write the month's index if it is missing or out of date; return whether written.

    Domains whose files are unchanged since the previous index keep their
    rows; only the others are read (key columns only).
    """
    folder = f"{type.value}/{year:04d}/{month:02d}"
    before = _stamp(backend.folder_version(folder))
    listing = list_partition_files(backend, folder, type, year, month)
    # Stamped only if the folder did not change while it was listed.
    stamp = before if before is not None and _stamp(backend.folder_version(folder)) == before else None
    covers = [
        Covered(f.path.rsplit("/", 1)[-1], f.size, domain, f.version)
        for domain in sorted(listing)
        for f in sorted(listing[domain], key=lambda f: f.path)
    ]
    previous = open_month_index(backend, type, year, month)
    if previous is not None and previous.covers == covers and (stamp is None or stamp == previous.stamp):
        return False
    old_rows = _rows_of(previous)  # None if absent or damaged: then rebuilt from the files
    if previous is not None and old_rows is not None and previous.covers == covers:
        # Same files, but now the folder can be stamped (it was written to
        # just before the last build): the same rows, a new stamp.
        _write(backend, type, year, month, old_rows, covers, stamp)
        return True
    file_no = {c.name: n for n, c in enumerate(covers)}
    pieces: list[pl.DataFrame] = []
    reuse: dict[int, int] = {}  # old file number -> new, for domains unchanged
    if previous is not None and old_rows is not None:
        for domain, files in listing.items():
            if previous.authoritative(domain, files):
                for n in previous.covered(domain):
                    reuse[n] = file_no[previous.covers[n].name]
        if reuse:
            old = pl.from_arrow(old_rows)
            assert isinstance(old, pl.DataFrame)
            mapping = pl.DataFrame(
                {"file_no": list(reuse), "new_no": list(reuse.values())},
                schema={"file_no": pl.UInt32, "new_no": pl.UInt32},
            )
            pieces.append(old.join(mapping, on="file_no").drop("file_no").rename({"new_no": "file_no"}))
    kept = {covers[n].domain for n in reuse.values()}
    fresh = _read_records(backend, type, {d: f for d, f in listing.items() if d not in kept}, file_no)
    if fresh is None:
        log.warning("%s holds request ids that are not canonical UUIDs: no month index", folder)
        return False
    pieces += fresh
    del fresh
    tables = [_SCHEMA.empty_table()]
    while pieces:  # each frame dropped once it is a table: not both at once
        tables.append(pieces.pop().select(_LOOKUP_COLUMNS).to_arrow().cast(_SCHEMA))
    table = pa.concat_tables(tables)
    del tables
    # The same attempt in two visible files (a flush redone beside its own
    # compaction) is one record, and its copies sort side by side: keep one.
    # (Sorted by arrow, not polars: polars' multi-column sort of the binary
    # keys cost six times the index's size in memory.)
    rows = sorted_unique(table, ["key_hash", "ts_us", "request_id"], ["request_id"])
    _write(backend, type, year, month, rows, covers, stamp)
    return True


def _rows_of(index: MonthIndex | None) -> pa.Table | None:
    if index is None:
        return None
    try:
        return index.handle.read(columns=_LOOKUP_COLUMNS)
    except CorruptFileError as exc:
        log.warning("%s: %s; rebuilding it from the files", exc.path, exc.problem)
        return None


def _read_records(
    backend: Backend, type: RecordType, listing: Mapping[str, list[StoredFile]], file_no: Mapping[str, int]
) -> list[pl.DataFrame] | None:
    """Index rows (hashed: see :func:`_hashed`) of these domains' visible files,
    each file numbered as ``file_no`` says; ``None`` if a request id cannot be
    held. Read in batches, each hashed at once: a big file's URL keys as text
    would cost gigabytes."""
    out: list[pl.DataFrame] = []
    alone: list[StoredFile] = []  # compacted files with no parts beside them: all visible
    opened: list[tuple[StoredFile, pq.ParquetFile]] = []
    for files in listing.values():
        if len(files) == 1 and files[0].part is None:
            alone.append(files[0])
        else:
            opened += visible_files(backend, files)[0]
    # Small files in one multi-file read instead of thousands of opens: per-file
    # overhead is most of the cost of a month of small partitions. The read is
    # of whole files, so a big one (bodies) is opened and its key columns read.
    local = backend if isinstance(backend, LocalBackend) else None
    small = [f for f in alone if local is not None and f.size <= _SMALL_FILE]
    opened += [(f, backend.open_parquet(f.path)) for f in alone if local is None or f.size > _SMALL_FILE]
    raw: Iterator[pl.DataFrame] = (
        records for f, handle in opened for records in _file_records(type, handle, file_no[_name(f)])
    )
    for start in range(0, len(small), _BATCH_FILES):
        assert local is not None
        batch = small[start : start + _BATCH_FILES]
        frame = read_small_files(local, [f.path for f in batch], _key_columns(type))
        numbers = pl.DataFrame(
            {"_file": [f.path for f in batch], "file_no": [file_no[_name(f)] for f in batch]},
            schema={"_file": pl.String, "file_no": pl.UInt32},
        )
        raw = itertools.chain(raw, [_records(type, frame.join(numbers, on="_file"))])
    for records in raw:
        hashed = _hashed(records)
        if hashed is None:
            return None
        out.append(hashed)
    return out


def _file_records(type: RecordType, handle: pq.ParquetFile, number: int) -> Iterator[pl.DataFrame]:
    """Records (one row per chain) of one file, a batch at a time. A chain's rows
    are contiguous (files are sorted by key, time, request id, chain index), so
    the chain a batch ends in is held back for the next."""
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
    rids = frame.get_column("request_id")
    if not rids.str.contains(_CANONICAL_RID).all():
        return None
    keys = frame.get_column("url_key").to_list()
    hashes = {k: key_hash(k) for k in set(keys)}  # a URL fetched twice is hashed once
    return frame.with_columns(
        pl.Series("key_hash", [hashes[k] for k in keys], dtype=pl.Binary),
        pl.col("request_id").str.replace_all("-", "", literal=True).str.decode("hex"),
    ).drop("url_key")


def _write(
    backend: Backend,
    type: RecordType,
    year: int,
    month: int,
    table: pa.Table,
    covers: list[Covered],
    stamp: str | None,
) -> None:
    meta = {
        _VERSION_KEY: _VERSION,
        # One entry per file of the month (tens of thousands): compressed.
        _COVERS_KEY: base64.b64encode(zlib.compress(_encode_covers(covers))),
    }
    if stamp is not None:
        meta[_STAMP_KEY] = stamp.encode()
    backend.write_parquet(
        index_path(type, year, month),
        table.cast(_SCHEMA).replace_schema_metadata(meta),
        # LZ4, not zstd: a batch of thousands of queries reads whole indexes,
        # and LZ4 decodes them in half the time for ~1.15x the bytes (hashes
        # and request ids are random: neither codec shrinks them much).
        compression="lz4",
        row_group_size=INDEX_ROW_GROUP,
        write_statistics=["key_hash"],
        use_dictionary=False,
        store_schema=False,
    )


_BATCH_FILES = 2000
_READ_ROWS = 65536  # rows of a big file's key columns read (and hashed) at a time
_SMALL_FILE = 1 << 20  # read whole when building an index; bigger files by column


def _name(f: StoredFile) -> str:
    return f.path.rsplit("/", 1)[-1]


def _key_columns(type: RecordType) -> list[str]:
    return ["url_key", TS_COLUMN[type], "request_id", "fetcher_calibre"]


def _records(type: RecordType, frame: pl.DataFrame) -> pl.DataFrame:
    """Index rows from key columns plus ``file_no`` and the row within the file (``_row``)."""
    # A chain's rows are contiguous (files are sorted by key, time, request id,
    # chain index): a record is its first row and a count.
    return frame.group_by("file_no", "request_id").agg(
        pl.col("url_key").first(),
        pl.col(TS_COLUMN[type]).first().cast(pl.Int64).alias("ts_us"),
        pl.col("fetcher_calibre").first().alias("calibre"),
        pl.col("_row").min().cast(pl.UInt32).alias("row"),
        pl.len().cast(pl.UInt32).alias("rows"),
    )
