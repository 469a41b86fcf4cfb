"""The files of a store: listing, atomic writes, reads, deletes.

Only the local filesystem is implemented here; the interface is what an
object-store backend has to provide too.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import posixpath
import time
import uuid
from pathlib import Path
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from web_index.errors import StoreError
from web_index.storage._checksum import (
    CHECKSUM_KEY,
    PLACEHOLDER,
    CheckedFile,
    check_footer,
    check_whole,
    pread_exact,
    seal_buffer,
    seal_file,
)
from web_index.storage._layout import TMP_DIR

__all__ = [
    "Backend",
    "FileInfo",
    "LocalBackend",
    "new_spool",
    "open_backend",
    "remove_dead_spools",
    "sealed_bytes",
    "write_sealed",
    "write_table",
]

_RACY_NS = 2_000_000_000
_MAP_BYTES = 64 << 20  # files up to this size are memory-mapped for reading


class FileInfo(NamedTuple):
    """A file as a listing sees it.

    ``version`` changes whenever the file is written, even when the new content
    has the same size: a compaction can rewrite ``<domain>.parquet`` with one
    more row and a shorter superseded list in exactly as many bytes, so name
    and size alone cannot tell two versions apart. It is the object's ETag on
    S3 and ``<inode>-<mtime ns>`` (hex) on a local disk, where every write is a
    new file renamed into place.
    """

    name: str
    size: int
    version: str


class Backend(Protocol):
    """What the store needs from where its files live."""

    @property
    def url(self) -> str: ...

    def list_files(self, folder: str, prefix: str = "") -> list[FileInfo]:
        """The files directly in ``folder`` whose name starts with ``prefix``;
        empty if missing."""
        ...

    def list_folders(self, folder: str) -> list[str]: ...

    def folder_version(self, folder: str) -> object | None:
        """A token that changes whenever ``folder``'s listing changes, or ``None``
        if there is no cheap one (then listings must not be reused)."""
        ...

    def open_parquet(self, path: str) -> pq.ParquetFile:
        """Open a Parquet file; ``FileNotFoundError`` if it is gone, ``CorruptFileError``
        if its footer is damaged (pages are checked as they are read)."""
        ...

    def check_file(self, path: str) -> bool:
        """Check every byte of a store file against its checksums (``CorruptFileError``
        if damaged); ``False`` if it has none (written before checksums)."""
        ...

    def write_parquet(self, path: str, table: pa.Table | pa.RecordBatchReader, **options: object) -> int:
        """Write ``table`` to ``path`` atomically (all or nothing); return bytes written.

        A ``RecordBatchReader`` is written as it is read, one row group per
        batch at most, so a file far larger than memory can be written.

        ``if_match=<version>`` / ``create=True``: an object store writes only if
        the object is still that version / does not exist yet, else raises
        ``ConflictError`` (local stores rely on their locks and ignore these).
        """
        ...

    def delete(self, path: str) -> None:
        """Remove ``path``; a missing file is not an error."""
        ...

    def local_folder(self, name: str, *, create: bool = True) -> Path:
        """A local folder for the store's private state (buffer, locks)."""
        ...

    def exists(self) -> bool:
        """Whether the store itself exists."""
        ...

    def remove_orphans(self) -> int:
        """Delete temporary files of writers that died; return how many."""
        ...


