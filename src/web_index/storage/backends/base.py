"""What every backend keeps: the :class:`Backend` contract (where a store's
files live: list, read, write atomically, delete) and the helpers all
backends write files with (page CRCs and the footer checksum, spools)."""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
import socket
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from web_index.errors import StoreError
from web_index.storage.pages import CHECKSUM_KEY, PLACEHOLDER, seal_buffer, seal_file

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = [
    "LRU",
    "Backend",
    "FileInfo",
    "footer_memory",
    "new_spool",
    "remove_dead_spools",
    "sealed_bytes",
    "store_path",
    "write_sealed",
    "write_table",
]


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

    @property
    def remote(self) -> bool:
        """Whether the files are on an object store shared by machines:
        compaction then takes leases there, and reads go through the cache."""
        ...

    def list_files(self, folder: str, prefix: str = "") -> list[FileInfo]:
        """The files directly in ``folder`` whose name starts with ``prefix``;
        empty if missing."""
        ...

    def file_info(self, path: str, *, fresh: bool = False) -> FileInfo:
        """The file at ``path`` as :meth:`list_files` lists it (``FileNotFoundError`` if none);
        ``fresh``: as the store holds it now, never from a cache's listing (another process
        may have written it since), and what is read of it next is that version or newer."""
        ...

    def list_folders(self, folder: str) -> list[str]: ...

    def folder_version(self, folder: str) -> object | None:
        """A token that changes whenever ``folder``'s listing changes, or ``None``
        if there is no cheap one (then listings must not be reused)."""
        ...

    def open_parquet(self, path: str, *, once: bool = False) -> pq.ParquetFile:
        """Open a Parquet file; ``FileNotFoundError`` if it is gone, ``CorruptFileError``
        if its footer is damaged (pages are checked as they are read). ``once``: it is
        read once (a compaction's input), so nothing of it is worth keeping in memory once
        read (a local store maps no such file)."""
        ...

    def read_range(
        self, path: str, start: int, length: int, *, fresh: bool = False, once: bool = False
    ) -> bytes:
        """``length`` bytes of the file at ``path`` from ``start`` (fewer at its
        end), of whichever version is there: for reads that their caller checks
        (a body against its digest), not for a file's structure. ``fresh``: not
        through a descriptor kept from an earlier read (a local store keeps a
        few open, which may be of a file since replaced). ``once``: read once
        (a staged file's rows), so not worth keeping in a cache. ``FileNotFoundError``
        if there is no such file."""
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

        ``written=<callable>``: called once the file is written, with its bytes (in
        memory, or a local file holding them) and what :meth:`file_info` says of it,
        so that the writer learns from them what it would read back (a capture
        index's body places); an object store whose listing may name the object
        otherwise than its PUT did (a multipart upload's ETag) does not call it.
        """
        ...

    def write_bytes(self, path: str, data: bytes, *, durable: bool = True) -> None:
        """Write a small file (the store's marker) atomically: all or nothing; not
        ``durable``: one whose loss in a power failure costs nothing (a local store
        does not sync it)."""
        ...

    def copy_in(self, src: Path, path: str) -> None:
        """Write the local file ``src`` to ``path`` whole (a reader sees all of
        it or none), streamed: it may be larger than memory (a search pack)."""
        ...

    def copy_out(self, path: str, dest: Path) -> str:
        """Copy a file of any kind to the local file ``dest``, streamed (the WARC
        files an import reads from an object store); return the version copied
        (:attr:`FileInfo.version`); ``FileNotFoundError`` if gone."""
        ...

    def delete(self, path: str) -> None:
        """Remove ``path``; a missing file is not an error."""
        ...

    def move(self, path: str, to: str) -> None:
        """Give the file at ``path`` the name ``to`` (replacing any file there), durably: a
        rename on a disk, a copy inside the object store then a delete of ``path`` on one (a
        reader of ``to`` sees the whole file or none). ``FileNotFoundError`` if ``path`` is gone."""
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


def listed_file(backend: Backend, path: str) -> FileInfo:
    """``backend.file_info`` from a listing of the file's folder (an object store's, cheap by prefix)."""
    folder, _, name = path.rpartition("/")
    for info in backend.list_files(folder, name):
        if info.name == name:
            return info
    raise FileNotFoundError(path)


class LRU:
    """An LRU bounded by total bytes (or by entry count, with ``size=1`` per entry), entries
    expiring at a time of the caller's clock; not thread-safe: its owner holds a lock."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[Hashable, tuple[Any, int, float]] = OrderedDict()
        self.used = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: Hashable, now: float) -> Any | None:
        entry = self.items.get(key)
        if entry is None or entry[2] < now:
            if entry is not None:
                self.pop(key)
            self.misses += 1
            return None
        self.items.move_to_end(key)
        self.hits += 1
        return entry[0]

    def put(self, key: Hashable, value: Any, size: int, expires: float) -> None:
        self.pop(key)
        if size > self.capacity:
            return
        self.items[key] = (value, size, expires)
        self.used += size
        while self.used > self.capacity:
            _, (_, old, _) = self.items.popitem(last=False)
            self.used -= old
            self.evictions += 1

    def pop(self, key: Hashable) -> bool:
        entry = self.items.pop(key, None)
        if entry is None:
            return False
        self.used -= entry[1]
        return True


def footer_memory(meta: pq.FileMetaData) -> int:
    """About the memory a parsed footer holds while kept: ~16 times its bytes in the file.
    Thrift's structures cost ~1 KB a column chunk and ~10 KB a file (measured on the store's
    files: 19-31 KB for a small file's footer of 1.1-1.7 KB, 0.3 MB for a 27 KB one), so a
    cache bounded by footer count or by footer bytes holds ten to twenty times its bound."""
    return 16 * int(meta.serialized_size)


def new_spool(folder: Path) -> Path:
    """A fresh path for a file being written in ``folder`` (see :func:`remove_dead_spools`)."""
    # The pid in the name tells a dead writer's leftovers from a live one's.
    return folder / f"{os.getpid()}-{uuid.uuid4()}.tmp"


def remove_dead_spools(folder: Path) -> int:
    """Delete the files of ``folder`` left by writers that died; return how many."""
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for spool in folder.iterdir():
            pid = spool.name.split("-", 1)[0]
            if not pid.isdigit() or _alive(int(pid)):
                continue
            if spool.is_dir():
                # A cluster import's staging folder (archive's _import_cluster): workers on other
                # machines write in it, so only the machine whose process made it may judge it.
                with contextlib.suppress(OSError):
                    if (spool / "owner").read_text() == socket.gethostname():
                        shutil.rmtree(spool)
                        removed += 1
                continue
            spool.unlink(missing_ok=True)
            removed += 1
    return removed


def write_table(
    table: pa.Table | pa.RecordBatchReader, where: str | pa.NativeFile, **options: object
) -> None:
    """Write a store file, unsealed: ``pq.write_table`` with page CRCs, the
    checksum placeholder (see ``_checksum``), and the table's key-value
    metadata kept even with ``store_schema=False`` (which would drop it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

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
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    write_table(table, sink, **options)
    data = bytearray(sink.getvalue())
    seal_buffer(data)
    return data


def write_sealed(
    table: pa.Table | pa.RecordBatchReader, target: Path, options: Mapping[str, object], *, sync: bool = True
) -> int:
    """Write a store file to a local ``target`` with its checksum, synced unless told not to
    (a spool sent to an object store and then removed); return its size."""
    write_table(table, str(target), **options)
    with target.open("r+b") as fh:
        seal_file(fh.fileno())
        if sync:
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


def store_path(rel: str) -> str:
    """``rel`` normalised, if it stays inside the store; else :class:`StoreError`.

    Store paths come from validated partitions, but every backend checks once
    more: a path that escapes the store (a local root, an S3 prefix, where a
    gateway may normalise ``..`` itself) is a bug nobody may act on. Lexically:
    resolving would cost a system call per path component on every read.
    """
    norm = posixpath.normpath(rel) if rel else "."
    if norm.startswith(("/", "..")) or "\x00" in norm:
        raise StoreError(f"refusing a path outside the store: {rel!r}")
    return norm
