"""The capture index: a partition's captures in SURT order, found by bisection.

A CDX query asks by SURT key (``com,example)/a``), and the store's files are
sorted by URL key (``https://www.example.com/a``): without an index, a prefix
query reads the whole partition and sorts what matches. Compaction therefore
writes, beside each compacted ``get`` and ``head`` file, its captures as
sorted CDXJ lines (one a response, ``_capture_lines``) in zstd blocks
(``_captures_format``)::

    _captures/<type>/<yyyy>/<mm>/<domain>.<tag>.cdxj.zst

``tag`` names the version of the compacted file it was made from and the
index's format, so a reader finds the index of the file it listed by name,
and a compacted file rewritten since has no index until compaction writes it
(a stale index is never read; one of an older format is stale too). Indexes
are read from the local file, kept open when large (an object store's index is
copied to a local cache folder once, and again when its places are written
again: ``refresh_held_places``). This module names,
writes, removes and opens them, and keeps those a store has opened.

Derived data, as the month index: a missing or damaged index costs speed (the
partition is read instead), never an answer.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._layout import CAPTURES_DIR, Partition, StoredFile
from web_index.storage.backends import Backend, LocalBackend, open_files_share
from web_index.storage.indexes._captures_format import FORMAT, CaptureIndex, encode_index

__all__ = [
    "CHECK_SUFFIX",
    "CaptureIndex",
    "CaptureIndexes",
    "capture_index_bytes",
    "capture_index_folder",
    "capture_index_name",
    "capture_index_path",
    "check_mark",
    "forget_capture_index",
    "index_domain",
    "index_names",
    "listed_names",
    "marked_index",
    "open_capture_index",
    "remove_indexes",
    "write_capture_index",
]

log = logging.getLogger("web_index.storage")

# An index's name: its partition's domain, the tag, the suffix (an index of format 1 was plain
# ``.cdxj``: such names are listed too, to be removed as stale).
_NAME = re.compile(r"(.+)\.[0-9a-f]{16}\.cdxj(?:\.zst)?")
_SUFFIX = ".cdxj.zst"
# Beside an index whose lines place payloads in other months' files, while its writer checks
# that those files did not change meanwhile: one left behind (its writer died) has the index
# written again by the next compact() (``ensure_capture_indexes``).
CHECK_SUFFIX = ".check"
_CHECK = re.compile(r"(.+)\.([0-9a-f]{8})[0-9a-f]{8}\.check")
# An index this large is kept open, its header held and its blocks read as needed; a smaller one
# is read whole. A batch over a big store opens thousands of indexes of a few hundred KiB: read
# whole they outgrow _HELD_MAX, so that the next batch opens them all again.
_OPEN_MIN = 64 << 10
_OPEN_MAX = 16_384  # indexes a store keeps open,
_FILES_MAX = 4096  # of them with a descriptor (fewer under a lower limit: _files_max)
_HELD_MAX = 256 << 20  # and the bytes they hold in memory


def _files_max() -> int:
    """Indexes kept open: a quarter of the descriptors this process may hold, at most ``_FILES_MAX``."""
    return open_files_share(4, _FILES_MAX)


def _tag(version: str) -> str:
    # The format is in the name: an index of another format is a stale index, never opened.
    return hashlib.blake2b(f"{version}/{FORMAT}".encode(), digest_size=8).hexdigest()


def capture_index_name(partition: Partition, covered: StoredFile) -> str:
    """The file name of the capture index of ``covered`` (a compacted file)."""
    return f"{partition.domain}.{_tag(covered.version)}{_SUFFIX}"


def capture_index_folder(type: RecordType, year: int, month: int) -> str:
    """Where a month's capture indexes live."""
    return f"{CAPTURES_DIR}/{type.value}/{year:04d}/{month:02d}"


def capture_index_path(partition: Partition, covered: StoredFile) -> str:
    """Where the capture index of ``covered`` (a compacted file) lives."""
    p = partition
    return f"{capture_index_folder(p.type, p.year, p.month)}/{capture_index_name(p, covered)}"


