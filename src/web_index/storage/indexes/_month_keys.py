"""The month index's lookup columns, searched in place: ``_index/<type>/<yyyy>/<mm>.keys``.

Read as Parquet, a month index is decoded before its first answer: whole for a
batch (0.2-0.3 s a month of a million records, and ~55 bytes a record held as
an Arrow table), by row group for a query. This file holds the same seven
lookup columns fixed-width and sorted by key hash: the key column, then the
other values packed row by row, each column checked by chunks of
``CHUNK_ROWS`` rows with a CRC-32 in the header. A lookup maps the file,
binary-searches the key column where it lies (numpy's ``searchsorted``),
checks the chunks around each bound and those of the rows it returns (each
chunk once), and trusts a bound only where the checked rows bound it: the
pages it touches are the ones it reads, and nothing is decoded.

It is also the whole month index for a lookup: its header carries the Parquet index's covers
list and stamp, so that a batch opens no Parquet file (and imports no pyarrow) to find its
winners. The same build writes the Parquet index, then this file naming it by size and version:
a keys file of another build (a crash between the two writes, a file copied from elsewhere) is
not used, and the Parquet index answers. An object store's indexes have none (it would be read
whole there, as the Parquet index is). A chunk that fails its check is :class:`CorruptFileError`,
and the Parquet index answers instead.
"""

from __future__ import annotations

import mmap
import os
import struct
import zlib
from typing import TYPE_CHECKING, Any

import msgspec

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._layout import INDEX_DIR
from web_index.storage.backends import Backend, LocalBackend

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

__all__ = ["CHUNK_ROWS", "KeysFile", "encode_keys", "keys_path", "open_keys"]

CHUNK_ROWS = 1024  # a chunk of keys is 16 KiB (its check ~7 us), of values 37 KiB (~15 us)
_MAGIC = b"WIKEYS1\n"
_PRELUDE = struct.Struct("<II")  # CRC-32 of the rest of the header, length of its JSON
_KEY = 16
_RECORD_FIELDS = [
    ("ts_us", "<i8"),
    ("request_id", "V16"),
    ("calibre", "u1"),
    ("file_no", "<u4"),
    ("row", "<u4"),
    ("rows", "<u4"),
]
_RECORD = 37  # bytes of one record's values: _RECORD_FIELDS packed


class _Header(msgspec.Struct, frozen=True):
    rows: int
    chunk_rows: int
    index: tuple[int, str]  # the Parquet index's size and version when this file was written
    covers: str  # its covers list, as its footer holds it
    stamp: str | None  # its stamp (the month folder's version when listed)
    key_crcs: list[int]  # of each chunk of the key column
    value_crcs: list[int]  # of each chunk of the values


_decode_header = msgspec.json.Decoder(_Header).decode
_encode_header = msgspec.json.Encoder().encode


def keys_path(type: RecordType, year: int, month: int) -> str:
    return f"{INDEX_DIR}/{type.value}/{year:04d}/{month:02d}.keys"


def encode_keys(table: pa.Table, index: tuple[int, str], covers: str, stamp: str | None) -> bytes:
    """The keys file of an index ``table`` (its lookup columns, sorted by ``key_hash``) written
    as a Parquet file of this size and version (``index``), with this ``covers`` list and ``stamp``."""
    import numpy as np

    n = table.num_rows
    keys = _fixed_bytes(table.column("key_hash"), _KEY)
    values = np.empty(n, dtype=_record_dtype())
    values["request_id"] = np.frombuffer(_fixed_bytes(table.column("request_id"), _KEY), dtype="V16", count=n)
    for name in ("ts_us", "calibre", "file_no", "row", "rows"):
        values[name] = table.column(name).to_numpy()
    packed = values.view(np.uint8).data  # not copied: joined below
    header = _encode_header(
        _Header(
            n,
            CHUNK_ROWS,
            index,
            covers,
            stamp,
            _crcs(keys, CHUNK_ROWS * _KEY),
            _crcs(packed, CHUNK_ROWS * _RECORD),
        )
    )
    prelude = _MAGIC + _PRELUDE.pack(zlib.crc32(header), len(header))
    padding = b"\0" * (-(len(prelude) + len(header)) % 8)
    return b"".join([prelude, header, padding, keys, packed])


def _crcs(data: bytes | memoryview, size: int) -> list[int]:
    view = memoryview(data)
    return [zlib.crc32(view[at : at + size]) for at in range(0, len(data), size)]


def _fixed_bytes(column: pa.ChunkedArray[Any], width: int) -> memoryview:
    """A fixed-width binary column's values, back to back (a view of its buffer: not copied)."""
    array = column.combine_chunks()
    data = array.buffers()[1]
    assert data is not None
    return memoryview(data)[array.offset * width : (array.offset + len(array)) * width]


def _record_dtype() -> np.dtype[Any]:
    import numpy as np

    return np.dtype(_RECORD_FIELDS)


# (key_hash, ts_us, request_id, calibre, file_no, row, rows): a row of the index's lookup columns
Row = tuple[bytes, int, bytes, int, int, int, int]


