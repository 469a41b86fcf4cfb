"""A capture index's bytes: blocks of CDXJ lines, each a zstd frame, behind a header.

The lines (``_capture_lines``: a response each, sorted as bytes) are cut into
blocks of :data:`BLOCK_LINES`, and each block is one zstd frame with its
content checksum: the file is a zstd stream, and ``zstd -d`` (or ``zstdcat``)
gives the CDXJ lines whole. They come behind one *skippable* frame (magic
``0x184D2A50``: every zstd decoder passes it over) that holds::

    !meta {...}\\n            format, covered file, line and row counts, CRC-32 of what follows
    !blocks [[at, size, head], ...]\\n   each block's frame (offset after the header, length)
                              and its first line's SURT key and time
    <row table>               per row of the covered file, the number of its line
                              (little-endian, 4 bytes each, 8 past 2**32 lines)

pywb's ZipNum index is the same idea (gzip blocks of lines and a plain index
of their first keys); blocks here are small (64 lines: 10-15 us to decompress)
because a lookup decompresses one of them, and the row table lets a batch that
found its winners' rows through the month index read their lines by row. Lines
compress about 4.5 times (docs/performance.md): an index costs ~110 bytes a
capture where its plain lines cost ~520.

Opening checks the CRC-32 of everything after the ``!meta`` line (once a
process: a store keeps what it opened) and that blocks and heads are in
order, reading checks each block's own checksum and line count: a damaged
index is a :class:`~web_index.errors.CorruptFileError`, never a line skipped.
"""

from __future__ import annotations

import array
import bisect
import mmap
import struct
import sys
import threading
import zlib
from collections.abc import Iterator

import msgspec
import zstandard

from web_index.errors import CorruptFileError
from web_index.storage._layout import StoredFile
from web_index.storage.indexes._capture_lines import line_row

__all__ = ["BLOCK_LINES", "FORMAT", "CaptureIndex", "IndexMeta", "encode_index"]

FORMAT = 2
BLOCK_LINES = 64
_SKIPPABLE = 0x184D2A50
_META = b"!meta "
_BLOCKS = b"!blocks "
_NO_LINE = -1  # a row without a line (never in a store's own file)
_ZSTD_LEVEL = 3


class IndexMeta(msgspec.Struct, frozen=True):
    format: int
    covers: str  # the compacted file's name
    size: int
    version: str
    superseded: list[str]  # sorted: the same file, the same bytes
    lines: int
    rows: int  # of the covered file: the row table's entries
    row_bytes: int  # 4 or 8
    block_lines: int
    crc32: int  # of every byte after the !meta line


_decode_meta = msgspec.json.Decoder(IndexMeta).decode
_decode_blocks = msgspec.json.Decoder(list[tuple[int, int, str]]).decode
_LOCAL = threading.local()


def encode_index(covers: str, size: int, version: str, superseded: list[str], lines: list[bytes]) -> bytes:
    """The bytes of an index of ``lines`` (sorted, unique, with their rows) of the file ``covers``."""
    compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_checksum=True)
    frames: list[bytes] = []
    blocks: list[tuple[int, int, str]] = []
    rows: dict[int, int] = {}
    at = 0
    for first in range(0, len(lines), BLOCK_LINES):
        chunk = lines[first : first + BLOCK_LINES]
        frame = compressor.compress(b"".join(line + b"\n" for line in chunk))
        blocks.append((at, len(frame), _head(chunk[0]).decode()))
        frames.append(frame)
        at += len(frame)
        for n, line in enumerate(chunk, start=first):
            rows[line_row(line)] = n
    width = 4 if len(lines) < 1 << 32 else 8
    table = array.array(_CODE[width], [_NO_LINE % (1 << 8 * width)]) * (max(rows, default=-1) + 1)
    for row, n in rows.items():
        if row >= 0:
            table[row] = n
    if sys.byteorder != "little":
        table.byteswap()
    after = _BLOCKS + msgspec.json.encode(blocks) + b"\n" + table.tobytes()
    body = b"".join(frames)
    crc = zlib.crc32(body, zlib.crc32(after))
    rows_n = len(table)
    meta = IndexMeta(FORMAT, covers, size, version, superseded, len(lines), rows_n, width, BLOCK_LINES, crc)
    header = _META + msgspec.json.encode(meta) + b"\n" + after
    return struct.pack("<II", _SKIPPABLE, len(header)) + header + body


_CODE = {4: "I", 8: "Q"}
assert array.array("I").itemsize == 4 and array.array("Q").itemsize == 8


def _head(line: bytes) -> bytes:
    """A line's SURT key and time: what a key is compared with (none holds a byte at or below
    the space after the time, so a key orders against it as against the whole line)."""
    return line[: line.index(b" ", line.index(b" ") + 1)]


