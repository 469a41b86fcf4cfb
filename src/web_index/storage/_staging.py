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
"""

from __future__ import annotations

import io
import itertools
import shutil
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple

from web_index.storage._crash import crash_point
from web_index.storage._files import WriteOptions, partition_file_args
from web_index.storage._layout import TMP_DIR, Partition
from web_index.storage.backends import Backend, ObjectFile, new_spool, sealed_bytes, write_sealed

if TYPE_CHECKING:
    from pathlib import Path

    import pyarrow as pa
    import pyarrow.parquet as pq

__all__ = ["Piece", "StagedPieces", "stage_files", "stage_packed"]

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
