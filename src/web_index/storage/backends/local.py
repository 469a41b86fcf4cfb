"""A store in a local folder."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import mmap
import os
import shutil
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from web_index.storage._layout import TMP_DIR
from web_index.storage.backends.base import (
    LRU,
    FileInfo,
    footer_memory,
    new_spool,
    remove_dead_spools,
    store_path,
    write_sealed,
    write_table,
)
from web_index.storage.pages import check_footer, check_whole, pread_exact, seal_file

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["LocalBackend", "open_files_share"]

_RACY_NS = 2_000_000_000
_PATHS_KEPT = 65_536
_FOREVER = float("inf")  # a footer is of one version of a file: never stale
_MAP_BYTES = 64 << 20  # files up to this size are memory-mapped for reading
_FOOTERS_KEPT = 32 << 20  # memory of the parsed footers of mapped files kept for reopening
# Files kept open for positioned reads (read_range): an eighth of what the process may open,
# as it may open now (a server raises its limit: web_index.server.serve), at most this many.
_DESCRIPTORS_MAX = 8192


def open_files_share(divisor: int, most: int) -> int:
    """``1/divisor`` of the files this process may open now, between 16 and ``most``
    (``most`` with no limit; 64 where the limit cannot be read, not Unix). Asked again
    as files are let go: a server raises its limit (``web_index.server.serve``)."""
    try:
        import resource
    except ImportError:  # not Unix
        return 64
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return most if soft == resource.RLIM_INFINITY else max(16, min(most, soft // divisor))


def _descriptors_kept() -> int:
    return open_files_share(8, _DESCRIPTORS_MAX)


# syncfs(2): Python has os.sync only, which waits for every filesystem of the machine.
_SYNCFS: Any
try:
    _SYNCFS = ctypes.CDLL(None, use_errno=True).syncfs
except (OSError, AttributeError):  # not Linux (glibc or musl)
    _SYNCFS = None


class LocalBackend:
    """A store in a local folder."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self._paths: dict[str, Path] = {}  # checked once: a lookup reaches the same folders again and again
        self._footers = LRU(_FOOTERS_KEPT)  # see open_parquet: by the memory each holds
        self._footers_lock = threading.Lock()
        self._descriptors = _Descriptors(_descriptors_kept)

    remote = False  # a folder of this machine

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def _path(self, rel: str) -> Path:
        found = self._paths.get(rel)
        if found is None:
            norm = store_path(rel)
            found = self.root if norm == "." else self.root / norm
            if len(self._paths) < _PATHS_KEPT:
                self._paths[rel] = found
        return found

    def file_path(self, rel: str) -> Path:
        """The filesystem path of a store path (checked to stay inside the store)."""
        return self._path(rel)

    def list_files(self, folder: str, prefix: str = "") -> list[FileInfo]:
        out: list[FileInfo] = []
        try:
            with os.scandir(self._path(folder)) as entries:
                for entry in entries:
                    # Filter by name before the stat: one partition's files out of a
                    # month of thousands costs a scan, not thousands of syscalls.
                    if entry.name.startswith(prefix) and entry.is_file(follow_symlinks=False):
                        with contextlib.suppress(FileNotFoundError):
                            out.append(_info(entry.name, entry.stat(follow_symlinks=False)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return out

    def folder_version(self, folder: str) -> object | None:
        # A directory's mtime changes with every file created, renamed or
        # removed in it, but only at the kernel's clock tick: two changes in one
        # tick share an mtime. A listing taken once the mtime is a safe margin in
        # the past is therefore current until the mtime moves (git's "racy" rule).
        try:
            st = os.stat(self._path(folder))  # noqa: PTH116 (Path.stat costs a lookup ~1 us a folder)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if time.time_ns() - st.st_mtime_ns < _RACY_NS:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def list_folders(self, folder: str) -> list[str]:
        try:
            with os.scandir(self._path(folder)) as entries:
                return [e.name for e in entries if e.is_dir(follow_symlinks=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def open_parquet(self, path: str, *, once: bool = False) -> pq.ParquetFile:
        import pyarrow as pa

        from web_index.storage.pages import CheckedFile

        # Read through the descriptor whose footer was checked: opening by name
        # again could read a file renamed into place in between.
        fh = self._path(path).open("rb")
        try:
            fd = fh.fileno()
            st = os.fstat(fd)
            size = st.st_size
            # A footer checked and parsed once is reused while the file is that very
            # file: every write is a new inode renamed into place, and any change in
            # place moves its ctime (unless made within the same clock tick as the
            # last: only outside damage can be, and pages keep their own checksums).
            # Opening a small file took ~0.2 ms, most of it the footer's checksum and
            # parsing: a sixth of a single lookup.
            known = (path, st.st_ino, size, st.st_mtime_ns, st.st_ctime_ns)
            with self._footers_lock:
                meta = self._footers.get(known, 0.0)
            if meta is None:
                check_footer(path, lambda start, end: pread_exact(fd, start, end), size)
            if once or size > _MAP_BYTES:
                # Mapped pages of a file read once (a compaction's inputs) would count
                # as this process's memory while it is open: a partition's parts, up
                # to its size (330 MiB of a 10 GiB import's biggest, docs/performance.md).
                return CheckedFile(pa.PythonFile(fh, mode="r"), path=path, pre_buffer=False, metadata=meta)
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except BaseException:
            fh.close()
            raise
        fh.close()
        # No pre-buffering: it coalesces reads for high-latency storage and costs a
        # local read of one row group ~25% (a thread hand-off per column chunk).
        handle = CheckedFile(
            pa.BufferReader(pa.py_buffer(mapped)), path=path, pre_buffer=False, metadata=meta
        )
        if meta is None:
            self._keep_footer(known, handle.metadata)
        return handle

    def _keep_footer(self, known: tuple[str, int, int, int, int], meta: pq.FileMetaData) -> None:
        """Keep a footer just parsed, within ``_FOOTERS_KEPT`` of memory. (A compaction or a
        load opens every file of a month once: bounded by count, 4,096 footers held hundreds
        of MiB, ~25 KB a small file's.)"""
        weight = footer_memory(meta)
        if weight <= _FOOTERS_KEPT // 4:  # a big file's footer is not worth the room
            with self._footers_lock:
                self._footers.put(known, meta, weight, _FOREVER)

    def read_range(
        self, path: str, start: int, length: int, *, fresh: bool = False, once: bool = False
    ) -> bytes:
        return self._descriptors.read(path, self._path, start, length, fresh=fresh)

    def check_file(self, path: str) -> bool:
        with self._path(path).open("rb") as fh:
            fd = fh.fileno()
            return check_whole(path, lambda start, end: pread_exact(fd, start, end), os.fstat(fd).st_size)

    def write_parquet(self, path: str, table: pa.Table | pa.RecordBatchReader, **options: object) -> int:
        # Conditions for object stores; flock locks already serialise local writers.
        options.pop("if_match", None)
        options.pop("create", None)
        written = options.pop("written", None)
        size = self._replace(path, lambda tmp: write_sealed(table, tmp, options))
        if callable(written):
            written(self._path(path), self.file_info(path))
        return size

    # -- a bulk load's writes: many files written, synced once, then named ------

    def spool_parquet(self, table: pa.Table | pa.RecordBatchReader, **options: object) -> Path:
        """Write a sealed store file into the spool folder, not synced and not yet
        in the store: :meth:`sync_all` once for many, then :meth:`place` each."""
        tmp = new_spool(self.local_folder(TMP_DIR))
        try:
            write_table(table, str(tmp), **options)
            with tmp.open("r+b") as fh:
                seal_file(fh.fileno())
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            raise
        return tmp

    def spool_bytes(self, data: bytes) -> Path:
        """``data`` in a spooled file, not synced (as :meth:`spool_parquet`)."""
        tmp = new_spool(self.local_folder(TMP_DIR))
        tmp.write_bytes(data)
        return tmp

    def spooled_info(self, spool: Path) -> FileInfo:
        """What :meth:`file_info` will say of a spooled file once :meth:`place` has named it
        (a rename: the same inode and time), e.g. for an index that must name its version."""
        return _info(spool.name, spool.stat())

    def has_file(self, path: str) -> bool:
        return self._path(path).is_file()

    def file_info(self, path: str, *, fresh: bool = False) -> FileInfo:
        # One stat, not a listing of a month folder of thousands to find one file; what the
        # listing skips (a link, a folder) is not a file here either.
        target = self._path(path)
        st = target.stat(follow_symlinks=False)
        if not stat.S_ISREG(st.st_mode):
            raise FileNotFoundError(errno.ENOENT, "not a regular file", str(target))
        return _info(target.name, st)

    def place(self, spool: Path, path: str) -> None:
        """Rename a spooled file to ``path`` (its folder synced later, by :meth:`sync_folders`)."""
        target = self._path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        spool.replace(target)

    def move(self, path: str, to: str) -> None:
        self.place(self._path(path), to)
        self.sync_folders([to, path])

    def sync_all(self) -> None:
        """Make every write to the store's filesystem durable: its files' bytes and the names made
        in it (syncfs(2) on the store's filesystem; :func:`os.sync` where there is none)."""
        fd = os.open(self.root, os.O_RDONLY)
        try:
            if _SYNCFS is None or _SYNCFS(fd) != 0:
                os.sync()
        finally:
            os.close(fd)

    def sync_folders(self, paths: Iterable[str]) -> None:
        """Sync the folders holding ``paths``, each once: the renames into them are durable."""
        for folder in {self._path(p).parent for p in paths}:
            _fsync_dir(folder)

    def write_bytes(self, path: str, data: bytes, *, durable: bool = True) -> None:
        def write(tmp: Path) -> None:
            with tmp.open("wb") as fh:
                fh.write(data)
                fh.flush()
                if durable:
                    os.fsync(fh.fileno())

        self._replace(path, write, durable=durable)

    def _replace(self, path: str, write: Callable[[Path], object], *, durable: bool = True) -> int:
        """Write a spool with ``write``, then rename it over ``path``: all or nothing
        (``durable``: its folder synced after)."""
        target = self._path(path)
        tmp = new_spool(self.local_folder(TMP_DIR))
        try:
            write(tmp)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.replace(target)
            if durable:
                _fsync_dir(target.parent)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return target.stat().st_size

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(path).unlink()

    def copy_in(self, src: Path, path: str) -> None:
        def write(tmp: Path) -> None:
            shutil.copyfile(src, tmp)
            with tmp.open("rb+") as fh:
                os.fsync(fh.fileno())

        self._replace(path, write)

    def copy_out(self, path: str, dest: Path) -> str:
        with self._path(path).open("rb") as src, dest.open("wb") as out:
            shutil.copyfileobj(src, out)
            return _info(dest.name, os.fstat(src.fileno())).version

    def local_folder(self, name: str, *, create: bool = True) -> Path:
        folder = self._path(name)
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        return folder

    def exists(self) -> bool:
        return self.root.is_dir()

    def remove_orphans(self) -> int:
        return remove_dead_spools(self.local_folder(TMP_DIR, create=False))


def _info(name: str, st: os.stat_result) -> FileInfo:
    # The version changes whenever the file is replaced (a new inode) or rewritten.
    return FileInfo(name, st.st_size, f"{st.st_ino:x}-{st.st_mtime_ns:x}")


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Descriptors:
    """Files kept open for :meth:`LocalBackend.read_range`, the most recently read last.

    Opening a file costs more than reading a body from it. A descriptor outlives
    a rename over its file (a compaction), giving the bytes of the file before:
    a read of a place in the new file then fails its caller's check and is made
    again ``fresh``. One whose file is gone from every folder (no link left) is
    let go at its first read a second or more after it was last found linked, so
    that it does not keep the space of a replaced file (a ``stat`` at every read
    was 1.6% of a million-query bulk run). Files are never closed explicitly: a
    thread reading one holds it, and it closes when the last holder lets it go (a
    closed descriptor's number can be another file's a moment later).
    """

    def __init__(self, kept: Callable[[], int]) -> None:
        self._kept = kept  # asked when one is let go: the process's limit may have been raised
        self._limit = 0
        # Each file's descriptor and when it was last found linked (time.monotonic()).
        self._open: OrderedDict[str, tuple[io.FileIO, float]] = OrderedDict()
        self._lock = threading.Lock()

    def read(
        self, key: str, path_of: Callable[[str], Path], start: int, length: int, *, fresh: bool
    ) -> bytes:
        now = time.monotonic()
        with self._lock:
            got = None if fresh else self._open.get(key)
            if got is not None:
                self._open.move_to_end(key)
        fh = None
        if got is not None:
            fh, linked = got
            if now - linked >= _RELINK_S:
                if os.fstat(fh.fileno()).st_nlink == 0:
                    fh = None
                else:
                    with self._lock:
                        if key in self._open:
                            self._open[key] = (fh, now)
        if fh is None:
            fh = io.FileIO(path_of(key), "r")
            with self._lock:
                self._open[key] = (fh, now)
                self._open.move_to_end(key)
                if len(self._open) > self._limit:
                    self._limit = self._kept()
                    while len(self._open) > self._limit:
                        self._open.popitem(last=False)
        return os.pread(fh.fileno(), length, start)


_RELINK_S = 1.0  # a kept descriptor's file is checked for links again after this long
