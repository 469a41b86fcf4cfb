"""A capture index's bytes: blocks of CDXJ lines, each a zstd frame, behind a header.

The lines (``_capture_lines``: a response each, sorted as bytes) are cut into
blocks of :data:`BLOCK_LINES` (16), and each block is one zstd frame with its
content checksum: the file is a zstd stream, and ``zstd -d`` (or ``zstdcat``)
gives the CDXJ lines whole. They come behind one *skippable* frame (magic
``0x184D2A50``: every zstd decoder passes it over) that holds::

    !meta {...}\n      format, covered file, counts, the sections' sizes and CRC-32s
    <block ends>       per block, where its frame ends (after the header)
    <head ends>        per block, where its head ends in the heads
    <heads>            each block's first line's SURT key and time, one after another
    <row table>        per row of the covered file, the number of its line
    <key filter>       a Bloom filter of the SURT keys (10 bits a key, 4 hashes
                       from BLAKE2b-64): a lookup of a URL the partition
                       does not hold that month reads no block

(little-endian; ends and row numbers 4 bytes each, 8 past 2**32). pywb's
ZipNum index is the same idea (gzip blocks of lines and a plain index of
their first keys); blocks here are small (16 lines: ~4 us to decompress)
because a lookup decompresses one of them, and the row table lets a batch that
found its winners' rows through the month index read their lines by row.
Lines compress about 4.5 times (docs/performance.md): an index costs ~110
bytes a capture where its plain lines cost ~520.

Opening reads the header and decodes its ``!meta`` line only: what it costs
does not grow with the index (format 2 decoded and checked every block's
entry first, which a batch touching thousands of partitions paid for each).
Each section is checked by its CRC-32 when first used (the row table by a
batch, blocks and heads by any read, the filter by an exact lookup), and
each block by its own checksum and head when it is read: a damaged index is a
:class:`~web_index.errors.CorruptFileError`, never a line skipped (its
callers then read the partition's files instead).
"""

from __future__ import annotations

import array
import bisect
import io
import os
import re
import struct
import sys
import threading
import zlib
from collections.abc import Iterable, Iterator

import msgspec
import zstandard

from web_index.errors import CorruptFileError
from web_index.storage._layout import StoredFile
from web_index.storage.indexes._capture_lines import line_row
from web_index.storage.indexes._captures_filter import key_filter, may_hold

__all__ = ["BLOCK_LINES", "FORMAT", "CaptureIndex", "IndexMeta", "encode_index"]

FORMAT = 3
BLOCK_LINES = 16
_SKIPPABLE = 0x184D2A50
_META = b"!meta "
_NO_LINE = -1  # a row without a line (never in a store's own file)
# A fast level: its blocks decode in ~2.8 us, not ~5 (Huffman-coded literals cost the rest),
# for 26% more index bytes; 10,000 latest lookups as one batch spend a block a winner (6% less time).
_ZSTD_LEVEL = -2


class IndexMeta(msgspec.Struct, frozen=True):
    format: int
    covers: str  # the compacted file's name
    size: int
    version: str
    superseded: list[str]  # sorted: the same file, the same bytes
    lines: int
    rows: int  # of the covered file: the row table's entries
    row_bytes: int  # 4 or 8: of the row table, the block ends and the head ends
    block_lines: int
    blocks: int
    heads_bytes: int
    bloom_bits: int  # of the filter of the SURT keys (a multiple of 8)
    crc_blocks: int  # of the block ends, head ends and heads
    crc_rows: int
    crc_bloom: int
    # The months (``yyyy/mm``) of the domain's other files whose payloads lines place
    # (``"held"``): compacting one of those moves the places, and writes this index again.
    payload_months: list[str] = []


_decode_meta = msgspec.json.Decoder(IndexMeta).decode
_HELD = re.compile(rb'"held":"([0-9]{4}/[0-9]{2})"')
_LOCAL = threading.local()


