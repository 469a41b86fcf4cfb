"""The files of a store: listing, atomic writes, reads, deletes.

Only the local filesystem is implemented here; the interface is what an
object-store backend has to provide too.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import time
import uuid
from pathlib import Path
from typing import NamedTuple, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from web_index.errors import StoreError
from web_index.storage._layout import TMP_DIR

__all__ = ["Backend", "FileInfo", "LocalBackend", "open_backend"]

_RACY_NS = 2_000_000_000


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
        """Open a Parquet file; ``FileNotFoundError`` if it is gone."""
        ...

    def write_parquet(self, path: str, table: pa.Table, **options: object) -> int:
        """Write ``table`` to ``path`` atomically (all or nothing); return bytes written.

        ``if_match=<version>`` / ``create=True``: an object store writes only if
        the object is still that version / does not exist yet, else raises
        ``PreconditionFailed`` (local stores rely on their locks and ignore these).
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
        # No pre-buffering: it coalesces reads for high-latency storage and costs a
        # local read of one row group ~25% (a thread hand-off per column chunk).
        return pq.ParquetFile(str(self._path(path)), memory_map=True, pre_buffer=False)

    def write_parquet(self, path: str, table: pa.Table, **options: object) -> int:
        # Conditions for object stores; flock locks already serialise local writers.
        options.pop("if_match", None)
        options.pop("create", None)
        target = self._path(path)
        tmp_dir = self.local_folder(TMP_DIR)
        # The pid in the name tells a dead writer's leftovers from a live one's.
        tmp = tmp_dir / f"{os.getpid()}-{uuid.uuid4()}.parquet.tmp"
        try:
            write_table(table, str(tmp), **options)
            with tmp.open("rb") as fh:
                os.fsync(fh.fileno())
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
        removed = 0
        for info in self.list_files(TMP_DIR):
            name = info.name
            pid = name.split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                self.delete(f"{TMP_DIR}/{name}")
                removed += 1
        return removed


def write_table(table: pa.Table, where: str | pa.NativeFile, **options: object) -> None:
    """``pq.write_table`` that keeps the table's key-value metadata in the footer
    even with ``store_schema=False`` (which would otherwise drop it)."""
    row_group_size = options.pop("row_group_size", None)
    metadata = table.schema.metadata or {}
    with pq.ParquetWriter(where, table.schema, **options) as writer:  # type: ignore[arg-type]
        writer.write_table(table, row_group_size=row_group_size)  # type: ignore[arg-type]
        if metadata and options.get("store_schema") is False:
            writer.add_key_value_metadata({k.decode(): v.decode() for k, v in metadata.items()})


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
