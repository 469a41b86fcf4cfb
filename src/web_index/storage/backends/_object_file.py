"""Reading one version of an object as a file: the tail (footer) in hand,
any other byte range fetched on demand, pinned to the first read's ETag."""

from __future__ import annotations

import io
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from web_index.storage.backends.base import FileInfo
from web_index.storage.pages import check_footer

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from web_index.storage.backends.s3 import S3Backend

__all__ = ["ObjectFile", "ObjectInfo", "RequestCounter", "file_info", "handle_version"]


class ObjectInfo(NamedTuple):
    name: str
    size: int
    etag: str | None


def file_info(o: ObjectInfo) -> FileInfo:
    """An object as a listing entry; its ETag is its version (every S3-compatible
    store we know sends one; without it, name and size are all there is)."""
    return FileInfo(o.name, o.size, o.etag or "")


class RequestCounter:
    """Object-store requests by kind, for ``stats`` and the benchmark."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts = {}


# The object version (ETag) each open Parquet handle reads, for conditional commits.
_VERSIONS: weakref.WeakKeyDictionary[pq.ParquetFile, str] = weakref.WeakKeyDictionary()


def handle_version(handle: pq.ParquetFile) -> str | None:
    """The ETag of the object version ``handle`` reads (``None`` for local files)."""
    return _VERSIONS.get(handle)


class ObjectFile(io.RawIOBase):
    """A seekable read-only file over one version of an object, by range requests: the
    ``backend``'s GETs of that version, or ``fetch(start, end)`` where given (a cache's, or
    the bytes of a staged piece of a larger object, ``storage/_staging.py``)."""

    def __init__(
        self,
        backend: S3Backend | None,
        path: str,
        size: int,
        etag: str | None,
        tail: bytes,
        *,
        on_gone: Callable[[str], None] | None = None,
        fetch: Callable[[int, int], bytes] | None = None,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.path = path
        self._size = size
        self.etag = etag
        self.tail = tail
        self._tail_start = size - len(tail)
        self._pos = 0
        self._on_gone = on_gone
        self._fetch = fetch

    def parquet(self, metadata: pq.FileMetaData | None = None) -> pq.ParquetFile:
        """The object as a Parquet file; ``metadata`` from a cache skips reading
        (and checking: it was checked when first read) the footer."""
        import pyarrow as pa

        from web_index.storage.pages import CheckedFile

        if metadata is None:
            check_footer(self.path, self.read_at, self._size)
        handle = CheckedFile(pa.PythonFile(self, mode="r"), path=self.path, metadata=metadata)
        if self.etag is not None:
            _VERSIONS[handle] = self.etag
        return handle

    def read_at(self, start: int, end: int) -> bytes:
        self.seek(start)
        data = self.read(end - start)
        if len(data) != end - start:
            raise OSError(f"{self.path}: object ended at {start + len(data)}, expected {end} bytes")
        return data

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def size(self) -> int:
        return self._size

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            self._pos = offset
        elif whence == io.SEEK_CUR:
            self._pos += offset
        else:
            self._pos = self._size + offset
        return self._pos

    def read(self, size: int = -1) -> bytes:
        start = self._pos
        end = self._size if size is None or size < 0 else min(self._size, start + size)
        if end <= start:
            return b""
        self._pos = end
        if start >= self._tail_start:
            return self.tail[start - self._tail_start : end - self._tail_start]
        try:
            if self._fetch is not None:
                return self._fetch(start, end)
            assert self.backend is not None  # given one or the other
            return self.backend.get_range(self.path, start, end, self.etag)
        except FileNotFoundError:
            if self._on_gone is not None:
                self._on_gone(self.path)
            raise

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)