def encode_index(covers: str, size: int, version: str, superseded: list[str], lines: list[bytes]) -> bytes:
    """The bytes of an index of ``lines`` (sorted, unique, with their rows) of the file ``covers``."""
    compressor = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_checksum=True)
    frames: list[bytes] = []
    ends: list[int] = []
    heads: list[bytes] = []
    head_ends: list[int] = []
    rows: dict[int, int] = {}
    at = heads_at = 0
    for first in range(0, len(lines), BLOCK_LINES):
        chunk = lines[first : first + BLOCK_LINES]
        frame = compressor.compress(b"".join(line + b"\n" for line in chunk))
        frames.append(frame)
        at += len(frame)
        ends.append(at)
        heads.append(_head(chunk[0]))
        heads_at += len(heads[-1])
        head_ends.append(heads_at)
        for n, line in enumerate(chunk, start=first):
            rows[line_row(line)] = n
    width = 4 if max(len(lines), at, heads_at) < 1 << 32 else 8
    table = array.array(_CODE[width], [_NO_LINE % (1 << 8 * width)]) * (max(rows, default=-1) + 1)
    for row, n in rows.items():
        if row >= 0:
            table[row] = n
    blocks = array.array(_CODE[width], ends + head_ends)
    if sys.byteorder != "little":
        table.byteswap()
        blocks.byteswap()
    keys = {line[: line.index(b" ")] for line in lines}
    bloom = key_filter(keys)
    placed = blocks.tobytes() + b"".join(heads)
    row_table = table.tobytes()
    months = sorted({m.decode() for line in lines if b'"held":"' in line for m in _HELD.findall(line)})
    meta = IndexMeta(
        FORMAT,
        covers,
        size,
        version,
        superseded,
        len(lines),
        len(table),
        width,
        BLOCK_LINES,
        len(ends),
        heads_at,
        8 * len(bloom),
        zlib.crc32(placed),
        zlib.crc32(row_table),
        zlib.crc32(bloom),
        months,
    )
    header = _META + msgspec.json.encode(meta) + b"\n" + placed + row_table + bloom
    return struct.pack("<II", _SKIPPABLE, len(header)) + header + b"".join(frames)


_CODE = {4: "I", 8: "Q"}
assert array.array("I").itemsize == 4 and array.array("Q").itemsize == 8


def _head(line: bytes) -> bytes:
    """A line's SURT key and time: what a key is compared with (none holds a byte at or below
    the space after the time, so a key orders against it as against the whole line)."""
    return line[: line.index(b" ", line.index(b" ") + 1)]


