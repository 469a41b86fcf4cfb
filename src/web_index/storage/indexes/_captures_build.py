"""Writing capture indexes: compaction's work, apart from the lookup (``_captures``).

An index is made from its compacted file alone, read a row group at a time
without bodies (a file written before payload digests were stored has them
computed from its bodies, as ``conform`` does). Its lines are sorted in memory:
about 300 bytes a capture, 300 MB for a partition of a million.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._files import list_partition_files, read_superseded
from web_index.storage._layout import Partition, StoredFile, compacted_file, compacted_stored
from web_index.storage._schema import BODY_COLUMN, REF_COLUMN
from web_index.storage.backends import Backend, FileInfo, handle_version
from web_index.storage.indexes._capture_lines import (
    capture_lines,
    file_capture_lines,
    referring_places,
    shared_places,
    unique_lines,
)
from web_index.storage.indexes._captures import (
    capture_index_folder,
    capture_index_name,
    capture_index_path,
    check_mark,
    index_domain,
    index_names,
    listed_names,
    marked_index,
    open_capture_index,
    remove_indexes,
    write_capture_index,
)
from web_index.storage.pages import BodyPlace, body_places

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = [
    "build_capture_index",
    "ensure_capture_indexes",
    "file_lines",
    "holders_moved",
    "index_on_write",
    "mark_checking",
    "measured",
    "refresh_held_places",
    "table_lines",
    "written_lines",
]

log = logging.getLogger("web_index.storage")
_TRIES = 4  # reads of the holders' places, each made stale by a compaction of one of them
# A mark of an index still to be checked (``CHECK_SUFFIX``) younger than this may be its
# writer's, at work: its index is written again, the mark kept (clocks of many machines differ).
_MARK_KEPT = 600.0


def build_capture_index(
    backend: Backend,
    partition: Partition,
    files: list[StoredFile],
    *,
    prune: bool,
    have: Collection[str] | None = None,
) -> bool:
    """Write the capture index of the partition's compacted file (``files`` as
    listed) unless it has one; return whether written. ``prune``: see
    :func:`write_capture_index`; ``have``: the month's index names, if just
    listed. A failure is logged, never raised: the compaction it follows has
    committed, and the index is derived data."""
    try:
        return _build(backend, partition, files, prune, have)
    except Exception as exc:  # a full disk, a damaged file: read without an index meanwhile
        log.warning("no capture index for %s: %s (compact() tries again)", partition, exc)
        return False


def index_on_write(
    backend: Backend,
    partition: Partition,
    table: pa.Table | Iterable[pa.Table],
    superseded: Collection[str] = (),
    *,
    prune: bool,
    done: list[bool] | None = None,
) -> tuple[pa.Table | Iterable[pa.Table], Callable[[bytes | bytearray | Path, FileInfo], None]]:
    """``table`` to write as ``partition``'s compacted file on an object store (its rows, or
    the tables it comes as, then measured on the way: :func:`measured`), and a ``written``
    hook for that ``write_parquet``: it writes the file's capture index from the bytes sent
    and those rows, which :func:`build_capture_index` would read back (the pages of every
    payload the rows' references place among them); ``superseded``, ``prune``: the index's,
    see :func:`write_capture_index`; ``done`` gets whether it was written."""
    import pyarrow as pa

    sizes: list[int | None] = []  # of the bodies, as they are written
    if partition.type is RecordType.GET and not isinstance(table, pa.Table):
        table = measured(table, sizes)
    rows = table

    def written(data: bytes | bytearray | Path, info: FileInfo) -> None:
        if partition.type.is_metadata or not info.version:
            return  # no index; or a version no listing names: built as listed, later
        covered = compacted_stored(partition, info.size, info.version)
        lines = functools.partial(written_lines, backend, partition, rows, sizes, data)
        wrote = _index_written(backend, partition, covered, superseded, lines, prune=prune)
        if done is not None:
            done.append(wrote)

    return table, written


def _index_written(
    backend: Backend,
    partition: Partition,
    covered: StoredFile,
    superseded: Collection[str],
    lines_of: Callable[[dict[str, FileInfo]], list[bytes]],
    *,
    prune: bool,
) -> bool:
    """Write the capture index of the compacted file ``covered`` that its writer has just
    written, from the lines ``lines_of(holders)`` makes of what the writer has in hand (the
    rows, the bytes sent): what :func:`build_capture_index` would read the file back for
    (on an object store, the pages of every payload its references place). As there, a
    failure is logged, never raised, and a holder compacted again meanwhile has the index
    built again from the file; return whether written."""
    try:
        holders: dict[str, FileInfo] = {}
        lines = lines_of(holders)
        mark = mark_checking(backend, capture_index_path(partition, covered), holders)
        write_capture_index(backend, partition, covered, frozenset(superseded), lines, prune=prune)
        wrote = _build(backend, partition, [covered], prune, ()) if holders_moved(backend, holders) else True
        return _unmark(backend, mark, wrote)  # see _build
    except Exception as exc:  # a full disk, a lost connection: the compaction pass writes it
        log.warning("no capture index for %s: %s (compact() tries again)", partition, exc)
        return False


def _build(
    backend: Backend,
    partition: Partition,
    files: list[StoredFile],
    prune: bool,
    have: Collection[str] | None,
) -> bool:
    covered = compacted_file(files)
    if covered is None:
        return False
    if have is None:
        folder = capture_index_folder(partition.type, partition.year, partition.month)
        have = index_names(backend, folder, partition.domain)
    if capture_index_name(partition, covered) in have:
        return False
    mark: str | None = None
    for _ in range(_TRIES):
        try:
            handle = backend.open_parquet(covered.path, once=True)
        except FileNotFoundError:  # compacted again meanwhile: that compaction writes its own
            return _unmark(backend, mark, False)
        if handle_version(handle) not in (None, covered.version):
            return _unmark(backend, mark, False)
        superseded = read_superseded(handle, covered.path)
        holders: dict[str, FileInfo] = {}
        lines = file_lines(partition.type, handle, backend, covered.path, holders)
        # The file read must be the one listed (a local handle has no version to
        # ask): an index named for one version never describes another.
        try:
            now = backend.file_info(covered.path, fresh=True)
        except FileNotFoundError:
            return _unmark(backend, mark, False)
        if (now.size, now.version) != (covered.size, covered.version):
            return _unmark(backend, mark, False)
        mark = mark or mark_checking(backend, capture_index_path(partition, covered), holders)
        write_capture_index(backend, partition, covered, superseded, lines, prune=prune)
        # A holder compacted again after its places were read, and before this index
        # was there for its compaction to write again (refresh_held_places): read anew.
        # One compacted later finds this index, and writes it again itself. Until the
        # check is done, the mark says it is to be done (a writer killed meanwhile).
        if not holders_moved(backend, holders):
            break
    else:
        log.warning("capture index of %s: the months holding its payloads kept changing", partition)
    return _unmark(backend, mark, True)


def _unmark(backend: Backend, mark: str | None, wrote: bool) -> bool:
    """The check of the places is done: remove its ``mark`` (if any); return ``wrote``."""
    if mark is not None:
        backend.delete(mark)
    return wrote


def mark_checking(backend: Backend, index: str, holders: Mapping[str, FileInfo]) -> str | None:
    """Mark the capture index at ``index`` as one whose payloads' places (in ``holders``)
    are to be checked once it is written; return the mark's path (None: it places none)."""
    if not holders:
        return None
    mark = check_mark(index)
    # Not synced: a mark lost with the machine costs a slower lookup at most (a place
    # out of date is found out when read), where a sync would cost what writing the index does.
    backend.write_bytes(mark, b"", durable=False)
    return mark


def holders_moved(backend: Backend, files: Mapping[str, FileInfo]) -> bool:
    """Whether any of ``files`` (holders of payloads whose places an index's lines
    carry, as read) is not the version it was (or is gone): the index is then written
    again, since its compaction may have looked for it before it was there."""
    for path, was in files.items():
        try:
            now = backend.file_info(path, fresh=True)
        except FileNotFoundError:
            return True
        if (now.size, now.version) != (was.size, was.version):
            return True
    return False


def refresh_held_places(backend: Backend, partition: Partition, covered: StoredFile, month: str) -> bool:
    """Write again the capture index of ``covered`` (the partition's compacted
    file) if its lines place payloads in the domain's file of ``month``
    (``yyyy/mm``), just compacted again: their places moved. Return whether
    written; a failure is logged (the lines' places are checked when read)."""
    try:
        index = open_capture_index(backend, capture_index_path(partition, covered))
    except (FileNotFoundError, CorruptFileError):
        return False
    if month not in index.meta.payload_months:
        return False
    return build_capture_index(backend, partition, [covered], prune=False, have=())


def file_lines(
    type: RecordType,
    handle: pq.ParquetFile,
    backend: Backend,
    path: str,
    holders: dict[str, FileInfo] | None = None,
    *,
    sizes: Sequence[int | None] | None = None,
) -> list[bytes]:
    """A store file's capture lines (the file at ``path``) as its index holds
    them: sorted, each once; ``holders`` gets the versions of the other
    files whose payloads they place, as read; ``sizes``: its bodies' lengths, row by
    row, when its writer knows them (see :func:`~web_index.storage.pages.body_places`)."""
    groups = file_capture_lines(
        type, handle, stored=True, backend=backend, path=path, seen=holders, sizes=sizes
    )
    return unique_lines(line for group in groups for line in group)


def table_lines(
    type: RecordType,
    table: pa.Table,
    handle: pq.ParquetFile,
    backend: Backend,
    path: str,
    holders: dict[str, FileInfo] | None = None,
) -> list[bytes]:
    """The capture lines of ``table`` as the index of the file it was just
    written to (``handle``, for its bodies' places; to be named ``path``) holds
    them: sorted, each once; ``holders``: see :func:`file_lines`."""
    places: list[BodyPlace | None] | None = None
    held: dict[int, str] = {}
    if type is RecordType.GET:
        import pyarrow.compute as pc

        places = []
        # The bodies' lengths in hand: a page's places follow from them, not its values read back.
        sizes = pc.binary_length(table.column(BODY_COLUMN)).to_pylist()
        for g in range(handle.metadata.num_row_groups):
            rows = handle.metadata.row_group(g).num_rows
            group = body_places(handle, g, sizes[len(places) : len(places) + rows])
            places += group if group is not None else [None] * rows
        shared = referring_places(backend, handle, path, table.column(REF_COLUMN), holders, (table, places))
        held = shared_places(shared, 0, len(places), places)
    return unique_lines(capture_lines(type, table, first_row=0, places=places, held=held))


def ensure_capture_indexes(
    backend: Backend, type: RecordType, year: int, month: int, listing: Mapping[str, list[StoredFile]]
) -> int:
    """Write the capture index of every compacted file of a month (``listing``,
    by domain) that has none: stores compacted before indexes were written, a
    compaction killed before its index; and again those whose writer was killed
    before it checked their payloads' places. Remove the indexes of files rewritten
    since (left by a compaction whose own index failed). Return how many were
    written."""
    folder = capture_index_folder(type, year, month)
    names, checks = listed_names(backend, folder)
    have = set(names)
    written = 0
    for domain, files in sorted(listing.items()):
        partition = Partition(type, year, month, domain)
        covered = compacted_file(files)
        if covered is not None and capture_index_name(partition, covered) not in have:
            written += build_capture_index(backend, partition, files, prune=False, have=have)
    for mark in checks:  # its writer died before checking its payloads' places, or is checking
        name, age = marked_index(mark)
        domain = index_domain(name)
        partition, files = Partition(type, year, month, domain), listing.get(domain, [])
        covered = compacted_file(files)
        if covered is not None and capture_index_name(partition, covered) == name:
            written += build_capture_index(backend, partition, files, prune=False, have=())
        if age > _MARK_KEPT:  # a writer still at work needs its mark: it may write after this
            backend.delete(f"{folder}/{mark}")
    by_domain: dict[str, set[str]] = defaultdict(set)
    for name in have:
        by_domain[index_domain(name)].add(name)
    stale = [
        domain
        for domain, names in sorted(by_domain.items())
        if names - _current(Partition(type, year, month, domain), listing.get(domain, []))
    ]
    if stale:
        # From a listing taken now, one for the month (one a domain is quadratic in its domains):
        # a compaction committing in between loses its new index (a slower query until the
        # next compact(), never a wrong answer).
        now = list_partition_files(backend, Partition(type, year, month, "").folder, type, year, month)
        for domain in stale:
            partition = Partition(type, year, month, domain)
            keep = _current(partition, now.get(domain, []))
            remove_indexes(backend, partition, keep=keep, names=by_domain[domain])
    return written


def _current(partition: Partition, files: list[StoredFile]) -> set[str]:
    """The name of the capture index the partition's files call for (none without a compacted file)."""
    covered = compacted_file(files)
    return set() if covered is None else {capture_index_name(partition, covered)}


def written_lines(
    backend: Backend,
    partition: Partition,
    table: pa.Table | Iterable[pa.Table],
    sizes: list[int | None],
    written: bytes | bytearray | Path,
    holders: dict[str, FileInfo],
) -> list[bytes]:
    """The capture lines of ``partition``'s compacted file, just written from ``table`` (its
    rows, or the tables it was written from as they came, their bodies' lengths gathered in
    ``sizes`` by :func:`measured`) as the bytes ``written`` (in memory, or a local file): the
    bodies' places learnt from those bytes and the lengths in hand, nothing read back from
    the store; ``holders``: see :func:`~web_index.storage.indexes.table_lines`."""
    import pyarrow as pa

    from web_index.storage.pages import CheckedFile

    path = partition.compacted_path
    # Read, not mapped: every page of a big file would stay in this process's RSS while mapped.
    in_memory = isinstance(written, bytes | bytearray)
    with pa.BufferReader(written) if in_memory else pa.OSFile(str(written), "rb") as source:
        handle = CheckedFile(source, path=path)
        if isinstance(table, pa.Table):
            return table_lines(partition.type, table, handle, backend, path, holders)
        # Merged as read: its lines from the file, a row group at a time; the lengths as
        # written, row for row, or none (the file's pages then read).
        known = sizes if len(sizes) == handle.metadata.num_rows else None
        return file_lines(partition.type, handle, backend, path, holders, sizes=known)


def measured(tables: Iterable[pa.Table], sizes: list[int | None]) -> Iterator[pa.Table]:
    """``tables`` as they come, their bodies' lengths added to ``sizes`` on the way: the places
    of the file they are written to then follow from them (``pages/_places.py``), its pages
    not decompressed again."""
    import pyarrow.compute as pc

    for table in tables:
        sizes += pc.binary_length(table.column(BODY_COLUMN)).to_pylist()
        yield table
