"""Where a staged load's rows wait for its commit: one file a partition, or on an object
store one *pack* a record type, the partitions' files one after the other in it.

A cluster's import stages each WARC file it reads. One object a partition was hundreds
of small PUTs a WARC file (3.9 ms each, and a request of the object store's CPU each), and
as many tasks, GETs and DELETEs at the commit. Packed, a WARC file is one object a record
type: each partition's rows a store file of their own (written as the commit would write
it), at a byte range of the pack (:class:`Piece`). A commit's task reads the pieces of many
neighbouring partitions, in one request a pack (:class:`StagedPieces`); a piece is a whole
Parquet file, so nothing is read to find it but its place (a single Parquet file a type
would have a footer of every partition's row groups, tens of megabytes for a WARC file of
a crawl's many domains, read by every task). A pack is never named a part file: every
partition is written anew from its pieces, and the staging folder is removed whole when
the import ends.

A staging folder (:func:`staging_folder`) is its process's own: on a folder, a file in it
names its host (``remove_dead_spools`` removes it once the process named in the folder's name
is gone); on an object store, where no one can tell whether a process on another machine
lives, the process holds a lease on the folder for as long as it stages (the store's
``"stage"`` locks), and whoever finds the lease gone or stale removes the folder
(:func:`remove_dead_staging`, which every flush and compaction runs).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import os
import re
import shutil
import socket
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, partition_file_args
from web_index.storage._layout import TMP_DIR, Partition
from web_index.storage._locks import Locks
from web_index.storage.backends import Backend, ObjectFile, new_spool, sealed_bytes, write_sealed

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = [
    "Piece",
    "StagedPieces",
    "remove_dead_staging",
    "stage_files",
    "stage_packed",
    "staging_folder",
]

_FOLDER_NAME = re.compile(r"\d+-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

# Each partition's sorted rows: a table, or tables as they are merged (a partition too big to hold).
Parts = Iterable[tuple[Partition, "pa.Table | Iterable[pa.Table]"]]


class Piece(NamedTuple):
    """A partition's staged rows: the file at ``path`` (``end`` 0), or bytes ``start`` to
    ``end`` of the pack at ``path``, a store file of their own."""

    path: str
    start: int = 0
    end: int = 0

    @property
    def whole(self) -> bool:
        return self.end == 0

    @property
    def size(self) -> int:
        return self.end - self.start


def stage_files(
    backend: Backend, folder: str, parts: Parts, options: WriteOptions
) -> list[tuple[Partition, Piece]]:
    """``parts`` (each partition's sorted rows) written as a store file each under
    ``folder``, its path there that of the partition's compacted file; return their pieces."""
    staged = []
    for partition, rows in parts:
        path = f"{folder}/{partition.compacted_path}"
        data, write_options = partition_file_args(partition, rows, options)
        backend.write_parquet(path, data, **write_options)
        crash_point("stage-while-writing")
        staged.append((partition, Piece(path)))
    return staged


def stage_packed(
    backend: Backend, folder: str, parts: Parts, options: WriteOptions
) -> list[tuple[Partition, Piece]]:
    """``parts`` (each partition's sorted rows, a record type's one after the other) written
    as one pack a record type under ``folder``; return each partition's piece."""
    staged: list[tuple[Partition, Piece]] = []
    done: set[str] = set()
    spools = backend.local_folder(TMP_DIR)
    for type, group in itertools.groupby(parts, key=lambda pt: pt[0].type):
        if type.value in done:
            raise ValueError(f"{type.value} partitions given apart: its pack would be written twice")
        done.add(type.value)
        path = f"{folder}/{type.value}.pack"
        pack = new_spool(spools)
        pieces = []
        try:
            with pack.open("wb") as out:
                for partition, rows in group:
                    start = out.tell()
                    _write_file(partition, rows, options, out, spools)
                    pieces.append((partition, Piece(path, start, out.tell())))
            backend.copy_in(pack, path)
            crash_point("stage-while-writing")
        finally:
            pack.unlink(missing_ok=True)
        staged += pieces
    return staged


def _write_file(
    partition: Partition,
    rows: pa.Table | Iterable[pa.Table],
    options: WriteOptions,
    out: io.BufferedWriter,
    spools: Path,
) -> None:
    """A partition's store file, appended to ``out``: made in memory when its rows are a
    table, spooled to a file of its own when they stream (a partition too big to hold)."""
    import pyarrow as pa

    data, write_options = partition_file_args(partition, rows, options)
    if isinstance(data, pa.Table):
        out.write(sealed_bytes(data, **write_options))
        return
    spool = new_spool(spools)
    try:
        write_sealed(data, spool, write_options, sync=False)
        with spool.open("rb") as src:
            shutil.copyfileobj(src, out, 1 << 20)
    finally:
        spool.unlink(missing_ok=True)


class StagedPieces:
    """The pieces of the partitions a task writes: each pack's bytes for them fetched in one
    request (pieces past ``most`` bytes left out: read a range at a time, as merged)."""

    def __init__(self, backend: Backend, pieces: Sequence[Piece], most: int) -> None:
        self._backend = backend
        self._chunks: dict[str, tuple[int, bytes]] = {}
        spans: dict[str, tuple[int, int]] = {}
        for p in pieces:
            if not p.whole and p.size <= most:
                lo, hi = spans.get(p.path, (p.start, p.end))
                spans[p.path] = (min(lo, p.start), max(hi, p.end))
        for path, (lo, hi) in spans.items():
            # Read once: nothing of it is worth a place in a cache.
            self._chunks[path] = (lo, backend.read_range(path, lo, hi - lo, once=True))

    def open(self, piece: Piece) -> pq.ParquetFile:
        """A piece's file (``FileNotFoundError`` if gone; its footer and pages checked as read)."""
        if piece.whole:
            return self._backend.open_parquet(piece.path)
        base, data = self._chunks.get(piece.path, (0, b""))

        def fetch(start: int, end: int) -> bytes:  # of the piece: ``piece.start`` on in the pack
            at, length = piece.start + start, end - start
            if base <= at and at + length <= base + len(data):
                return data[at - base : at - base + length]
            return self._backend.read_range(piece.path, at, length, once=True)

        return ObjectFile(None, piece.path, piece.size, None, b"", fetch=fetch).parquet()


@contextlib.contextmanager
def staging_folder(backend: Backend, locks: Locks) -> Iterator[str]:
    """A staging folder of this process's own (``_tmp/<pid>-<uuid>``), removed whole however
    the block ends; on an object store its lease is held until then (taken before anything
    is staged in it, given back after it is removed)."""
    folder = f"{TMP_DIR}/{os.getpid()}-{uuid.uuid4()}"
    with contextlib.ExitStack() as held:
        if backend.remote:
            held.enter_context(locks.hold("stage", folder))
        else:
            (backend.local_folder(folder) / "owner").write_text(socket.gethostname())
        try:
            yield folder
        finally:
            _remove_folder(backend, folder)


def remove_dead_staging(backend: Backend, locks: Locks) -> int:
    """Remove an object store's staging folders whose process died (their lease gone, or
    stale: its holder stopped renewing it a lease's time ago and more); return how many.
    One listing when there are none."""
    removed = 0
    for name in backend.list_folders(TMP_DIR):
        if not _FOLDER_NAME.fullmatch(name):
            continue
        folder = f"{TMP_DIR}/{name}"
        with locks.hold("stage", folder, blocking=False) as dead:
            if dead:
                _remove_folder(backend, folder)
                removed += 1
    return removed


def _remove_folder(backend: Backend, folder: str) -> None:
    """A staging folder and all in it (on an object store: a listing a folder, a request a file)."""
    if not backend.remote:
        shutil.rmtree(backend.local_folder(folder, create=False), ignore_errors=True)
        return
    for sub in backend.list_folders(folder):
        _remove_folder(backend, f"{folder}/{sub}")
    for info in backend.list_files(folder):
        backend.delete(f"{folder}/{info.name}")
    # The folder itself: a gateway that keeps folders as entries (SeaweedFS) would go on
    # listing it empty, and every sweep would take its lease again. S3 has no such key.
    backend.delete(f"{folder}/")
