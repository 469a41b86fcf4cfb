"""The read-through cache of an object-store backend (after the W3 indexing design).

Object storage costs 10-100 ms a request, so a query batch must not pay twice
for the same listing or footer. :class:`CachingBackend` wraps an
:class:`~web_index.storage.backends.S3Backend` and keeps, in memory:

* a byte-bounded LRU of **positive** entries: folder listings (with each
  object's ETag), object tails (the footer, and the whole object for small
  part files) with their parsed Parquet footer, and byte ranges read later
  (row groups); data entries are keyed by ``(path, ETag)`` so a replaced
  object can never be served from a stale entry;
* a separate, smaller LRU (by entry count) of **negative** entries: folders
  that are empty or missing (a month or partition with no files), so misses
  cannot evict hits;
* **invalidation on write**: this process's writes and deletes drop the
  listing of the folder (and the negative entries of its parents) and put
  what was written into the cache (**cache-on-write**);
* **expiry**: listings expire after ``ttl_s`` (others may have written), and
  at once when the insert buffer's generation of that month changed (a flush
  anywhere completed: rows left the buffer for a part this listing lacks);
  an object found gone or replaced drops its folder's listing, and the
  reader lists again;
* counters (hits, misses, evictions, per LRU, and object-store requests) in
  :meth:`CachingBackend.stats`, shown by ``WebIndex.stats().cache``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from web_index.models import RecordType
from web_index.storage._clock import SYSTEM_CLOCK, Clock
from web_index.storage.backends._object_file import ObjectFile, ObjectInfo, file_info
from web_index.storage.backends.base import LRU, FileInfo, footer_memory, listed_file

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from web_index.storage.backends.s3 import S3Backend

__all__ = ["CacheConfig", "CacheStats", "CachingBackend"]

GenerationSource = Callable[[RecordType, int, int], int]


@dataclass(frozen=True)
class CacheConfig:
    """Sizes and expiry of the read-through cache."""

    max_bytes: int = 256 * 1024 * 1024
    negative_entries: int = 4096
    ttl_s: float = 5.0
    cache_ranges: bool = True


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    negative_hits: int = 0
    negative_misses: int = 0
    negative_evictions: int = 0
    invalidations: int = 0
    bytes: int = 0
    entries: int = 0
    negative_entries: int = 0
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def store_requests(self) -> int:
        return sum(self.requests.values())


_FOREVER = float("inf")


class CachingBackend:
    """A read-through cache in front of an object-store backend (same ``Backend`` protocol)."""

    def __init__(
        self, inner: S3Backend, config: CacheConfig | None = None, *, clock: Clock = SYSTEM_CLOCK
    ) -> None:
        self.inner = inner
        self.config = config or CacheConfig()
        self.clock = clock  # listings' expiry
        self._lru = LRU(self.config.max_bytes)
        self._negative = LRU(self.config.negative_entries)
        self._lock = threading.Lock()
        self._etags: dict[str, str | None] = {}
        self._invalidations = 0
        self._generation: GenerationSource | None = None
        inner.on_written = self._written

    def set_generation_source(self, source: GenerationSource | None) -> None:
        self._generation = source

    remote = True  # in front of an object store

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def requests(self) -> Any:
        return self.inner.requests

    def __repr__(self) -> str:
        return f"CachingBackend({self.inner!r})"

    # -- counters --------------------------------------------------------------

    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(
                hits=self._lru.hits,
                misses=self._lru.misses,
                evictions=self._lru.evictions,
                negative_hits=self._negative.hits,
                negative_misses=self._negative.misses,
                negative_evictions=self._negative.evictions,
                invalidations=self._invalidations,
                bytes=self._lru.used,
                entries=len(self._lru.items),
                negative_entries=len(self._negative.items),
                requests=dict(self.inner.requests.counts),
            )

    # -- listings --------------------------------------------------------------

    def _folder_generation(self, folder: str) -> int | None:
        if self._generation is None:
            return None
        bits = folder.strip("/").split("/")
        try:
            method = RecordType(bits[0]).method
        except ValueError:
            return None
        if len(bits) == 3 and bits[1].isdigit() and bits[2].isdigit():
            return self._generation(method, int(bits[1]), int(bits[2]))
        if len(bits) <= 2:
            return self._generation(method, 0, 0)
        return None

    def _listing(self, folder: str) -> tuple[list[ObjectInfo], list[str]]:
        key = ("L", folder.strip("/"))
        # The generation is read before listing: a flush completing meanwhile
        # leaves an entry that is stale at the next look.
        gen = self._folder_generation(folder)
        now = self.clock.monotonic()
        with self._lock:
            for lru in (self._lru, self._negative):
                entry = lru.items.get(key)
                if entry is not None:
                    files, folders, entry_gen = entry[0]
                    if entry_gen == gen and entry[2] >= now:
                        lru.get(key, now)
                        return files, folders
                    lru.pop(key)
            # Counted as a miss of the LRU the fresh entry will go to, below.
        files, folders = self.inner.list_objects(folder)
        expires = self.clock.monotonic() + self.config.ttl_s
        with self._lock:
            for o in files:
                self._etags[f"{folder.strip('/')}/{o.name}"] = o.etag
            value = (files, folders, gen)
            if files or folders:
                self._lru.misses += 1
                size = 200 + sum(len(o.name) + 80 for o in files) + sum(len(f) + 50 for f in folders)
                self._lru.put(key, value, size, expires)
            else:
                self._negative.misses += 1
                self._negative.put(key, value, 1, expires)
        return files, folders

    def file_info(self, path: str, *, fresh: bool = False) -> FileInfo:
        if not fresh:
            return listed_file(self, path)
        try:
            info = self.inner.file_info(path)
        except FileNotFoundError:
            self.invalidate(path)
            raise
        with self._lock:
            known = self._etags.get(path)
        if known != (info.version or None):  # written by another process: read it anew
            self.invalidate(path)
            with self._lock:
                self._etags[path] = info.version or None
        return info

    def list_files(self, folder: str, prefix: str = "") -> list[FileInfo]:
        return [file_info(o) for o in self._listing(folder)[0] if o.name.startswith(prefix)]

    def folder_version(self, folder: str) -> object | None:
        return None  # no cheap change token for a prefix: listings are not reused

    def list_folders(self, folder: str) -> list[str]:
        return self._listing(folder)[1]

    def invalidate(self, path: str) -> None:
        """Forget the listings that ``path`` is in (and the negative entries of its parents)."""
        bits = path.strip("/").split("/")
        with self._lock:
            self._invalidations += 1
            self._etags.pop(path.strip("/"), None)
            for n in range(len(bits)):
                key = ("L", "/".join(bits[:n]))
                self._lru.pop(key)
                self._negative.pop(key)

    # -- objects ---------------------------------------------------------------

    def read_range(
        self, path: str, start: int, length: int, *, fresh: bool = False, once: bool = False
    ) -> bytes:
        # Cached by place, whatever the object's version: its caller checks what it reads (a
        # body against its digest) and asks again ``fresh`` when that fails, which replaces it.
        if once:
            return self.inner.read_range(path, start, length, fresh=fresh)
        key = ("P", path, start, length)
        if self.config.cache_ranges and not fresh:
            with self._lock:
                hit = self._lru.get(key, self.clock.monotonic())
            if hit is not None:
                return bytes(hit)
        data = self.inner.read_range(path, start, length, fresh=fresh)
        if self.config.cache_ranges:
            with self._lock:
                self._lru.put(key, data, len(data) + 100, _FOREVER)
        return data

    def open_parquet(self, path: str, *, once: bool = False) -> pq.ParquetFile:
        now = self.clock.monotonic()
        with self._lock:
            etag = self._etags.get(path)
            cached = self._lru.get(("T", path, etag), now) if etag is not None else None
            if etag is None:
                self._lru.misses += 1
        if cached is not None:
            size, tail, meta = cached
            return self._file(path, size, etag, tail).parquet(metadata=meta)
        data, size, etag = self.inner.get_tail(path, self.inner.tail_bytes)
        handle = self._file(path, size, etag, data).parquet()
        self._remember(path, size, etag, data, handle.metadata)
        return handle

    def _remember(self, path: str, size: int, etag: str | None, tail: bytes, meta: pq.FileMetaData) -> None:
        if etag is None:
            return
        with self._lock:
            self._etags[path] = etag
            self._lru.put(("T", path, etag), (size, tail, meta), len(tail) + footer_memory(meta), _FOREVER)

    def _file(self, path: str, size: int, etag: str | None, tail: bytes) -> ObjectFile:
        def fetch(start: int, end: int) -> bytes:
            key = ("R", path, etag, start, end)
            if self.config.cache_ranges:
                with self._lock:
                    hit = self._lru.get(key, self.clock.monotonic())
                if hit is not None:
                    return bytes(hit)
            data = self.inner.get_range(path, start, end, etag)
            if self.config.cache_ranges:
                with self._lock:
                    self._lru.put(key, data, len(data) + 100, _FOREVER)
            return data

        return ObjectFile(self.inner, path, size, etag, tail, on_gone=self.invalidate, fetch=fetch)

    def _written(self, path: str, size: int, tail: bytes, etag: str | None) -> None:
        # Cache-on-write: what this process just wrote is read from memory.
        self.invalidate(path)
        if etag is None:
            return
        meta = self._file(path, size, etag, tail).parquet().metadata  # the footer is in the tail
        self._remember(path, size, etag, tail, meta)

    # -- the rest of the Backend protocol --------------------------------------

    def check_file(self, path: str) -> bool:
        return self.inner.check_file(path)

    def write_parquet(self, path: str, table: pa.Table | pa.RecordBatchReader, **options: object) -> int:
        try:
            return self.inner.write_parquet(path, table, **options)  # the hook caches what was written
        except BaseException:
            self.invalidate(path)  # a failed conditional write: what is there now is unknown
            raise

    def write_bytes(self, path: str, data: bytes, *, durable: bool = True) -> None:
        try:
            self.inner.write_bytes(path, data, durable=durable)
        finally:
            self.invalidate(path)

    def copy_in(self, src: Path, path: str) -> None:
        try:
            self.inner.copy_in(src, path)
        finally:
            self.invalidate(path)

    def copy_out(self, path: str, dest: Path) -> str:
        return self.inner.copy_out(path, dest)  # whole files of any kind: not what the cache holds

    def delete(self, path: str) -> None:
        self.inner.delete(path)
        self.invalidate(path)

    def move(self, path: str, to: str) -> None:
        try:
            self.inner.move(path, to)
        finally:
            self.invalidate(path)
            self.invalidate(to)

    def local_folder(self, name: str, *, create: bool = True) -> Path:
        return self.inner.local_folder(name, create=create)

    def exists(self) -> bool:
        return self.inner.exists()

    def remove_orphans(self) -> int:
        return self.inner.remove_orphans()