class CaptureIndex:
    """An opened capture index: its coverage, its lines by SURT prefix, and by row."""

    def __init__(self, path: str, data: mmap.mmap | bytes) -> None:
        self.path = path
        if len(data) < 8 or struct.unpack_from("<I", data)[0] != _SKIPPABLE:
            raise CorruptFileError(path, "not a capture index of this version (no header frame)")
        (length,) = struct.unpack_from("<I", data, 4)
        end = 8 + length
        meta_end = data.find(b"\n", 8, end)
        if data[8 : 8 + len(_META)] != _META or meta_end < 0:
            raise CorruptFileError(path, "not a capture index (no !meta line)")
        try:
            meta = _decode_meta(data[8 + len(_META) : meta_end])
        except msgspec.MsgspecError as exc:  # not JSON, or not the fields it must hold
            raise CorruptFileError(path, f"unreadable !meta line: {exc}") from None
        if meta.format != FORMAT:
            raise CorruptFileError(path, f"capture index format {meta.format}, this version reads {FORMAT}")
        # Checked once, when opened (a store keeps what it opened): what follows is then as written.
        if len(data) < end or zlib.crc32(memoryview(data)[meta_end + 1 :]) != meta.crc32:
            raise CorruptFileError(path, "capture index damaged (CRC-32 of its lines differs)")
        blocks_end = data.find(b"\n", meta_end + 1, end)
        try:
            if data[meta_end + 1 : meta_end + 1 + len(_BLOCKS)] != _BLOCKS or blocks_end < 0:
                raise ValueError("no !blocks line")
            blocks = _decode_blocks(data[meta_end + 1 + len(_BLOCKS) : blocks_end])
            if meta.row_bytes not in _CODE or end - blocks_end - 1 != meta.rows * meta.row_bytes:
                raise ValueError("a row table of another size")
            _check_blocks(blocks, meta.lines, meta.block_lines, len(data) - end)
        except (ValueError, msgspec.MsgspecError) as exc:
            raise CorruptFileError(path, f"capture index damaged ({exc})") from None
        self.meta = meta
        self.superseded = frozenset(meta.superseded)  # the part ids the covered file absorbed
        self.held = len(data) if isinstance(data, bytes) else 0
        self._data = data
        self._first = end  # where the blocks start
        self._blocks = [(at, size) for at, size, _head in blocks]
        self._heads = [head.encode() for _at, _size, head in blocks]
        rows = memoryview(data)[blocks_end + 1 : end]
        if sys.byteorder != "little":
            swapped = array.array(_CODE[meta.row_bytes], rows)
            swapped.byteswap()
            rows = memoryview(swapped)
        self._rows: memoryview[int] = rows.cast("I" if meta.row_bytes == 4 else "Q")
        self._last: tuple[int, list[bytes]] = (-1, [])  # the block read last: a lookup's next line is in it

    def covers(self, file: StoredFile) -> bool:
        return (file.name, file.size, file.version) == (self.meta.covers, self.meta.size, self.meta.version)

    def lines(self, prefixes: tuple[bytes, ...]) -> Iterator[bytes]:
        """The lines starting with one of ``prefixes``, in order."""
        key = min(prefixes)
        # Blocks before this one hold only lines below the key (their successor's head is).
        first = max(bisect.bisect_left(self._heads, key) - 1, 0)
        for b in range(first, len(self._blocks)):
            block = self._block(b)
            for line in block[bisect.bisect_left(block, key) if b == first else 0 :]:
                if line.startswith(prefixes):
                    yield line
                elif all(line[: len(p)] > p for p in prefixes):  # past every prefix's lines
                    return

    def row_line(self, row: int) -> bytes | None:
        """The line of the covered file's row ``row``, if it has one."""
        if not 0 <= row < len(self._rows):
            return None
        n = self._rows[row]
        if n >= self.meta.lines:  # no line (_NO_LINE), or not one of this index's
            return None
        line: bytes = self._block(n // self.meta.block_lines)[n % self.meta.block_lines]
        return line

    def _block(self, b: int) -> list[bytes]:
        last = self._last
        if last[0] == b:
            return last[1]
        at, size = self._blocks[b]
        start = self._first + at
        try:
            dctx = _LOCAL.zstd
        except AttributeError:
            dctx = _LOCAL.zstd = zstandard.ZstdDecompressor()
        try:
            text: bytes = dctx.decompress(self._data[start : start + size])
        except zstandard.ZstdError as exc:
            raise CorruptFileError(self.path, f"capture index damaged (block {b}: {exc})") from None
        lines = text.split(b"\n")[:-1]
        expected = min(self.meta.block_lines, self.meta.lines - b * self.meta.block_lines)
        if len(lines) != expected or _head(lines[0]) != self._heads[b]:
            raise CorruptFileError(
                self.path, f"capture index damaged (block {b} is not what its header says)"
            )
        self._last = (b, lines)
        return lines


def _check_blocks(blocks: list[tuple[int, int, str]], lines: int, block_lines: int, room: int) -> None:
    if block_lines < 1 or len(blocks) != -(-lines // block_lines):
        raise ValueError("a block count that its lines do not make")
    at = 0
    for n, (start, size, head) in enumerate(blocks):
        if start != at or size <= 0 or (n and blocks[n - 1][2] > head):
            raise ValueError("blocks out of order")
        at += size
    if at != room:
        raise ValueError("blocks that do not fill the file")
