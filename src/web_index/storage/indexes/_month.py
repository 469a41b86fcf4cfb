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

This module looks keys up in an opened index. Opening one (once per process) is
``_month_open``'s, the file's columns and footer are in ``_month_format``,
building (and rebuilding) it in ``_month_build``, and what ``verify`` says of it
in ``_month_verify``.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._layout import StoredFile
from web_index.storage.backends import Backend
from web_index.storage.indexes._month_format import (
    LOOKUP_COLUMNS,
    TALLY_COLUMNS,
    Covered,
    folder_stamp,
    index_path,
    rid_text,
    row_group_ranges,
)
from web_index.storage.indexes._month_keys import KeysFile, Row
from web_index.storage.indexes._month_listing import CoveredListing, spans

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["IndexHit", "MonthIndex"]

log = logging.getLogger("web_index.storage")


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
    version: str = ""  # of that file (its capture index is named by it)


class MonthIndex:
    """An opened month index: its coverage and a sorted lookup by URL key."""

    def __init__(
        self,
        type: RecordType,
        year: int,
        month: int,
        open_handle: Callable[[], pq.ParquetFile],
        covers: list[Covered],
        file: tuple[int, str],
        stamp: str | None,
        keys: KeysFile | None = None,
    ) -> None:
        self.type, self.year, self.month = type, year, month
        # Its lookup columns searched in place (``_month_keys``), where the build wrote them:
        # then the Parquet file is opened only if something else is asked of it.
        self.keys = keys
        self.folder = f"{type.value}/{year:04d}/{month:02d}"
        self._open_handle = open_handle
        self._handle: pq.ParquetFile | None = None
        self.covers = covers
        self.file = file  # (size, version) of the index file itself
        self.stamp = stamp  # the month folder's version when it was listed for this index
        self._listing: CoveredListing | None = None
        self._forgotten = False  # out of the cache: a reader still holding it keeps nothing whole
        self.spans = spans(covers)  # each domain's file numbers
        self._table: pa.Table | None = None  # the whole index, once kept (see lookup)
        self._keys: _Hashes | None = None  # its key_hash column, to bisect, once kept and if sorted
        self._point_reads = 0
        self._denied = False  # the memory budget could not take this index
        self._tally: pa.Table | None = None
        self._row_groups: tuple[list[tuple[bytes, bytes]], list[int]] | None = None

    @property
    def handle(self) -> pq.ParquetFile:
        """The Parquet index, opened when first needed (a lookup through the keys file never does)."""
        if self._handle is None:
            import pyarrow as pa

            try:
                self._handle = self._open_handle()
            except (pa.ArrowException, OSError) as exc:  # gone or damaged since its keys file was read
                path = index_path(self.type, self.year, self.month)
                raise CorruptFileError(path, f"month index unreadable ({exc})") from None
        return self._handle

    @property
    def _groups(self) -> list[tuple[bytes, bytes]]:
        """The key_hash range of each row group."""
        return self._group_stats()[0]

    @property
    def _starts(self) -> list[int]:
        """The first row of each row group, and the row count last."""
        return self._group_stats()[1]

    def _group_stats(self) -> tuple[list[tuple[bytes, bytes]], list[int]]:
        if self._row_groups is None:
            self._row_groups = row_group_ranges(self.handle.metadata)
        return self._row_groups

    def covered(self, domain: str) -> Sequence[int]:
        """The file numbers (positions in ``covers``) of ``domain``'s files."""
        return self.spans.get(domain, ())

    def current_listing(self, backend: Backend) -> Mapping[str, list[StoredFile]] | None:
        """The month folder's files by domain, if the folder is unchanged since
        this index listed it (then the index covers all of it); else ``None``.

        Saves listing (and ``stat``-ing) every file of the month: a local
        folder's version is one ``stat`` (see ``Backend.folder_version``).
        """
        if self.stamp is None or folder_stamp(backend.folder_version(self.folder)) != self.stamp:
            return None
        if self._listing is None:
            self._listing = CoveredListing(self)
        return self._listing

    def authoritative(self, domain: str, files: Iterable[StoredFile]) -> bool:
        """Whether the index holds exactly what ``domain``'s listed files hold."""
        span = self.spans.get(domain)
        if span is None:
            return False
        covers = self.covers
        listed = files if isinstance(files, list) else list(files)
        if len(listed) != len(span):
            return False
        if len(span) == 1:  # most partitions: one compacted file, no dicts to build
            c, f = covers[span[0]], listed[0]
            return f.size == c.size and f.version == c.version and f.name == c.name
        named = {f.name: (f.size, f.version) for f in listed}
        return named == {covers[n].name: (covers[n].size, covers[n].version) for n in span}

    def tally(self) -> pa.Table:
        """Records by ``file_no``, ``state``, ``calibre`` and ``fetcher`` (the last
        two null outside the metadata types), counted as ``records``; kept once read."""
        if self._tally is None:
            rows = self.handle.read(columns=TALLY_COLUMNS, use_threads=False)
            counted = rows.group_by(TALLY_COLUMNS, use_threads=False).aggregate([([], "count_all")])
            self._tally = counted.rename_columns([*TALLY_COLUMNS, "records"])
        return self._tally

    def lookup(self, by_hash: Mapping[bytes, str]) -> list[IndexHit]:
        """Every indexed record of these URL keys (given by :func:`key_hash`)."""
        keys = self.keys
        if keys is not None:
            try:
                return self._hits_of(keys.lookup(list(by_hash)), by_hash)
            except CorruptFileError as exc:
                self._keys_damaged(exc)
        import pyarrow as pa
        import pyarrow.compute as pc

        hashes = sorted(by_hash)
        groups = []
        for g, (lo, hi) in enumerate(self._groups):
            i = bisect.bisect_left(hashes, lo)
            if i < len(hashes) and hashes[i] <= hi:
                groups.append(g)
        if not groups:
            return []
        kept, held = self._table, self._keys  # once: an index replaced meanwhile drops both
        if kept is None:
            wanted = pa.array(hashes, type=pa.binary(16))
            self._point_reads += 1
            # A big batch touches most of the month; a process that keeps asking
            # (a server, a bulk run) soon will: read it all once and keep it for
            # the next lookups (bounded, see _TABLE_BUDGET). A one-off query
            # reads only its row groups.
            asked_often = self._point_reads > _POINT_READS_BEFORE_KEEP and not self._denied
            if len(groups) * 4 >= len(self._groups) or asked_often:
                table = self.handle.read(columns=LOOKUP_COLUMNS, use_threads=False)
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
            table = self.handle.read_row_groups(groups, columns=LOOKUP_COLUMNS, use_threads=False)
            return self._hits(table.filter(mask), by_hash)
        table = kept
        if held is not None and len(hashes) * len(held).bit_length() * _ROWS_A_STEP <= len(held):
            # A few keys: bisected (~20 steps of ~0.5 us each), where a filter hashes every row.
            pieces = []
            for h in hashes:
                first = bisect.bisect_left(held, h)
                end = bisect.bisect_right(held, h, first)
                if first < end:
                    pieces.append(table.slice(first, end - first))
            if not pieces:
                return []
            return self._hits(pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces), by_hash)
        wanted = pa.array(hashes, type=pa.binary(16))
        if len(groups) * 4 < len(self._groups):
            # Only the row groups that can hold the keys: zero-copy slices.
            starts = self._starts
            table = pa.concat_tables([table.slice(starts[g], starts[g + 1] - starts[g]) for g in groups])
        return self._hits(table.filter(pc.is_in(table.column("key_hash"), value_set=wanted)), by_hash)

    def rows_of(
        self, hashes: np.ndarray[Any, Any]
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None:
        """What :meth:`KeysFile.rows_of` says of these key hashes (an ``S16`` array), their
        ``file_no`` numbering :attr:`covers`; ``None`` where the month has no keys file (or
        a damaged one, no longer used), and :meth:`lookup` answers from the Parquet index."""
        keys = self.keys
        if keys is None:
            return None
        try:
            return keys.rows_of(hashes)
        except CorruptFileError as exc:
            self._keys_damaged(exc)
            return None

    def _keys_damaged(self, exc: CorruptFileError) -> None:
        """Derived data: the Parquet index answers instead."""
        parquet = index_path(self.type, self.year, self.month)
        log.warning("%s: %s; reading %s instead", exc.path, exc.problem, parquet)
        self.keys = None

    def _keep(self, table: pa.Table) -> bool:
        """Keep the whole index in memory if the budget allows; return whether kept."""
        global _TABLE_BYTES
        import pyarrow.compute as pc

        if not self._fits(table):  # before copying it whole below
            return self._table is not None
        table = table.combine_chunks()  # one chunk: its key hashes are one buffer to bisect
        chunks = table.column("key_hash").chunks
        column = chunks[0] if chunks else None
        in_order = column is None or len(column) < 2 or pc.all(pc.less_equal(column[:-1], column[1:])).as_py()
        with _BUDGET_LOCK:
            if self._forgotten:  # its bytes would count against the budget with no one to give them back
                return False
            if self._table is not None or _TABLE_BYTES + table.nbytes > _TABLE_BUDGET:
                return self._table is not None
            _TABLE_BYTES += table.nbytes
            self._table = table
            # Rows out of key order (only a hand-made index has them) are filtered, not bisected.
            self._keys = _Hashes(column) if column is not None and in_order else None
        return True

    def forget(self) -> None:
        """Out of the cache of opened indexes: give back its memory budget, and its listing,
        which refers back to it (without that cycle the index, its files mapped, goes when its
        last reader lets go, not at the next collection of cycles)."""
        global _TABLE_BYTES
        with _BUDGET_LOCK:
            self._forgotten = True
            self._listing = None
            if self._table is not None:
                _TABLE_BYTES -= self._table.nbytes
                self._table = self._keys = None

    def _fits(self, table: pa.Table) -> bool:
        with _BUDGET_LOCK:
            return self._table is None and _TABLE_BYTES + table.nbytes <= _TABLE_BUDGET

    def _hits(self, sub: pa.Table, keys: Mapping[bytes, str]) -> list[IndexHit]:
        cols = [sub.column(n).to_pylist() for n in LOOKUP_COLUMNS]
        return self._hits_of(zip(*cols, strict=True), keys)

    def _hits_of(self, rows: Iterable[Row], keys: Mapping[bytes, str]) -> list[IndexHit]:
        covers, folder, text = self.covers, self.folder, rid_text
        return [
            IndexHit(
                keys[h],
                ts,
                text(rid),
                cal,
                f"{folder}/{covers[fno].name}",
                covers[fno].size,
                row,
                n,
                covers[fno].version,
            )
            for h, ts, rid, cal, fno, row, n in rows
        ]


class _Hashes:
    """A sorted key_hash column as :mod:`bisect` reads it: item ``i`` is its 16 bytes."""

    __slots__ = ("_data", "_first", "_n")

    def __init__(self, column: pa.Array[Any]) -> None:
        self._data = memoryview(column.buffers()[1])  # type: ignore[arg-type]
        self._first = column.offset * 16
        self._n = len(column)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> bytes:
        at = self._first + 16 * i
        return bytes(self._data[at : at + 16])


# Whole indexes kept in memory by this process, at most this many bytes in all
# (about 110 bytes a record: 1 GiB holds the indexes of ~9 million records).
_TABLE_BUDGET = 1 << 30
_TABLE_BYTES = 0
_BUDGET_LOCK = threading.Lock()
# Row-group lookups in one index before the whole of it is read and kept:
# one-off queries stay cheap, a process that keeps asking gets memory speed.
_POINT_READS_BEFORE_KEEP = 4
# A kept index is bisected for a few keys, filtered for many: a bisection step (~0.5 us) costs
# what filtering this many rows does. (A key in a 16,813-row month: 157-173 -> 74-77 us, measured.)
_ROWS_A_STEP = 64
