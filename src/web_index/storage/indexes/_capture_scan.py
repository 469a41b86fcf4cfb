"""Finding captures by SURT prefix: what a CDX query reads.

Month by month, one registrable domain's partition gives its lines from its
capture index (bisected, ``_captures``), the lines of the part files that
index does not cover and of buffered rows (those of the prefixes only, found by
key in the buffer, which made them at insert: no body is read), or, with no
usable index, the lines of all its visible files. The months' sorted streams
are merged, as pywb merges its CDXJ files, so a caller that wants the first
lines stops reading after them.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from web_index._retry import retrying
from web_index.errors import CorruptFileError
from web_index.models import STORED_END_US, RecordType, month_bounds
from web_index.storage._layout import Partition, StoredFile, compacted_file
from web_index.storage.indexes._capture_lines import (
    capture_identity,
    capture_stamp,
    file_capture_lines,
    unique_lines,
)

if TYPE_CHECKING:  # Store: the store imports this package (its capture indexes), at run time a cycle
    import pyarrow.parquet as pq

    from web_index.storage._store import Store

__all__ = ["find_capture_lines"]

_TRIES = 8
# Assumed, as the scan path before it did (an insert does not enforce it): a
# chain's last response comes within an hour of the attempt's start.
_CHAIN_SPAN_US = 3600 * 1_000_000


def find_capture_lines(
    store: Store,
    type: RecordType,
    domain: str,
    prefixes: tuple[bytes, ...],
    *,
    start_us: int | None = None,
    end_us: int | None = None,
    reverse: bool = False,
) -> Iterator[bytes]:
    """The capture lines (``_capture_lines``) of ``type`` (``get`` or ``head``)
    in ``domain``'s partitions that start with one of ``prefixes`` and were
    captured from ``start_us`` to ``end_us`` (whole seconds, inclusive), in
    byte order, each once, buffered captures included. ``reverse``: newest
    first, by key and second descending, and the captures of one key in one
    second (ties) in byte order still, as a CDX query's ``sort=reverse`` gives
    them: so a latest lookup knows its answer's ties without reading on."""
    if type.is_metadata:
        raise ValueError(f"{type.value} records are not captures")
    buffered = store.buffer.capture_lines(type.method, domain, prefixes)
    listed = _window_months(start_us, end_us)
    if listed is None:
        listed = store.months(type)  # newest first
    months = sorted({*listed, *buffered}) if buffered else listed[::-1]
    if start_us is not None or end_us is not None:
        months = [m for m in months if _overlaps(*m, start_us, end_us)]
    first = b"00000000000000" if start_us is None else capture_stamp(start_us).encode()
    last = b"99999999999999" if end_us is None else capture_stamp(end_us).encode()
    if reverse:
        yield from _newest_first(store, type, domain, months, buffered, prefixes, first, last)
        return
    streams = [
        _partition_lines(store, Partition(type, *m, domain), buffered.get(m, []), prefixes) for m in months
    ]
    previous = None
    for line in streams[0] if len(streams) == 1 else heapq.merge(*streams):
        # One capture read twice (buffered and flushed meanwhile) gives two lines, next to each
        # other: of one identity, the index's line sorts first, and it is the one with the place.
        ident = capture_identity(line)
        if ident != previous:
            previous = ident
            if first <= _stamp(line) <= last:
                yield line


def _overlaps(year: int, month: int, start_us: int | None, end_us: int | None) -> bool:
    """Whether a month's partitions may hold captures from ``start_us`` to ``end_us``."""
    lo, hi = month_bounds(year, month)
    # A month holds attempts begun in it: their responses come up to a chain's span later.
    return (start_us is None or hi + _CHAIN_SPAN_US > start_us) and (end_us is None or lo <= end_us)


