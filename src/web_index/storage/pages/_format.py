"""The bytes of Parquet that reading one body page needs: Thrift's compact
protocol, an OffsetIndex's page locations, PLAIN values and definition levels.

Parquet's footer, offset indexes and page headers are Thrift structs in the
compact protocol. pyarrow parses the footer but exposes neither where a column
chunk's offset index is nor the index itself, so :mod:`._reader` reads those
few structs here. A struct decodes into ``{field id: value}`` (nested structs
as dicts, lists as lists, binary as bytes); anything malformed is a
:class:`ThriftError`, which callers turn into a damaged-file error.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

__all__ = ["Reader", "ThriftError", "UnsupportedPageError", "level_bits", "page_locations", "plain_values"]

_PLAIN, _RLE = 0, 3

# Compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
# Nothing we read nests deeper than a few levels: a deeper one is damage, not Parquet.
_MAX_DEPTH = 16


class UnsupportedPageError(Exception):
    """A page this reader does not decode (an encoding or codec of another
    writer): the caller reads the row group instead."""


class ThriftError(ValueError):
    """Bytes that are not the Thrift struct expected (a damaged file)."""


class Reader:
    """A cursor over compact-protocol bytes."""

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:
        self.data = bytes(data) if isinstance(data, memoryview) else data
        self.pos = pos

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ThriftError("truncated")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 63:
                raise ThriftError("varint too long")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ThriftError("truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def struct(self, last: int = 0, depth: int = 0) -> dict[int, Any]:
        """The fields of a struct up to its stop byte; ``last`` is the id of the
        field read before the cursor (to resume in the middle of a struct)."""
        if depth > _MAX_DEPTH:
            raise ThriftError("nested too deep")
        fields: dict[int, Any] = {}
        for fid, kind in self.fields(last):
            # A bool field's value is its type.
            fields[fid] = kind == _TRUE if kind in (_TRUE, _FALSE) else self.value(kind, depth + 1)
        return fields

    def fields(self, last: int = 0) -> Iterator[tuple[int, int]]:
        """Each field's id and type up to the struct's stop byte, the cursor then at its value
        (but a bool's, which is its type): the caller reads it before asking for the next."""
        while True:
            head = self.byte()
            if head == 0:
                return
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.zigzag()
            yield last, kind

    def value(self, kind: int, depth: int) -> Any:
        if kind in (_BYTE,):
            return struct.unpack("b", self.take(1))[0]
        if kind in (_I16, _I32, _I64):
            return self.zigzag()
        if kind == _DOUBLE:
            return struct.unpack("<d", self.take(8))[0]
        if kind == _BINARY:
            return self.take(self.varint())
        if kind in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if size > len(self.data) - self.pos:  # every element takes a byte at least
                raise ThriftError("list longer than its bytes")
            if elem in (_TRUE, _FALSE):
                return [self.byte() == _TRUE for _ in range(size)]
            return [self.value(elem, depth + 1) for _ in range(size)]
        if kind == _MAP:
            size = self.varint()
            if not size:
                return {}
            types = self.byte()
            if 2 * size > len(self.data) - self.pos:
                raise ThriftError("map longer than its bytes")
            return {
                _hashable(self.value(types >> 4, depth + 1)): self.value(types & 0x0F, depth + 1)
                for _ in range(size)
            }
        if kind == _STRUCT:
            return self.struct(0, depth)
        raise ThriftError(f"unknown type {kind}")


def _hashable(key: Any) -> Any:
    return key if not isinstance(key, dict | list) else repr(key)


def page_locations(data: bytes) -> list[tuple[int, int, int]]:
    """An OffsetIndex's page locations: (offset, compressed size, first row) each.

    Its PageLocations are three integers each, written in one way by every
    writer: read here in one loop (the general reader took ~1 ms, profiled, for
    the 50 pages of a row group); anything else goes to the general reader.
    """
    n = len(data)
    if n < 2 or data[0] != 0x19 or data[1] & 0x0F != 12:
        return _general_locations(data)
    size, pos = data[1] >> 4, 2
    if size == 15:
        size, pos = _varint(data, pos)
    out: list[tuple[int, int, int]] = []
    for _ in range(size):
        if data[pos : pos + 1] != b"\x16":
            return _general_locations(data)
        offset, pos = _varint(data, pos + 1)
        if data[pos : pos + 1] != b"\x15":
            return _general_locations(data)
        length, pos = _varint(data, pos + 1)
        if data[pos : pos + 1] != b"\x16":
            return _general_locations(data)
        first, pos = _varint(data, pos + 1)
        if data[pos : pos + 1] != b"\x00":
            return _general_locations(data)
        pos += 1
        out.append((_unzigzag(offset), _unzigzag(length), _unzigzag(first)))
    return out


def _unzigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _general_locations(data: bytes) -> list[tuple[int, int, int]]:
    raw = Reader(data).struct()
    return [(int(p[1]), int(p[2]), int(p[3])) for p in raw[1]]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ThriftError("truncated varint")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def plain_values(encoding: int, data: bytes, count: int, levels: list[int] | None) -> list[bytes | None]:
    if encoding != _PLAIN:
        raise UnsupportedPageError(f"encoding {encoding}")
    out: list[bytes | None] = []
    pos = 0
    for i in range(count):
        if levels is not None and not levels[i]:
            out.append(None)
            continue
        n = int.from_bytes(data[pos : pos + 4], "little")
        if pos + 4 + n > len(data):
            raise ValueError("a value runs past its page")
        out.append(data[pos + 4 : pos + 4 + n])
        pos += 4 + n
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes left after the page's values")
    return out


def level_bits(data: bytes | memoryview, count: int) -> list[int]:
    """Definition levels of bit width 1 (a flat optional column), RLE/bit-packed hybrid."""
    reader = Reader(bytes(data))
    out: list[int] = []
    while len(out) < count:
        head = reader.varint()
        if head & 1:  # bit-packed: groups of 8 values, one byte each at width 1
            for byte in reader.take(head >> 1):
                out.extend((byte >> b) & 1 for b in range(8))
        else:
            out.extend([reader.byte() & 1] * (head >> 1))
        if head >> 1 == 0:
            raise ValueError("empty run of definition levels")
    return out[:count]