def write_capture_index(
    backend: Backend,
    partition: Partition,
    covered: StoredFile,
    superseded: frozenset[str],
    lines: list[bytes],
    *,
    prune: bool,
) -> str:
    """Write ``lines`` (sorted, unique) as the capture index of ``covered``;
    with ``prune`` (only under the partition's compaction lock: another
    compaction may be writing the index of a newer file), remove the
    partition's other indexes. Return the index's path."""
    path, data = capture_index_bytes(partition, covered, superseded, lines)
    backend.write_bytes(path, data)
    forget_capture_index(backend, path)  # written again (refresh_held_places): not the old copy
    if prune:
        remove_indexes(backend, partition, keep={capture_index_name(partition, covered)})
    return path


def capture_index_bytes(
    partition: Partition, covered: StoredFile, superseded: frozenset[str], lines: list[bytes]
) -> tuple[str, bytes]:
    """The path and bytes of the capture index of ``covered`` made of ``lines``
    (sorted, unique, an index's lines)."""
    data = encode_index(covered.name, covered.size, covered.version, sorted(superseded), lines)
    return capture_index_path(partition, covered), data


def remove_indexes(
    backend: Backend, partition: Partition, *, keep: set[str], names: Iterable[str] | None = None
) -> None:
    """Delete the partition's capture indexes but those named in ``keep``; ``names``:
    the partition's index names, if just listed."""
    p = partition
    folder = capture_index_folder(p.type, p.year, p.month)
    for name in index_names(backend, folder, p.domain) if names is None else names:
        if name not in keep:
            backend.delete(f"{folder}/{name}")


def index_domain(name: str) -> str:
    """The partition domain of a capture index's file name (one of :func:`index_names`)."""
    found = _NAME.fullmatch(name)
    assert found is not None, name
    return found[1]


def index_names(backend: Backend, folder: str, domain: str | None = None) -> list[str]:
    """The names of the capture indexes in ``folder`` (of one domain's partition, if given)."""
    return listed_names(backend, folder, domain)[0]


def listed_names(backend: Backend, folder: str, domain: str | None = None) -> tuple[list[str], list[str]]:
    """The names of the capture indexes in ``folder`` (of one domain's partition, if given),
    and the marks of those whose payloads' places are still to be checked (``CHECK_SUFFIX``;
    :func:`marked_index` names an index of its mark): one listing."""
    names: list[str] = []
    checks: list[str] = []
    for info in backend.list_files(folder, "" if domain is None else f"{domain}."):
        name = info.name
        checked = _CHECK.fullmatch(name)
        found = _NAME.fullmatch(name if checked is None else checked[1])
        if found is not None and domain in (None, found[1]):
            (names if checked is None else checks).append(name)
    return names, checks


def check_mark(path: str) -> str:
    """A new mark for the index at ``path`` (see ``CHECK_SUFFIX``): one a writer, so that
    a writer that finishes its check never removes another's, named with its time."""
    return f"{path}.{int(time.time()) & 0xFFFFFFFF:08x}{secrets.token_hex(4)}{CHECK_SUFFIX}"


def marked_index(mark: str) -> tuple[str, float]:
    """The name of the index that ``mark`` (a name ``listed_names`` gave) is of, and the
    mark's age in seconds."""
    checked = _CHECK.fullmatch(mark)
    assert checked is not None
    return checked[1], time.time() - int(checked[2], 16)


