"""A capture index's bytes: blocks of CDXJ lines, each a zstd frame, behind a header.

The lines (``_capture_lines``: a response each, sorted as bytes) are cut into
blocks of :data:`BLOCK_LINES` (32), and each block is one zstd frame with its
content checksum: the file is a zstd stream, and ``zstd -d`` (or ``zstdcat``)
gives the CDXJ lines whole. They come behind one *skippable* frame (magic
``0x184D2A50``: every zstd decoder passes it over) that holds::

    !meta {...}\\n            format, covered file, line and row counts, CRC-32 of what follows
    !blocks [[at, size, head], ...]\\n   each block's frame (offset after the header, length)
                              and its first line's SURT key and time
    <row table>               per row of the covered file, the number of its line
                              (little-endian, 4 bytes each, 8 past 2**32 lines)
    <key filter>              a Bloom filter of the SURT keys (10 bits a key, 4 hashes
                              from BLAKE2b-64): a lookup of a URL the partition
                              does not hold that month reads no block

pywb's ZipNum index is the same idea (gzip blocks of lines and a plain index
of their first keys); blocks here are small (32 lines: ~9 us to decompress)
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
import hashlib
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
BLOCK_LINES = 32
_SKIPPABLE = 0x184D2A50
_META = b"!meta "
_BLOCKS = b"!blocks "
_NO_LINE = -1  # a row without a line (never in a store's own file)
_ZSTD_LEVEL = 3
_BLOOM_BITS_A_KEY = 10
_BLOOM_HASHES = 4


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
    bloom_bits: int  # of the filter of the SURT keys (a multiple of 8)
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
    keys = {line[: line.index(b" ")] for line in lines}
    bloom = _bloom(keys)
    after = _BLOCKS + msgspec.json.encode(blocks) + b"\n" + table.tobytes() + bloom
    body = b"".join(frames)
    crc = zlib.crc32(body, zlib.crc32(after))
    counts = (len(lines), len(table), width, BLOCK_LINES, 8 * len(bloom))
    meta = IndexMeta(FORMAT, covers, size, version, superseded, *counts, crc)
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
            table_end = blocks_end + 1 + meta.rows * meta.row_bytes
            if meta.row_bytes not in _CODE or meta.bloom_bits % 8 or end - table_end != meta.bloom_bits // 8:
                raise ValueError("a row table or key filter of another size")
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
        self._bloom = bytes(data[table_end:end])
        rows = memoryview(data)[blocks_end + 1 : table_end]
        if sys.byteorder != "little":
            swapped = array.array(_CODE[meta.row_bytes], rows)
            swapped.byteswap()
            rows = memoryview(swapped)
        self._rows: memoryview[int] = rows.cast("I" if meta.row_bytes == 4 else "Q")
        # The block read last (a lookup's next line is in it), and split into lines for rows.
        self._last: tuple[int, bytes] = (-1, b"")
        self._split: tuple[int, list[bytes]] = (-1, [])

    def covers(self, file: StoredFile) -> bool:
        return (file.name, file.size, file.version) == (self.meta.covers, self.meta.size, self.meta.version)

    def lines(self, prefixes: tuple[bytes, ...]) -> Iterator[bytes]:
        """The lines starting with one of ``prefixes``, in order."""
        key = min(prefixes)
        if len(prefixes) == 1 and key.endswith(b" ") and not _may_hold(self._bloom, key[:-1]):
            return  # a key (an exact match) this index does not hold: no block read
        heads = self._heads
        # Blocks before this one hold only lines below the key (their successor's head is).
        first = max(bisect.bisect_left(heads, key) - 1, 0)
        for b in range(first, len(self._blocks)):
            head = heads[b]
            if b > first and not head.startswith(prefixes) and all(head[: len(p)] > p for p in prefixes):
                return  # this block and the rest are past every prefix's lines
            text = self._text(b)
            pos = _lower_bound(text, key, prefixes) if b == first else 0
            while pos < len(text):
                eol = text.index(b"\n", pos)
                line = text[pos:eol]
                if line.startswith(prefixes):
                    yield line
                elif all(line[: len(p)] > p for p in prefixes):  # past every prefix's lines
                    return
                pos = eol + 1

    def row_line(self, row: int) -> bytes | None:
        """The line of the covered file's row ``row``, if it has one."""
        if not 0 <= row < len(self._rows):
            return None
        n = self._rows[row]
        if n >= self.meta.lines:  # no line (_NO_LINE), or not one of this index's
            return None
        b, nth = divmod(n, self.meta.block_lines)
        split = self._split
        if split[0] != b:
            split = self._split = (b, self._text(b).split(b"\n"))
        return split[1][nth]

    def _text(self, b: int) -> bytes:
        """Block ``b``'s lines, decompressed (each line ending in a newline)."""
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
        expected = min(self.meta.block_lines, self.meta.lines - b * self.meta.block_lines)
        if text.count(b"\n") != expected or not text.endswith(b"\n") or not text.startswith(self._heads[b]):
            raise CorruptFileError(self.path, f"capture index damaged (block {b} is not as its header says)")
        self._last = (b, text)
        return text


def _bloom(keys: set[bytes]) -> bytes:
    """A Bloom filter of ``keys``: ~10 bits a key, 4 bits set each (~1% false positives)."""
    bits = max(64, -(-len(keys) * _BLOOM_BITS_A_KEY // 8) * 8)
    table = bytearray(bits // 8)
    for key in keys:
        h1, h2 = _hashes(key)
        for i in range(_BLOOM_HASHES):
            bit = (h1 + i * h2) % bits
            table[bit >> 3] |= 1 << (bit & 7)
    return bytes(table)


def _may_hold(table: bytes, key: bytes) -> bool:
    bits = 8 * len(table)
    if not bits:
        return True
    h1, h2 = _hashes(key)
    for i in range(_BLOOM_HASHES):  # a loop, not all(...): a lookup asks this of every month
        bit = (h1 + i * h2) % bits
        if not table[bit >> 3] >> (bit & 7) & 1:
            return False
    return True


def _hashes(key: bytes) -> tuple[int, int]:
    h = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    return h & 0xFFFFFFFF, (h >> 32) | 1


def _lower_bound(text: bytes, key: bytes, prefixes: tuple[bytes, ...]) -> int:
    """Where in a block's ``text`` to start reading the lines of ``prefixes`` (``key`` the least)."""
    if len(prefixes) == 1:
        # The first line that starts with the one prefix, found in C: lines before it that
        # are not below it do not start with it, so they are past it and nothing is skipped.
        if text.startswith(key):
            return 0
        return text.find(b"\n" + key) + 1 or len(text)
    lines = text.split(b"\n")
    n = bisect.bisect_left(lines, key, hi=len(lines) - 1)
    return sum(len(line) + 1 for line in lines[:n])


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
