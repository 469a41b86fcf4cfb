"""The capture index: a partition's captures in SURT order, read by bisection.

A CDX query asks by SURT key (``com,example)/a``), and the store's files are
sorted by URL key (``https://www.example.com/a``): without an index, a prefix
query reads the whole partition and sorts what matches. Compaction therefore
writes, beside each compacted ``get`` and ``head`` file, its captures as a
sorted CDXJ file (one line a response, ``_capture_lines``)::

    _captures/<type>/<yyyy>/<mm>/<domain>.<tag>.cdxj

``tag`` names the version of the compacted file it was made from, so a reader
finds the index of the file it listed by name, and a compacted file rewritten
since has no index until compaction writes it (a stale index is never read).
The first line, ``!meta {...}``, holds the format, the file covered, the
parts that file absorbed (the reader reads the partition's other parts
itself), the CRC-32 of the lines (checked once per process when the index is
opened) and the offset of every 64th line, which a lookup bisects before it
walks at most 64 lines: pywb's bisection of a CDXJ file, without its
``readline`` per step. Lines are mapped from the local file (an object
store's index is copied to a local cache folder once: it never changes).

Derived data, as the month index: a missing or damaged index costs speed (the
partition is read instead), never an answer.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import mmap
import os
import re
import threading
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._layout import CAPTURES_DIR, Partition, StoredFile
from web_index.storage.backends import Backend, LocalBackend

__all__ = [
    "CaptureIndex",
    "CaptureIndexes",
    "capture_index_bytes",
    "capture_index_folder",
    "capture_index_name",
    "capture_index_path",
    "index_domain",
    "index_names",
    "open_capture_index",
    "remove_indexes",
    "write_capture_index",
]

log = logging.getLogger("web_index.storage")

FORMAT = 1
_SAMPLE = 64  # lines between two bisection points
_META = b"!meta "
_TAIL = re.compile(r"\.[0-9a-f]{16}\.cdxj")
_TAIL_LEN = 22
_MAP_MIN = 1 << 20  # an index this large is mapped, a smaller one read
_HEAD = 256  # bytes of each sampled line kept in memory for the bisection
_OPEN_MAX = 16_384  # indexes a store keeps open,
_MAPS_MAX = 256  # of them mapped (each mapping holds a file descriptor),
_HELD_MAX = 256 << 20  # and bytes of the smaller ones held in memory


class _Meta(msgspec.Struct, frozen=True):
    format: int
    covers: str  # the compacted file's name
    size: int
    version: str
    superseded: list[str]  # sorted: the same file, the same bytes
    lines: int
    crc32: int
    samples: list[int]  # offsets of every _SAMPLE-th line, from the first line


_decode_meta = msgspec.json.Decoder(_Meta).decode


def _tag(version: str) -> str:
    return hashlib.blake2b(version.encode(), digest_size=8).hexdigest()


def capture_index_name(partition: Partition, covered: StoredFile) -> str:
    """The file name of the capture index of ``covered`` (a compacted file)."""
    return f"{partition.domain}.{_tag(covered.version)}.cdxj"


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
    if prune:
        remove_indexes(backend, partition, keep={capture_index_name(partition, covered)})
    return path


def capture_index_bytes(
    partition: Partition, covered: StoredFile, superseded: frozenset[str], lines: list[bytes]
) -> tuple[str, bytes]:
    """The path and bytes of the capture index of ``covered`` made of ``lines``
    (sorted, unique)."""
    body = b"".join(line + b"\n" for line in lines)
    samples: list[int] = []
    offset = 0
    for n, line in enumerate(lines):
        if n % _SAMPLE == 0:
            samples.append(offset)
        offset += len(line) + 1
    meta = _Meta(
        FORMAT,
        covered.name,
        covered.size,
        covered.version,
        sorted(superseded),
        len(lines),
        zlib.crc32(body),
        samples,
    )
    return capture_index_path(partition, covered), _META + msgspec.json.encode(meta) + b"\n" + body


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
    return name[:-_TAIL_LEN]


def index_names(backend: Backend, folder: str, domain: str | None = None) -> list[str]:
    """The names of the capture indexes in ``folder`` (of one domain's partition, if given)."""
    names = []
    for info in backend.list_files(folder, "" if domain is None else f"{domain}."):
        cut = len(info.name) - _TAIL_LEN
        if cut > 0 and _TAIL.fullmatch(info.name, cut) and domain in (None, info.name[:cut]):
            names.append(info.name)
    return names


class CaptureIndex:
    """An opened capture index: its coverage, and its lines by SURT prefix."""

    def __init__(self, path: str, data: mmap.mmap | bytes) -> None:
        end = data.find(b"\n")
        if data[: len(_META)] != _META or end < 0:
            raise CorruptFileError(path, "not a capture index (no !meta line)")
        try:
            meta = _decode_meta(data[len(_META) : end])
        except msgspec.MsgspecError as exc:  # not JSON, or not the fields it must hold
            raise CorruptFileError(path, f"unreadable !meta line: {exc}") from None
        if meta.format != FORMAT:
            raise CorruptFileError(path, f"capture index format {meta.format}, this version reads {FORMAT}")
        self._start = end + 1
        if zlib.crc32(memoryview(data)[self._start :]) != meta.crc32:
            raise CorruptFileError(path, "capture index damaged (CRC-32 of its lines differs)")
        # The CRC covers the lines, not the !meta line: samples that do not each
        # start a line would make the bisection skip lines.
        body = len(data) - self._start
        if len(meta.samples) != -(-meta.lines // _SAMPLE) or any(
            not 0 <= s < body or (s and data[self._start + s - 1] != 10) or s <= before
            for before, s in zip([-1, *meta.samples], meta.samples, strict=False)
        ):
            raise CorruptFileError(path, "capture index damaged (its samples are not line starts)")
        self.path = path
        self.meta = meta
        self.superseded = frozenset(meta.superseded)  # the part ids the covered file absorbed
        self.held = len(data) if isinstance(data, bytes) else 0
        self._data = data
        self._samples = [self._start + s for s in meta.samples]
        # Each sampled line's first bytes, so that the bisection among samples compares in C: a
        # key of up to _HEAD bytes orders against them as against the lines (see _lower_bound).
        self._heads = [bytes(data[at : at + _HEAD]) for at in self._samples]

    def covers(self, file: StoredFile) -> bool:
        return (file.name, file.size, file.version) == (
            self.meta.covers,
            self.meta.size,
            self.meta.version,
        )

    def lines(self, prefixes: tuple[bytes, ...]) -> Iterator[bytes]:
        """The lines starting with one of ``prefixes``, in order."""
        data = self._data
        pos = self._lower_bound(min(prefixes))
        size = len(data)
        while pos < size:
            eol = data.find(b"\n", pos)
            line = data[pos:eol]
            if line.startswith(prefixes):
                yield line
            elif all(line[: len(p)] > p for p in prefixes):  # past every prefix's lines
                return
            pos = eol + 1

    def _lower_bound(self, key: bytes) -> int:
        """The offset of the first line not below ``key``."""
        data, k = self._data, len(key)
        # A line shorter than the key compares with its newline, which sorts below every key byte.
        samples = self._samples
        # A key is below a line's first _HEAD bytes exactly when it is below its first k <= _HEAD.
        if k <= _HEAD:
            i = bisect.bisect_left(self._heads, key)
        else:
            i = bisect.bisect_left(samples, key, key=lambda at: data[at : at + k])
        # Between two samples, bisected by bytes as pywb bisects a CDXJ file: the
        # line holding the middle byte, then the half the key is in.
        lo = samples[i - 1] if i else self._start
        hi = samples[i] if i < len(samples) else len(data)
        while lo < hi:
            at = data.rfind(b"\n", lo, (lo + hi) // 2) + 1 or lo
            if data[at : at + k] < key:
                lo = data.find(b"\n", at, hi) + 1 or hi
            else:
                hi = at
        return lo


class CaptureIndexes:
    """The capture indexes a store has opened, by path (a path names one
    version of one file, so an opened index is never stale); thread-safe."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._opened: dict[str, CaptureIndex] = {}
        self._held = 0  # bytes of the small indexes read into memory
        self._maps = 0  # mapped indexes
        self._refused: set[str] = set()  # unusable: not opened again
        self._paths: dict[StoredFile, str] = {}
        self._lock = threading.Lock()

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
            # Said once: the partition is read without it until it is deleted
            # (derived data) and ``compact()`` writes it again.
            log.warning("capture index %s unusable (%s); reading %s without it", path, exc, partition)
            with self._lock:
                if len(self._refused) < _OPEN_MAX:
                    self._refused.add(path)
            return None
        except OSError as exc:  # a full cache disk, an object store's hiccup: tried again next time
            log.warning("capture index %s not read (%s); reading %s without it", path, exc, partition)
            return None
        with self._lock:
            already = self._opened.get(path)
            if already is not None:  # another thread opened it meanwhile: count it once
                return already
            self._opened[path] = found
            self._held += found.held
            self._maps += not found.held
            # Oldest opened first out: cheaper than an LRU's bookkeeping on every hit.
            while self._opened and (
                self._held > _HELD_MAX or self._maps > _MAPS_MAX or len(self._opened) > _OPEN_MAX
            ):
                gone = self._opened.pop(next(iter(self._opened)))
                self._held -= gone.held
                self._maps -= not gone.held
        return found


def open_capture_index(backend: Backend, path: str) -> CaptureIndex:
    """The capture index at ``path``, checked; raises ``FileNotFoundError``,
    :class:`CorruptFileError` or another ``OSError``."""
    if isinstance(backend, LocalBackend):
        local = backend.file_path(path)
    else:
        # An object store's index is copied once: the name says which
        # version of the covered file it describes, so it never changes.
        folder = backend.local_folder(CAPTURES_DIR)
        local = folder / hashlib.sha256(path.encode()).hexdigest()
        if not local.exists():
            tmp = local.parent / f"{local.name}.{os.getpid()}.{threading.get_ident()}.tmp"
            try:
                backend.copy_out(path, tmp)
                tmp.replace(local)
            finally:
                tmp.unlink(missing_ok=True)
    return CaptureIndex(path, _mapped(local))


def _mapped(local: Path) -> mmap.mmap | bytes:
    with local.open("rb") as fh:
        size = fh.seek(0, 2)
        if size < _MAP_MIN:  # read: a mapping holds a file descriptor, and most indexes are small
            fh.seek(0)
            return fh.read()
        return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
