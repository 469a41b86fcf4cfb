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

Opening checks the CRC-32 of the header after its ``!meta`` line (once a
process: a store keeps what it opened) and that blocks and heads are in
order; reading a block checks its own checksum, line count and head: a
damaged index is a :class:`~web_index.errors.CorruptFileError`, never a line
skipped (its callers then read the partition's files instead).
"""

from __future__ import annotations

import array
import bisect
import hashlib
import io
import os
import re
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
    crc32: int  # of the header after the !meta line
    # The months (``yyyy/mm``) of the domain's other files whose payloads lines place
    # (``"held"``): compacting one of those moves the places, and writes this index again.
    payload_months: list[str] = []


_decode_meta = msgspec.json.Decoder(IndexMeta).decode
_HELD = re.compile(rb'"held":"([0-9]{4}/[0-9]{2})"')
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
    crc = zlib.crc32(after)
    counts = (len(lines), len(table), width, BLOCK_LINES, 8 * len(bloom))
    months = sorted({m.decode() for line in lines if b'"held":"' in line for m in _HELD.findall(line)})
    meta = IndexMeta(FORMAT, covers, size, version, superseded, *counts, crc, months)
    header = _META + msgspec.json.encode(meta) + b"\n" + after
    return struct.pack("<II", _SKIPPABLE, len(header)) + header + body


_CODE = {4: "I", 8: "Q"}
assert array.array("I").itemsize == 4 and array.array("Q").itemsize == 8


def _head(line: bytes) -> bytes:
    """A line's SURT key and time: what a key is compared with (none holds a byte at or below
    the space after the time, so a key orders against it as against the whole line)."""
    return line[: line.index(b" ", line.index(b" ") + 1)]


class CaptureIndex:
    """An opened capture index: its coverage, its lines by SURT prefix, and by row.

    ``data`` is the whole file, or (a large one) the open file, whose blocks are
    then read with ``pread`` as they are needed: the page cache holds them, not
    this process (a mapping's pages would count as its memory once touched).
    """

    def __init__(self, path: str, data: bytes | io.FileIO) -> None:
        self.path = path
        self._data = data
        size = len(data) if isinstance(data, bytes) else os.fstat(data.fileno()).st_size
        start = self._read(0, 8)
        if len(start) < 8 or struct.unpack_from("<I", start)[0] != _SKIPPABLE:
            raise CorruptFileError(path, "not a capture index of this version (no header frame)")
        (length,) = struct.unpack_from("<I", start, 4)
        header = self._read(8, length)
        meta_end = header.find(b"\n")
        if header[: len(_META)] != _META or meta_end < 0:
            raise CorruptFileError(path, "not a capture index (no !meta line)")
        try:
            meta = _decode_meta(header[len(_META) : meta_end])
        except msgspec.MsgspecError as exc:  # not JSON, or not the fields it must hold
            raise CorruptFileError(path, f"unreadable !meta line: {exc}") from None
        if meta.format != FORMAT:
            raise CorruptFileError(path, f"capture index format {meta.format}, this version reads {FORMAT}")
        # The header is checked once, when opened (a store keeps what it opened); each block is
        # checked by its own checksum, its line count and its head when it is read.
        if len(header) != length or zlib.crc32(memoryview(header)[meta_end + 1 :]) != meta.crc32:
            raise CorruptFileError(path, "capture index damaged (CRC-32 of its header differs)")
        blocks_end = header.find(b"\n", meta_end + 1)
        try:
            if header[meta_end + 1 : meta_end + 1 + len(_BLOCKS)] != _BLOCKS or blocks_end < 0:
                raise ValueError("no !blocks line")
            blocks = _decode_blocks(header[meta_end + 1 + len(_BLOCKS) : blocks_end])
            table_end = blocks_end + 1 + meta.rows * meta.row_bytes
            bloom_bytes = meta.bloom_bits // 8
            if meta.row_bytes not in _CODE or meta.bloom_bits % 8 or length - table_end != bloom_bytes:
                raise ValueError("a row table or key filter of another size")
            _check_blocks(blocks, meta.lines, meta.block_lines, size - 8 - length)
        except (ValueError, msgspec.MsgspecError) as exc:
            raise CorruptFileError(path, f"capture index damaged ({exc})") from None
        self.meta = meta
        self.superseded = frozenset(meta.superseded)  # the part ids the covered file absorbed
        self.held = size if isinstance(data, bytes) else length  # bytes this index keeps in memory
        self._first = 8 + length  # where the blocks start
        self._blocks = [(at, size) for at, size, _head in blocks]
        self._heads = [head.encode() for _at, _size, head in blocks]
        self._bloom = header[table_end:]
        rows = memoryview(header)[blocks_end + 1 : table_end]
        if sys.byteorder != "little":
            swapped = array.array(_CODE[meta.row_bytes], rows)
            swapped.byteswap()
            rows = memoryview(swapped)
        self._rows: memoryview[int] = rows.cast("I" if meta.row_bytes == 4 else "Q")
        self._last: tuple[int, bytes] = (-1, b"")  # the block read last: a lookup's next line is in it

    @property
    def file_backed(self) -> bool:
        """Whether this index holds its file open (a large one), not its bytes."""
        return not isinstance(self._data, bytes)

    def _read(self, at: int, length: int) -> bytes:
        data = self._data
        if isinstance(data, bytes):
            return data[at : at + length]
        return os.pread(data.fileno(), length, at)

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
        n = self.line_number(row)
        if n is None:
            return None
        b, nth = divmod(n, self.meta.block_lines)
        text = self._text(b)
        at = 0
        for _ in range(nth):  # a block holds a few dozen lines: found in C, not split
            at = text.index(b"\n", at) + 1
        return text[at : text.index(b"\n", at)]

    def line_number(self, row: int) -> int | None:
        """Where the line of the covered file's row ``row`` is among the index's
        lines (rows in this order share blocks), if it has one."""
        if not 0 <= row < len(self._rows):
            return None
        n = self._rows[row]
        return n if n < self.meta.lines else None  # _NO_LINE, or not one of this index's

    def _text(self, b: int) -> bytes:
        """Block ``b``'s lines, decompressed (each line ending in a newline)."""
        last = self._last
        if last[0] == b:
            return last[1]
        at, size = self._blocks[b]
        try:
            dctx = _LOCAL.zstd
        except AttributeError:
            dctx = _LOCAL.zstd = zstandard.ZstdDecompressor()
        try:
            text: bytes = dctx.decompress(self._read(self._first + at, size))
        except zstandard.ZstdError as exc:
            raise CorruptFileError(self.path, f"capture index damaged (block {b}: {exc})") from None
        # Its bytes are checked by the frame's checksum (zstd verifies it as it decodes) and
        # its place among the blocks by its head; its lines are not counted (5 us a block,
        # a tenth of a winner's cost in a batch): only a writer's bug could miscount them,
        # and ``verify`` compares every line and row with the file's.
        if not text.endswith(b"\n") or not text.startswith(self._heads[b]):
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
