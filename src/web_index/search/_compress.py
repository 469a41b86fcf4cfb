"""A pack's zstd-compressed form, the one published and downloaded.

A VACUUMed pack is mostly text and b-tree pages and shrinks ~3-4x. Both
directions stream (a pack can be larger than memory) and write through a
temporary file, so a reader never finds a half-written pack or archive.
"""

from __future__ import annotations

from pathlib import Path

import zstandard

from web_index.errors import SearchError
from web_index.search._files import atomic_output

__all__ = ["compress_pack", "decompress_pack"]

_READ = 1 << 16


def compress_pack(src: Path, dst: Path, *, level: int = 3) -> int:
    """Compress the pack ``src`` into ``dst`` (one zstd frame, with a checksum
    and the original size) and return the number of bytes written."""
    # The checksum lets decompress_pack tell a damaged download from a pack.
    cctx = zstandard.ZstdCompressor(level=level, write_checksum=True)
    with src.open("rb") as source, atomic_output(dst) as out:
        size = src.stat().st_size
        _, written = cctx.copy_stream(source, out, size=size, read_size=_READ)
    return int(written)


def decompress_pack(src: Path, dst: Path) -> int:
    """Decompress ``src`` (as written by :func:`compress_pack`) into ``dst``
    and return the number of bytes written.

    Raises :class:`SearchError` naming ``src`` if it is not zstd, is damaged
    (checksum) or truncated, or has bytes after its frame; ``dst`` is then
    left as it was.
    """
    # decompressobj, not copy_stream or stream_reader: those end quietly at a
    # truncated frame, and only decompressobj says whether the frame ended
    # (.eof). It returns all the output of one input chunk, so memory is one
    # 64 KiB read's worth of pack at a time (a few hundred KiB).
    dobj = zstandard.ZstdDecompressor().decompressobj()
    written = 0
    with src.open("rb") as source, atomic_output(dst) as out:
        try:
            while chunk := source.read(_READ):
                if dobj.eof:
                    raise SearchError(f"{src}: data after the end of the zstd frame")
                data = dobj.decompress(chunk)
                out.write(data)
                written += len(data)
            if not dobj.eof:
                problem = "empty" if source.tell() == 0 else "truncated: the zstd frame does not end"
                raise SearchError(f"{src}: {problem}")
            if dobj.unused_data:
                raise SearchError(f"{src}: data after the end of the zstd frame")
        except zstandard.ZstdError as e:
            raise SearchError(f"{src}: not a valid zstd-compressed pack ({e})") from e
    return written