def _window_months(start_us: int | None, end_us: int | None) -> list[tuple[int, int]] | None:
    """The months whose partitions may hold captures from ``start_us`` to ``end_us`` (as
    ``_overlaps`` says, and that the store accepts), newest first, when they are one or two;
    ``None`` for a wider or open range. Their folders are then looked at directly (a month
    without one has no files) instead of through the type's and year's folders, a stat each
    while unchanged: a closest lookup's first window is one month, and needs one stat, not three."""
    if start_us is None or end_us is None:
        return None
    low, high = max(start_us - _CHAIN_SPAN_US, 0), min(end_us, STORED_END_US - 1)
    if low > high:
        return []
    at, to = time.gmtime(low // 1_000_000), time.gmtime(high // 1_000_000)
    first, last = (at.tm_year, at.tm_mon), (to.tm_year, to.tm_mon)
    if first == last:
        return [first]
    if (first[0] + first[1] // 12, first[1] % 12 + 1) == last:
        return [last, first]
    return None


def _stamp(line: bytes) -> bytes:
    at = line.index(b" ") + 1
    return line[at : at + 14]


@functools.lru_cache(maxsize=1024)
def _older_months_end(year: int, month: int) -> bytes:
    """The stamp that what older months than this one hold was captured before: this month's start
    and a chain's span."""
    return capture_stamp(month_bounds(year, month)[0] + _CHAIN_SPAN_US).encode()


def _newest_first(
    store: Store,
    type: RecordType,
    domain: str,
    months: list[tuple[int, int]],
    buffered: dict[tuple[int, int], list[bytes]],
    prefixes: tuple[bytes, ...],
    first: bytes,
    last: bytes,
) -> Iterator[bytes]:
    """``find_capture_lines`` reversed. Lines of one key (an exact match) come in time order, so
    they are read a month at a time from the newest, and those no older month can precede are
    given at once: a latest lookup reads one month, not all. Such a batch holds every tie of its
    lines (an older month's lines are older than any of them). Other matches are read whole."""
    one_key = len(prefixes) == 1 and prefixes[0].endswith(b" ")
    pending: list[bytes] = []
    for year, month in reversed(months):
        partition, rows = Partition(type, year, month, domain), buffered.get((year, month), [])
        if not one_key:
            pending += _partition_lines(store, partition, rows, prefixes)
            continue
        pending += _key_lines(store, partition, rows, prefixes)
        if pending:
            below = _older_months_end(year, month)
            ready: list[bytes] = []
            older: list[bytes] = []
            for line in pending:
                (ready if _stamp(line) >= below else older).append(line)
            pending = older
            yield from (line for line in _ties_kept(unique_lines(ready)) if first <= _stamp(line) <= last)
    yield from (line for line in _ties_kept(unique_lines(pending)) if first <= _stamp(line) <= last)


def _ties_kept(lines: list[bytes]) -> Iterator[bytes]:
    """Sorted ``lines`` by key and second descending, those of one key and second in their order."""
    for _, tied in itertools.groupby(reversed(lines), key=_key_and_second):
        yield from reversed(list(tied))


def _key_and_second(line: bytes) -> bytes:
    return line[: line.index(b" ") + 15]


def _key_lines(
    store: Store, partition: Partition, buffered: list[bytes], prefixes: tuple[bytes, ...]
) -> list[bytes]:
    """``_partition_lines`` of one key (unsorted). A latest lookup asks it of each month from
    the newest until one holds the key: a month whose only file is a compacted one with its
    index is answered by the index (its filter, most often), no iterators made."""
    files = store.month_files(partition.type, partition.year, partition.month).get(partition.domain, [])
    if not files and not buffered:
        return []
    compacted = compacted_file(files)
    index = None if compacted is None or buffered else store.capture_indexes.get(partition, compacted)
    if index is None or any(f.part is not None and f.part not in index.superseded for f in files):
        return list(_partition_lines(store, partition, buffered, prefixes, files))
    try:  # its filter first: most months a latest lookup asks lack the key
        return list(index.lines(prefixes))
    except CorruptFileError as exc:  # read again without it, as _guarded does
        store.capture_indexes.refuse(exc, partition)
        return list(_partition_lines(store, partition, buffered, prefixes, files))


def _partition_lines(
    store: Store,
    partition: Partition,
    buffered: list[bytes],
    prefixes: tuple[bytes, ...],
    files: list[StoredFile] | None = None,
) -> Iterator[bytes]:
    p = partition
    listed = [store.month_files(p.type, p.year, p.month).get(p.domain, []) if files is None else files]

    def read() -> tuple[Iterator[bytes], list[bytes]]:
        files = listed[0]
        if not files:  # buffered captures only: nothing to open (no retrying wrapper, ~0.5 ms)
            return iter(()), []
        compacted = compacted_file(files)
        index = None if compacted is None else store.capture_indexes.get(partition, compacted)
        try:
            if index is None:
                _, opened, _ = store.open_visible(partition, files)
                handles = [handle for _, handle in opened]
                return iter(()), _lines(p.type, handles, prefixes)
            absorbed = index.superseded
            parts = [f for f in files if f.part is not None and f.part not in absorbed]
            handles = [store.backend.open_parquet(f.path) for f in parts]
            assert compacted is not None
            return _guarded(store, partition, index.lines(prefixes), compacted, prefixes), _lines(
                p.type, handles, prefixes
            )
        except FileNotFoundError:  # a compaction committed since the listing
            listed[0] = store.partition_files(partition)
            raise

    try:  # tenacity's wrapper costs a lookup more than the bisection: only once it is needed
        indexed, extra = read()
    except FileNotFoundError:
        indexed, extra = retrying(
            read,
            tries=_TRIES,
            on=(FileNotFoundError,),
            gave_up=f"partition {p} kept changing while it was read",
        )
    extra += buffered  # the buffer's lines of these prefixes (made at insert)
    extra.sort()
    return heapq.merge(indexed, extra) if extra else indexed


def _guarded(
    store: Store,
    partition: Partition,
    lines: Iterator[bytes],
    covered: StoredFile,
    prefixes: tuple[bytes, ...],
) -> Iterator[bytes]:
    """An index's ``lines``; if a block of it turns out damaged (each is checked when read),
    the rest from the file it covers, and the index is not used again."""
    last = None
    try:
        for line in lines:
            last = capture_identity(line)
            yield line
    except CorruptFileError as exc:
        store.capture_indexes.refuse(exc, partition)
        rest = sorted(_lines(partition.type, [store.backend.open_parquet(covered.path)], prefixes))
        yield from (line for line in rest if last is None or capture_identity(line) > last)


def _lines(type: RecordType, handles: Sequence[pq.ParquetFile], prefixes: tuple[bytes, ...]) -> list[bytes]:
    """The lines of these files starting with one of ``prefixes`` (unsorted)."""
    return [
        line
        for handle in handles
        for lines in file_capture_lines(type, handle)
        for line in lines
        if line.startswith(prefixes)
    ]