class CaptureIndexes:
    """The capture indexes a store has opened, by path (a path names one
    version of one file, so an opened index is never stale); thread-safe."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._opened: dict[str, CaptureIndex] = {}
        self._held = 0  # bytes of the small indexes read into memory
        self._files = 0  # indexes kept open
        self._refused: set[str] = set()  # unusable: not opened again
        self._files_max = _files_max()
        self._paths: dict[StoredFile, str] = {}
        self._lock = threading.Lock()
        # Whether an index opened so far lists rows that refer to another month's payload:
        # until one has, this store is taken to have none (see Store.captures_by_row).
        self.seen_referring = False

    def get(self, partition: Partition, covered: StoredFile) -> CaptureIndex | None:
        """The index of ``covered``, or ``None`` if it has none (or an unusable one)."""
        path = self._paths.get(covered)
        if path is None:  # a lookup asks for a few again and again: the name is a hash
            path = capture_index_path(partition, covered)
            if len(self._paths) >= _OPEN_MAX:
                self._paths.clear()
            self._paths[covered] = path
        found = self._opened.get(path)  # no lock to read: under the load of many threads it convoyed
        if found is not None or path in self._refused:
            return found
        try:
            found = open_capture_index(self._backend, path)
            if not found.covers(covered):
                raise CorruptFileError(path, f"describes another file than {covered.path}")
        except FileNotFoundError:
            return None
        except CorruptFileError as exc:
            self.refuse(exc, partition)
            return None
        except OSError as exc:  # a full cache disk, an object store's hiccup: tried again next time
            log.warning("capture index %s not read (%s); reading %s without it", path, exc, partition)
            return None
        if found.meta.payload_months:
            self.seen_referring = True
        with self._lock:
            already = self._opened.get(path)
            if already is not None:  # another thread opened it meanwhile: count it once
                return already
            self._opened[path] = found
            self._held += found.held
            self._files += found.file_backed
            if self._files > self._files_max:  # the process's limit may have been raised since
                self._files_max = _files_max()
            # Oldest opened first out: cheaper than an LRU's bookkeeping on every hit.
            while self._opened and (
                self._held > _HELD_MAX or self._files > self._files_max or len(self._opened) > _OPEN_MAX
            ):
                gone = self._opened.pop(next(iter(self._opened)))
                self._held -= gone.held
                self._files -= gone.file_backed
        return found

    def forget(self, path: str) -> None:
        """Open the index at ``path`` anew next time (written again: see
        :func:`~web_index.storage.indexes.refresh_held_places`)."""
        with self._lock:
            gone = self._opened.pop(path, None)
            if gone is not None:
                self._held -= gone.held
                self._files -= gone.file_backed

    def refuse(self, exc: CorruptFileError, partition: Partition) -> None:
        """Stop using the damaged index ``exc`` names: its partition is read without it
        until it is deleted (derived data) and ``compact()`` writes it again. Said once."""
        log.warning("capture index %s unusable (%s); reading %s without it", exc.path, exc, partition)
        with self._lock:
            if len(self._refused) < _OPEN_MAX:
                self._refused.add(exc.path)
            gone = self._opened.pop(exc.path, None)
            if gone is not None:
                self._held -= gone.held
                self._files -= gone.file_backed


def open_capture_index(backend: Backend, path: str, *, fresh: bool = False) -> CaptureIndex:
    """The capture index at ``path``, checked; raises ``FileNotFoundError``,
    :class:`CorruptFileError` or another ``OSError``. ``fresh``: as the store
    holds it now, not this machine's copy of an object store's index."""
    if isinstance(backend, LocalBackend):
        return CaptureIndex(path, _opened(backend.file_path(path)))
    # An object store's index is copied once: the name says which version of
    # the covered file it describes, so its lines never change (the places of
    # payloads other months hold may: written again, the copy is dropped).
    local = _cached_copy(backend, path)
    if fresh:
        local.unlink(missing_ok=True)
    if not local.exists():
        tmp = local.parent / f"{local.name}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            copied = backend.copy_out(path, tmp)
            tmp.replace(local)
            opened = _opened(local)
        finally:
            tmp.unlink(missing_ok=True)
        # Written again while copied: the writer may have dropped the machine's copy
        # before this one was put in its place. Used once, not kept.
        if backend.file_info(path).version != copied:
            local.unlink(missing_ok=True)
        return CaptureIndex(path, opened)
    return CaptureIndex(path, _opened(local))


def _cached_copy(backend: Backend, path: str) -> Path:
    return backend.local_folder(CAPTURES_DIR) / hashlib.sha256(path.encode()).hexdigest()


def forget_capture_index(backend: Backend, path: str) -> None:
    """Drop this machine's copy of an object store's index at ``path``, written
    again (with new places of payloads another month's file holds)."""
    if not isinstance(backend, LocalBackend):
        _cached_copy(backend, path).unlink(missing_ok=True)


def _opened(local: Path) -> bytes | io.FileIO:
    fh = io.FileIO(local, "r")
    try:
        size = os.fstat(fh.fileno()).st_size
        if size < _OPEN_MIN:  # read whole: an open file holds a descriptor, and most indexes are small
            data = fh.readall()
            fh.close()
            return data
    except BaseException:
        fh.close()
        raise
    return fh