class KeysFile:
    """An opened keys file: ``lookup`` finds every row of the keys asked for."""

    def __init__(self, path: str, data: mmap.mmap) -> None:
        import numpy as np

        self.path = path
        self._data = data
        if data[: len(_MAGIC)] != _MAGIC:
            raise CorruptFileError(path, "not a keys file of this version")
        crc, length = _PRELUDE.unpack_from(data, len(_MAGIC))
        start = len(_MAGIC) + _PRELUDE.size
        raw = data[start : start + length]
        try:
            if zlib.crc32(raw) != crc:
                raise ValueError("its header fails its CRC-32")
            header = _decode_header(raw)
            chunks = -(-header.rows // header.chunk_rows)
            first = start + length + (-(start + length) % 8)
            if len(header.key_crcs) != chunks or len(header.value_crcs) != chunks:
                raise ValueError("a chunk count that its rows do not make")
            if len(data) != first + header.rows * (_KEY + _RECORD):
                raise ValueError("a size that its rows do not make")
        except (ValueError, ZeroDivisionError, msgspec.DecodeError) as exc:
            raise CorruptFileError(path, f"keys file damaged ({exc})") from None
        self.rows, self.index = header.rows, header.index
        self.covers, self.stamp = header.covers, header.stamp
        self._chunk_rows = header.chunk_rows
        self._crcs = (header.key_crcs, header.value_crcs)
        self._keys = np.frombuffer(data, dtype=f"S{_KEY}", count=header.rows, offset=first)
        values_at = first + _KEY * header.rows
        self._values = np.frombuffer(data, dtype=_record_dtype(), count=header.rows, offset=values_at)
        self._starts = (first, first + _KEY * header.rows)
        # Chunks whose CRC-32 was checked, of each column: each is checked once, when first read.
        self._checked: tuple[set[int], set[int]] = (set(), set())

    def lookup(self, hashes: list[bytes]) -> list[Row]:
        """Every row of these key hashes."""
        import numpy as np

        given = np.array(hashes, dtype=f"S{_KEY}")
        which, values = self.rows_of(given)
        return [(hashes[i], *v) for i, v in zip(which.tolist(), values.tolist(), strict=True)]

    def rows_of(self, given: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """Every row of these key hashes (an ``S16`` array): for each row, the position in
        ``given`` of its hash, and its values (``ts_us``, ``request_id`` as ``V16``,
        ``calibre``, ``file_no``, ``row``, ``rows``), a key's rows together."""
        import numpy as np

        n = self.rows
        if not len(given) or not n:
            return np.empty(0, np.intp), np.empty(0, _record_dtype())
        order = np.argsort(given)  # searched in order: twice as fast (the probes share pages)
        wanted = given[order]
        keys = self._keys
        # Searched over the whole column, then trusted only where the rows around each bound are
        # checked and bound it: in a sorted column, a[p - 1] < q <= a[p] holds at one p alone.
        first = np.searchsorted(keys, wanted, "left")
        end = np.searchsorted(keys, wanted, "right")
        around = np.concatenate([first - 1, first, end - 1, end])
        self._check(0, around[(around >= 0) & (around < n)])
        below, above = keys[np.maximum(first - 1, 0)], keys[np.minimum(first, n - 1)]
        last, past = keys[np.maximum(end - 1, 0)], keys[np.minimum(end, n - 1)]
        bounded = (
            ((first == 0) | (below < wanted))
            & ((first == n) | (above >= wanted))
            & ((end == 0) | (last <= wanted))
            & ((end == n) | (past > wanted))
        )
        if not bounded.all():
            raise CorruptFileError(self.path, "keys file damaged (its keys are out of order)")
        counts = end - first
        hit = np.flatnonzero(counts)
        if not len(hit):
            return np.empty(0, np.intp), np.empty(0, _record_dtype())
        counts, starts = counts[hit], first[hit]
        # Each key's run of rows as one index array: start, start + 1, ... for each.
        ends = np.cumsum(counts)
        rows = np.arange(ends[-1]) - np.repeat(ends - counts - starts, counts)
        self._check(1, rows)
        return order[np.repeat(hit, counts)], self._values[rows]

    def intact(self) -> bool:
        """Whether every chunk passes its check (a build keeps such a file; ~22 ms a million rows)."""
        import numpy as np

        every = np.arange(0, self.rows, self._chunk_rows)
        try:
            self._check(0, every)
            self._check(1, every)
        except CorruptFileError:
            return False
        return True

    def content(self) -> bytes:
        """The file's bytes, as mapped (``verify`` compares them with what the index makes)."""
        return self._data[:]

    def _check(self, column: int, rows: np.ndarray[Any, Any]) -> None:
        """Check the CRC-32 of the chunks of ``column`` (0: keys, 1: values) that hold ``rows``."""
        import numpy as np

        checked = self._checked[column]
        width = (_KEY, _RECORD)[column]
        size = self._chunk_rows * width
        view = memoryview(self._data)
        for c in np.unique(rows // self._chunk_rows).tolist():
            if c in checked:
                continue
            at = self._starts[column] + c * size
            end = min(at + size, self._starts[column] + self.rows * width)
            if zlib.crc32(view[at:end]) != self._crcs[column][c]:
                raise CorruptFileError(self.path, f"keys file damaged (chunk {c} fails its CRC-32)")
            checked.add(c)  # a set's add is atomic: two threads at worst check a chunk twice


def open_keys(backend: Backend, type: RecordType, year: int, month: int) -> KeysFile | None:
    """The month's keys file, if the store is local and has one; raises :class:`CorruptFileError`
    for a damaged one. (Whether it is the Parquet index's is its caller's to check: ``index``.)"""
    if not isinstance(backend, LocalBackend):
        return None
    path = keys_path(type, year, month)
    try:
        fd = os.open(backend.file_path(path), os.O_RDONLY)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_size == 0:
            raise CorruptFileError(path, "keys file empty")
        data = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)
    return KeysFile(path, data)
