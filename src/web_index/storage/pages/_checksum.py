"""Checksums that make a flipped bit in a store file an error, never an answer.

Parquet checks its data pages itself: files are written with page CRCs and
read with them verified. That leaves the footer (row counts, offsets, column
statistics, the superseded list, an index's covers) and the page headers.
Every store file therefore carries one more key-value entry,
``web_index.checksum``: 16 hex digits, the CRC-32 of the bytes before the
footer, then the CRC-32 of the footer through the end of the file (computed
with its own 8 digits as zeros). The entry is written as a placeholder and
patched in place once the file is written: a value inside the footer cannot
be known before the footer is.

Readers check the footer's CRC on every open (a few KB); whole-file reads
(small files, ``verify``) check both. The checks need no pyarrow; the file
that checks its pages as pyarrow reads them, :class:`CheckedFile`, is in
``_checked_file``, imported when a store file is first opened.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from web_index.errors import CorruptFileError

if TYPE_CHECKING:
    from web_index.storage.pages._checked_file import CheckedFile as CheckedFile

__all__ = [
    "CHECKSUM_KEY",
    "PLACEHOLDER",
    "CheckedFile",
    "check_bytes",
    "check_footer",
    "check_whole",
    "pread_exact",
    "seal_buffer",
    "seal_file",
]

CHECKSUM_KEY = b"web_index.checksum"
PLACEHOLDER = b"0" * 16
_TRAILER = 8  # footer length (4 bytes, little-endian) and the magic "PAR1"
_CHUNK = 8 << 20


def _value_offset(footer: bytes) -> int | None:
    """Where the 16 digits start within ``footer``, or ``None`` if it has no entry."""
    at = footer.find(CHECKSUM_KEY)
    if at < 0 or footer.find(CHECKSUM_KEY, at + 1) >= 0:
        return None
    # Thrift compact protocol: the value field's header (0x18: field 2, binary)
    # and its length (16) follow the key directly.
    start = at + len(CHECKSUM_KEY)
    if footer[start : start + 2] != b"\x18\x10":
        return None
    return start + 2


def _footer_start(path: str, trailer: bytes, size: int) -> int:
    if len(trailer) != _TRAILER or trailer[4:] != b"PAR1":
        raise CorruptFileError(path, "not a Parquet file (no PAR1 trailer)")
    length = int.from_bytes(trailer[:4], "little")
    start = size - _TRAILER - length
    if length <= 0 or start < 4:
        raise CorruptFileError(path, f"impossible footer length {length}")
    return start


def _footer_crc(tail: bytes, offset: int) -> int:
    """CRC of ``tail`` (footer through end of file) with the footer digits zeroed."""
    crc = zlib.crc32(b"0" * 8, zlib.crc32(tail[: offset + 8]))
    return zlib.crc32(tail[offset + 16 :], crc)


def _seal(read_at: Callable[[int, int], bytes], write_at: Callable[[int, bytes], None], size: int) -> None:
    start = _footer_start("<new file>", read_at(size - _TRAILER, size), size)
    tail = bytearray(read_at(start, size))
    offset = _value_offset(bytes(tail))
    if offset is None:
        raise AssertionError("a store file was written without its checksum placeholder")
    tail[offset : offset + 8] = b"%08x" % _data_crc(read_at, start)
    tail[offset + 8 : offset + 16] = b"%08x" % _footer_crc(bytes(tail), offset)
    write_at(start + offset, bytes(tail[offset : offset + 16]))


def _data_crc(read_at: Callable[[int, int], bytes], end: int) -> int:
    crc = 0
    for pos in range(0, end, _CHUNK):  # in chunks: a compacted file can be gigabytes
        crc = zlib.crc32(read_at(pos, min(end, pos + _CHUNK)), crc)
    return crc


def seal_buffer(data: bytearray) -> None:
    """Fill in the checksum of a Parquet file held in memory."""

    def write_at(at: int, digits: bytes) -> None:
        data[at : at + len(digits)] = digits

    _seal(lambda start, end: bytes(data[start:end]), write_at, len(data))


def seal_file(fd: int) -> None:
    """Fill in the checksum of a Parquet file just written (``fd`` open for reading and writing)."""

    def write_at(at: int, digits: bytes) -> None:
        if os.pwrite(fd, digits, at) != len(digits):
            raise OSError("short write while sealing a file")

    _seal(lambda start, end: pread_exact(fd, start, end), write_at, os.fstat(fd).st_size)


def pread_exact(fd: int, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of an open file (``OSError`` if it is shorter)."""
    data = os.pread(fd, end - start, start)
    if len(data) != end - start:
        raise OSError(f"file ended at {start + len(data)}, expected {end} bytes")
    return data


def check_footer(path: str, read_at: Callable[[int, int], bytes], size: int) -> int | None:
    """Check the footer CRC of a store file; ``read_at(start, end)`` reads its bytes.

    Returns the data CRC the footer records, or ``None`` if the file has no
    checksum entry (files written before checksums; the caller decides whether
    that is allowed). Raises :class:`CorruptFileError` naming ``path``.
    """
    if size < 12:
        raise CorruptFileError(path, f"too short for a Parquet file ({size} bytes)")
    start = _footer_start(path, read_at(size - _TRAILER, size), size)
    tail = read_at(start, size)
    offset = _value_offset(tail)
    if offset is None:
        return None
    digits = tail[offset : offset + 16]
    try:
        data_crc, footer_crc = int(digits[:8], 16), int(digits[8:], 16)
    except ValueError:
        raise CorruptFileError(path, "unreadable checksum") from None
    if _footer_crc(tail, offset) != footer_crc:
        raise CorruptFileError(path, "footer checksum mismatch (the file is damaged)")
    return data_crc


def check_whole(path: str, read_at: Callable[[int, int], bytes], size: int) -> bool:
    """Check both CRCs of a store file; ``False`` if it has none (an older file)."""
    data_crc = check_footer(path, read_at, size)
    if data_crc is None:
        return False
    start = size - _TRAILER - int.from_bytes(read_at(size - _TRAILER, size - 4), "little")
    if _data_crc(read_at, start) != data_crc:
        raise CorruptFileError(path, "data checksum mismatch (the file is damaged)")
    return True


def check_bytes(path: str, data: bytes) -> bool:
    """:func:`check_whole` of a file read into memory."""
    return check_whole(path, lambda start, end: data[start:end], len(data))


def __getattr__(name: str) -> Any:
    if name == "CheckedFile":  # where it was, for the code that imports it from here
        from web_index.storage.pages._checked_file import CheckedFile

        return CheckedFile
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
