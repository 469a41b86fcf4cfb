"""The little of Thrift's compact protocol that reading one body page needs.

Parquet's footer, offset indexes and page headers are Thrift structs in the
compact protocol. pyarrow parses the footer but exposes neither where a column
chunk's offset index is nor the index itself, so :mod:`._pages` reads those
few structs here. A struct decodes into ``{field id: value}`` (nested structs
as dicts, lists as lists, binary as bytes); anything malformed is a
:class:`ThriftError`, which callers turn into a damaged-file error.
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["Reader", "ThriftError"]

# Compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
# Nothing we read nests deeper than a few levels: a deeper one is damage, not Parquet.
_MAX_DEPTH = 16


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
        while True:
            head = self.byte()
            if head == 0:
                return fields
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.zigzag()
            if kind in (_TRUE, _FALSE):  # a bool field's value is its type
                fields[last] = kind == _TRUE
            else:
                fields[last] = self.value(kind, depth + 1)

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