class CaptureIndex:
    """An opened capture index: its coverage, its lines by SURT prefix, and by row.

    ``data`` is the whole file, or (a larger one) the open file, whose header is
    read and whose blocks are then read with ``pread`` as they are needed: the
    page cache holds them, not this process (a mapping's pages would count as
    its memory once touched).
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
        width = meta.row_bytes
        placed = meta_end + 1 + 2 * meta.blocks * width + meta.heads_bytes
        table = placed + meta.rows * width
        if (
            width not in _CODE
            or meta.bloom_bits % 8
            or meta.block_lines < 1
            or meta.blocks != -(-meta.lines // meta.block_lines)
            or len(header) != length
            or length != table + meta.bloom_bits // 8
        ):
            raise CorruptFileError(path, "capture index damaged (sections of other sizes than it says)")
        self.meta = meta
        self.superseded = frozenset(meta.superseded)  # the part ids the covered file absorbed
        self.held = size if isinstance(data, bytes) else length  # bytes this index keeps in memory
        self._header = header
        self._first = 8 + length  # where the blocks start
        self._room = size - self._first
        self._sections = (meta_end + 1, placed, table)
        # Each section checked when first used (see the module's docstring).
        self._head_ends: memoryview[int] | None = None
        self._ends: memoryview[int] | None = None
        self._heads: list[bytes] | None = None
        self._rows: memoryview[int] | None = None
        self._bloom: bytes | None = None
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

    def _section(self, start: int, end: int, crc: int, name: str) -> memoryview:
        section = memoryview(self._header)[start:end]
        if zlib.crc32(section) != crc:
            raise CorruptFileError(self.path, f"capture index damaged (CRC-32 of its {name} differs)")
        return section

    def _block_ends(self) -> memoryview[int]:
        """Where each block's frame ends; its heads' ends, then, in ``_head_ends``."""
        ends = self._ends
        if ends is None:
            start, placed, _table = self._sections
            section = self._section(start, placed, self.meta.crc_blocks, "blocks' entries")
            n = self.meta.blocks
            numbers = _numbers(section[: 2 * n * self.meta.row_bytes], self.meta.row_bytes)
            ends, head_ends = numbers[:n], numbers[n:]
            if (ends[-1] if n else 0) != self._room or (head_ends[-1] if n else 0) != self.meta.heads_bytes:
                raise CorruptFileError(self.path, "capture index damaged (blocks that do not fill the file)")
            self._head_ends = head_ends
            self._ends = ends
        return ends

    def _head(self, b: int) -> bytes:
        """Block ``b``'s first line's SURT key and time."""
        self._block_ends()
        head_ends = self._head_ends
        assert head_ends is not None
        at = self._sections[1] - self.meta.heads_bytes
        return self._header[at + (head_ends[b - 1] if b else 0) : at + head_ends[b]]

    def _head_list(self) -> list[bytes]:
        """Every block's head, for bisection: made once, when a lookup first needs them
        (a batch reads lines by row, and never does)."""
        heads = self._heads
        if heads is None:
            heads = self._heads = [self._head(b) for b in range(self.meta.blocks)]
        return heads

    def _bloom_bytes(self) -> bytes:
        bloom = self._bloom
        if bloom is None:
            table = self._sections[2]
            bloom = self._bloom = bytes(
                self._section(table, len(self._header), self.meta.crc_bloom, "key filter")
            )
        return bloom

    def check(self) -> None:
        """Check every section now, not when first used (``verify``)."""
        self._block_ends()
        self.line_number(0)
        self._bloom_bytes()

    def covers(self, file: StoredFile) -> bool:
        return (file.name, file.size, file.version) == (self.meta.covers, self.meta.size, self.meta.version)

    def lines(self, prefixes: tuple[bytes, ...]) -> Iterator[bytes]:
        """The lines starting with one of ``prefixes``, in order."""
        key = min(prefixes)
        if len(prefixes) == 1 and key.endswith(b" ") and not may_hold(self._bloom_bytes(), key[:-1]):
            return  # a key (an exact match) this index does not hold: no block read
        heads = self._head_list()
        # Blocks before this one hold only lines below the key (their successor's head is).
        first = max(bisect.bisect_left(heads, key) - 1, 0)
        for b in range(first, len(heads)):
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
        return None if n is None else next(self._lines([(n, row)]))[1]

    def row_lines(self, rows: Iterable[int]) -> Iterator[tuple[int, bytes]]:
        """``(row, line)`` for each of these rows of the covered file that has a
        line, in the lines' order: a block is decompressed once for its rows."""
        table = self._row_table()
        lines, size = self.meta.lines, len(table)
        numbers = [(n, row) for row in rows if 0 <= row < size and (n := table[row]) < lines]
        numbers.sort()
        return self._lines(numbers)

    def _lines(self, numbers: list[tuple[int, int]]) -> Iterator[tuple[int, bytes]]:
        """``(row, line)`` of each ``(line number, row)`` (sorted by line number)."""
        per_block = self.meta.block_lines
        b = nth = at = last = -1  # the block, the line at ``at`` in it, its last line
        text = b""
        for n, row in numbers:
            if n // per_block != b:
                b, nth, at = n // per_block, 0, 0
                text = self._text(b)
                last = min(per_block, self.meta.lines - b * per_block) - 1
            k = n - b * per_block
            # A block holds a few dozen lines: found in C, not split, from the nearer of
            # the line found before in the block (numbers come in order) and the block's end.
            if last - k < k - nth:
                end = len(text) - 1
                for _ in range(last - k):
                    end = text.rindex(b"\n", 0, end)
                yield row, text[text.rfind(b"\n", 0, end) + 1 : end]
                continue
            for _ in range(k - nth):
                at = text.index(b"\n", at) + 1
            nth = k
            yield row, text[at : text.index(b"\n", at)]

    def line_number(self, row: int) -> int | None:
        """Where the line of the covered file's row ``row`` is among the index's
        lines (rows in this order share blocks), if it has one."""
        rows = self._row_table()
        if not 0 <= row < len(rows):
            return None
        n = rows[row]
        return n if n < self.meta.lines else None  # _NO_LINE, or not one of this index's

    def _row_table(self) -> memoryview[int]:
        rows = self._rows
        if rows is None:
            _start, placed, table = self._sections
            rows = self._rows = _numbers(
                self._section(placed, table, self.meta.crc_rows, "row table"), self.meta.row_bytes
            )
        return rows

    def _text(self, b: int) -> bytes:
        """Block ``b``'s lines, decompressed (each line ending in a newline)."""
        last = self._last
        if last[0] == b:
            return last[1]
        ends = self._block_ends()
        at = ends[b - 1] if b else 0
        try:
            dctx = _LOCAL.zstd
        except AttributeError:
            dctx = _LOCAL.zstd = zstandard.ZstdDecompressor()
        try:
            text: bytes = dctx.decompress(self._read(self._first + at, ends[b] - at))
        except zstandard.ZstdError as exc:
            raise CorruptFileError(self.path, f"capture index damaged (block {b}: {exc})") from None
        # Its bytes are checked by the frame's checksum (zstd verifies it as it decodes) and
        # its place among the blocks by its head; its lines are not counted (5 us a block,
        # a tenth of a winner's cost in a batch): only a writer's bug could miscount them,
        # and ``verify`` compares every line and row with the file's.
        if not text.endswith(b"\n") or not text.startswith(self._head(b)):
            raise CorruptFileError(self.path, f"capture index damaged (block {b} is not as its header says)")
        self._last = (b, text)
        return text


def _numbers(section: memoryview, width: int) -> memoryview[int]:
    """Little-endian unsigned numbers of ``width`` bytes, as they are."""
    if sys.byteorder != "little":
        swapped = array.array(_CODE[width], section)
        swapped.byteswap()
        section = memoryview(swapped)
    return section.cast("I" if width == 4 else "Q")


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