class LocalBackend:
    """A store in a local folder."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    @property
    def url(self) -> str:
        return self.root.as_uri()

    def _path(self, rel: str) -> Path:
        # Store paths come from validated partitions, but check once more: a
        # path that escapes the root is a bug we refuse to act on. Lexically:
        # resolve() would cost an lstat per path component on every read.
        norm = posixpath.normpath(rel)
        if norm.startswith(("/", "..")) or "\x00" in norm:
            raise StoreError(f"refusing a path outside the store: {rel!r}")
        return self.root if norm == "." else self.root / norm

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
                            st = entry.stat(follow_symlinks=False)
                            out.append(FileInfo(entry.name, st.st_size, f"{st.st_ino:x}-{st.st_mtime_ns:x}"))
        except (FileNotFoundError, NotADirectoryError):
            return []
        return out

    def folder_version(self, folder: str) -> object | None:
        # A directory's mtime changes with every file created, renamed or
        # removed in it, but only at the kernel's clock tick: two changes in one
        # tick share an mtime. A listing taken once the mtime is a safe margin in
        # the past is therefore current until the mtime moves (git's "racy" rule).
        try:
            st = self._path(folder).stat()
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

    def open_parquet(self, path: str) -> pq.ParquetFile:
        # Read through the descriptor whose footer was checked: opening by name
        # again could read a file renamed into place in between.
        fh = self._path(path).open("rb")
        try:
            fd = fh.fileno()
            size = os.fstat(fd).st_size
            check_footer(path, lambda start, end: pread_exact(fd, start, end), size)
            if size > _MAP_BYTES:
                # Mapped pages of a file read once (a compaction's inputs) would
                # count as this process's memory until it exits.
                return CheckedFile(pa.PythonFile(fh, mode="r"), path=path, pre_buffer=False)
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except BaseException:
            fh.close()
            raise
        fh.close()
        # No pre-buffering: it coalesces reads for high-latency storage and costs a
        # local read of one row group ~25% (a thread hand-off per column chunk).
        return CheckedFile(pa.BufferReader(pa.py_buffer(mapped)), path=path, pre_buffer=False)

    def check_file(self, path: str) -> bool:
        with self._path(path).open("rb") as fh:
            fd = fh.fileno()
            return check_whole(path, lambda start, end: pread_exact(fd, start, end), os.fstat(fd).st_size)

    def write_parquet(self, path: str, table: pa.Table | pa.RecordBatchReader, **options: object) -> int:
        # Conditions for object stores; flock locks already serialise local writers.
        options.pop("if_match", None)
        options.pop("create", None)
        target = self._path(path)
        tmp = new_spool(self.local_folder(TMP_DIR))
        try:
            write_sealed(table, tmp, **options)
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp.replace(target)
            _fsync_dir(target.parent)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        return target.stat().st_size

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(path).unlink()

    def local_folder(self, name: str, *, create: bool = True) -> Path:
        folder = self._path(name)
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        return folder

    def exists(self) -> bool:
        return self.root.is_dir()

    def remove_orphans(self) -> int:
        return remove_dead_spools(self.local_folder(TMP_DIR, create=False))


def new_spool(folder: Path) -> Path:
    """A fresh path for a file being written in ``folder`` (see :func:`remove_dead_spools`)."""
    # The pid in the name tells a dead writer's leftovers from a live one's.
    return folder / f"{os.getpid()}-{uuid.uuid4()}.parquet.tmp"


def remove_dead_spools(folder: Path) -> int:
    """Delete the files of ``folder`` left by writers that died; return how many."""
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for spool in folder.iterdir():
            pid = spool.name.split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                spool.unlink(missing_ok=True)
                removed += 1
    return removed


def write_table(
    table: pa.Table | pa.RecordBatchReader, where: str | pa.NativeFile, **options: object
) -> None:
    """Write a store file, unsealed: ``pq.write_table`` with page CRCs, the
    checksum placeholder (see ``_checksum``), and the table's key-value
    metadata kept even with ``store_schema=False`` (which would drop it)."""
    row_group_size = options.pop("row_group_size", None)
    metadata = dict(table.schema.metadata or {})
    if metadata.pop(CHECKSUM_KEY, None) is not None and isinstance(table, pa.Table):
        table = table.replace_schema_metadata(metadata)  # a file's table written again: a new seal
    with pq.ParquetWriter(where, table.schema, write_page_checksum=True, **options) as writer:  # type: ignore[arg-type]
        if isinstance(table, pa.Table):
            writer.write_table(table, row_group_size=row_group_size)  # type: ignore[arg-type]
        else:
            for batch in table:
                writer.write_batch(batch, row_group_size=row_group_size)  # type: ignore[arg-type]
        if options.get("store_schema") is not False:
            metadata = {}  # already in the footer with the schema
        metadata[CHECKSUM_KEY] = PLACEHOLDER
        writer.add_key_value_metadata({k.decode(): v.decode() for k, v in metadata.items()})


def sealed_bytes(table: pa.Table, **options: object) -> bytearray:
    """A store file in memory, with its checksum."""
    sink = pa.BufferOutputStream()
    write_table(table, sink, **options)
    data = bytearray(sink.getvalue())
    seal_buffer(data)
    return data


def write_sealed(table: pa.Table | pa.RecordBatchReader, target: Path, **options: object) -> int:
    """Write a store file to a local ``target`` with its checksum, synced; return its size."""
    write_table(table, str(target), **options)
    with target.open("r+b") as fh:
        seal_file(fh.fileno())
        os.fsync(fh.fileno())
        return os.fstat(fh.fileno()).st_size


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def open_backend(location: str | os.PathLike[str]) -> Backend:
    """The backend for a store location: a path, a ``file://`` URL or ``s3://bucket/prefix``."""
    text = os.fspath(location)
    if text.startswith(("s3://", "s3a://")):
        from web_index.storage._s3 import S3Backend

        return S3Backend(text)
    if text.startswith("file://"):
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise StoreError(f"file:// URLs must be local, got host {parts.netloc!r}")
        return LocalBackend(Path(unquote(parts.path)))
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise StoreError(f"unsupported store location scheme {scheme!r} in {text!r}")
    return LocalBackend(Path(text).expanduser())
