"""A month index's rows of one file, made from the table the file was written from.

A bulk load's commit makes them beside each file it writes (in its worker processes on
a local disk, as it sends each file on an object store), and gathers them in one spool
file (:class:`MonthRowsSpool`, which gives a :class:`MonthRows`), so that building the
months' indexes after the commit reads none of the files back and hashes none of their
URL keys on the one core it runs on (``_month_build``). A file's rows are used only while
the month lists that very file (name, size and version): a file named as a part, or
compacted again since, is read as any other.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NamedTuple, cast

from web_index.models import RecordType
from web_index.storage._layout import TMP_DIR, compacted_stored
from web_index.storage._schema import TS_COLUMN
from web_index.storage.backends import Backend, LocalBackend, new_spool
from web_index.storage.indexes._month_format import key_hash, schema

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from web_index.storage._layout import Partition, StoredFile

__all__ = ["CANONICAL_RID", "FileRows", "MonthRows", "MonthRowsSpool", "file_rows", "hashed_keys"]

# A request id as the store writes it (UUIDv7, lower-case): its 16 bytes give it back exactly.
CANONICAL_RID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_HYPHENS = (8, 13, 18, 23)
_HEX = tuple(i for i in range(36) if i not in _HYPHENS)
# A file's rows travel back from a worker in its result message (a message carries the
# results of _load_work._CHUNK partitions) up to this many bytes, and past it in a spool
# file of their own: a message of megabytes cut short by a killed worker would hang the
# pool, and a file created for each of thousands of small partitions costs more than the
# rows (file creation waits on the journal while the workers write).
_INLINE_BYTES = 64 << 10
# Bytes a record takes in FileRows' fixed-width part: key hash, request id, time, row, rows, calibre.
_WIDTHS = (16, 16, 8, 4, 4, 1)
_ROWS = 4  # the rows column's place in _WIDTHS: a file's row count is their sum


class FileRows(NamedTuple):
    """A written file's month index rows, and the size and version of that file: the
    fixed-width columns one after the other (``_WIDTHS``), then for a metadata type the
    records' states and fetchers (msgpack, ``tally`` bytes of it); in ``data``, or in the
    spool file at ``path``."""

    size: int
    version: str
    records: int
    tally: int
    data: bytes
    path: str | None


class _Placed(NamedTuple):
    size: int
    version: str
    offset: int
    records: int
    tally: int  # bytes of msgpack (states, fetchers) after the fixed-width part


def hashed_keys(keys: list[str]) -> list[bytes]:
    """:func:`key_hash` of each URL key; a key fetched twice is hashed once."""
    hashes = {k: key_hash(k) for k in set(keys)}
    return [hashes[k] for k in keys]


def file_rows(
    backend: LocalBackend | None, type: RecordType, table: pa.Table, size: int, version: str
) -> FileRows | None:
    """The month index's rows of the file of ``size`` and ``version`` written from
    ``table`` (its rows in the file's order), as the build reading the file back would
    make them, past ``_INLINE_BYTES`` in a spool file of ``backend`` (a worker's, sent
    back), with ``None`` always in ``data`` (this process's, gathered at once);
    ``None`` (the build then reads the file) for an empty table, a request id
    column of another type, a request id that is not canonical (the build finds it too),
    and one that names two records (the build groups a file's rows by request id, not by
    run of rows: a bulk load takes the ids it is given, a WARC import those of its records)."""
    import msgspec
    import numpy as np
    import pyarrow as pa

    n = table.num_rows
    rid = table.column("request_id").combine_chunks()
    if not n or rid.type != pa.string():
        return None
    _, offsets_buffer, data = rid.buffers()
    if offsets_buffer is None or data is None:
        return None
    offsets = np.frombuffer(memoryview(offsets_buffer), np.int32, n + 1, rid.offset * 4)
    if offsets[-1] - offsets[0] != 36 * n or (np.diff(offsets) != 36).any():
        return None
    text = np.frombuffer(memoryview(data), np.uint8, 36 * n, offsets[0]).reshape(n, 36)
    nibbles = _nibbles()[text[:, _HEX]]
    if (nibbles > 15).any() or (text[:, _HYPHENS] != ord("-")).any():
        return None
    # A record is its chain's first row and a count: a chain's rows are contiguous, as a
    # file is sorted (key, time, request id, chain index).
    starts = np.flatnonzero(np.concatenate(([True], (text[1:] != text[:-1]).any(axis=1))))
    raw = (nibbles[starts, 0::2] << 4 | nibbles[starts, 1::2]).astype(np.uint8)
    if len(np.unique(raw.view(np.dtype((np.void, 16))))) < len(starts):
        return None
    first = starts.tolist()
    firsts = table.select(["url_key", *(["state", "fetcher_name"] if type.is_metadata else [])])
    if len(first) < n:  # chains of several rows: their first rows only
        firsts = firsts.take(starts)
    ts = table.column(TS_COLUMN[type]).combine_chunks().view(pa.int64()).to_numpy()
    calibre = table.column("fetcher_calibre").to_numpy()
    fixed = b"".join(
        (
            b"".join(hashed_keys(cast(list[str], firsts.column("url_key").to_pylist()))),
            raw.tobytes(),
            ts[starts].astype("<i8").tobytes(),
            starts.astype("<u4").tobytes(),
            np.diff(np.append(starts, n)).astype("<u4").tobytes(),
            calibre[starts].astype(np.uint8).tobytes(),
        )
    )
    tally = b""
    if type.is_metadata:
        tally = msgspec.msgpack.encode([firsts.column(c).to_pylist() for c in ("state", "fetcher_name")])
    if backend is None or len(fixed) + len(tally) <= _INLINE_BYTES:
        return FileRows(size, version, len(first), len(tally), fixed + tally, None)
    path = backend.spool_bytes(fixed + tally)
    return FileRows(size, version, len(first), len(tally), b"", str(path))


@functools.cache
def _nibbles() -> np.ndarray:
    """Each byte's value as a lower-case hex digit, 255 if it is none (numpy imported
    on first use: the lookup path never needs it)."""
    import numpy as np

    table = np.full(256, 255, np.uint8)
    for value, digit in enumerate(b"0123456789abcdef"):
        table[digit] = value
    return table


class MonthRows(NamedTuple):
    """Files' month index rows, gathered in one spool file by a commit: for each month
    (type, year, month), each file's name and where its rows are."""

    path: str
    months: dict[tuple[RecordType, int, int], dict[str, _Placed]]

    def rows_of(
        self, type: RecordType, year: int, month: int, files: Mapping[int, StoredFile]
    ) -> tuple[pa.Table, dict[str, int]] | None:
        """The index rows of those of ``files`` (numbered as the index numbers them) that
        this holds, and how many rows each of those files has; ``None`` if it holds none."""
        import msgspec
        import numpy as np
        import pyarrow as pa

        placed = self.months.get((type, year, month), {})
        wanted = [
            (number, f.name, p)
            for number, f in files.items()
            if (p := placed.get(f.name)) is not None and (p.size, p.version) == (f.size, f.version)
        ]
        if not wanted:
            return None
        columns: list[list[np.ndarray]] = [[] for _ in _WIDTHS]
        numbers: list[np.ndarray] = []
        states: list[str] = []
        fetchers: list[str] = []
        counted: dict[str, int] = {}
        with open(self.path, "rb") as fh:
            for number, name, p in wanted:
                fh.seek(p.offset)
                data = fh.read(sum(_WIDTHS) * p.records + p.tally)
                at = 0
                for column, width in zip(columns, _WIDTHS, strict=True):
                    column.append(np.frombuffer(data, np.uint8, width * p.records, at))
                    at += width * p.records
                if p.tally:
                    s, f = msgspec.msgpack.decode(data[at:])
                    states += s
                    fetchers += f
                numbers.append(np.full(p.records, number, np.uint32))
                counted[name] = int(np.frombuffer(columns[_ROWS][-1], "<u4").sum())
        hashes, rids, ts, row, rows, calibre = (np.concatenate(c) for c in columns)
        k = len(ts) // 8
        nulls = pa.nulls(k, pa.string())

        def sixteen(data: np.ndarray) -> pa.Array[Any]:
            buffer = pa.py_buffer(data.data)
            return pa.FixedSizeBinaryArray.from_buffers(pa.binary(16), k, [None, buffer])

        table = pa.table(
            {
                "key_hash": sixteen(hashes),
                "ts_us": pa.array(ts.view("<i8")),
                "request_id": sixteen(rids),
                "calibre": pa.array(calibre),
                "file_no": pa.array(np.concatenate(numbers)),
                "row": pa.array(row.view("<u4")),
                "rows": pa.array(rows.view("<u4")),
                "state": pa.array(states, pa.string()) if states else nulls,
                "fetcher": pa.array(fetchers, pa.string()) if states else nulls,
            },
            schema=schema(),
        )
        return table, counted

    def of_type(self, type: RecordType) -> MonthRows:
        """What this holds of one type's months (for a process that builds those only)."""
        return MonthRows(self.path, {m: files for m, files in self.months.items() if m[0] is type})

    def remove(self) -> None:
        Path(self.path).unlink(missing_ok=True)


class MonthRowsSpool:
    """Gathers the :class:`FileRows` of a commit's files as they come, in one spool file
    of this process (a dead process's is removed as any dead writer's spool files)."""

    def __init__(self, backend: Backend) -> None:
        self._folder = backend.local_folder(TMP_DIR)
        self._path: Path | None = None
        self._fh: IO[bytes] | None = None
        self._offset = 0
        self._months: dict[tuple[RecordType, int, int], dict[str, _Placed]] = {}
        self._lock = threading.Lock()  # a commit onto an object store adds from its threads

    def add(self, partition: Partition, rows: FileRows) -> None:
        """``rows`` of ``partition``'s file, used only if it is named its compacted file
        (their spool file, if they came in one, read and removed)."""
        data = rows.data
        if rows.path is not None:
            spooled = Path(rows.path)
            data = spooled.read_bytes()
            spooled.unlink()
        with self._lock:
            self._add(partition, rows, data)

    def _add(self, partition: Partition, rows: FileRows, data: bytes) -> None:
        if self._fh is None:
            self._path = new_spool(self._folder)
            self._fh = self._path.open("wb")
        self._fh.write(data)
        name = compacted_stored(partition, rows.size, rows.version).name
        month = (partition.type, partition.year, partition.month)
        placed = _Placed(rows.size, rows.version, self._offset, rows.records, rows.tally)
        self._months.setdefault(month, {})[name] = placed
        self._offset += len(data)

    def done(self) -> MonthRows | None:
        """What was gathered (the spool file is the caller's to remove), or ``None``."""
        if self._fh is None or self._path is None:
            return None
        self._fh.close()
        return MonthRows(str(self._path), self._months)

    def discard(self) -> None:
        if self._fh is not None:
            self._fh.close()
        if self._path is not None:
            self._path.unlink(missing_ok=True)
