"""Parquet files of one schema joined by their bytes: row groups written by several
processes at once become one file without being decoded or encoded again.

pyarrow's writer encodes a file's columns on one thread, so a big file written by
one process waits for one core. Files written apart, each its own run of row
groups, join here: the first file keeps its bytes, the others' row groups are
copied after them, and one footer lists them all, their offsets moved by where
they now start. The footer is Thrift's compact protocol; it is read keeping each
field's type (``_Typed``) and written back by the same rules, so a footer read and
written unchanged is the same bytes, and a file joined from the parts a writer
would have written in one go is that file, byte for byte.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from web_index.storage.pages._format import (
    _BINARY,
    _BYTE,
    _DOUBLE,
    _FALSE,
    _I16,
    _I32,
    _I64,
    _LIST,
    _MAP,
    _MAX_DEPTH,
    _SET,
    _STRUCT,
    _TRUE,
    Reader,
    ThriftError,
)

__all__ = ["append_parquet"]

_MAGIC = b"PAR1"

# A struct as read: (field id, compact type, value) in the order written; a list
# (element type, values); a map (key type, value type, pairs). Bool elements of a
# list keep their byte.
_Struct = list[tuple[int, int, Any]]

# FileMetaData's fields, RowGroup's and ColumnChunk's, ColumnMetaData's, that hold an
# offset into the file (parquet.thrift).
_FILE_ROWS, _FILE_GROUPS = 3, 4
_GROUP_COLUMNS, _GROUP_OFFSET = 1, 5
_CHUNK_OFFSETS = {2}  # file_offset
_CHUNK_META, _CHUNK_INDEXES = 3, (4, 6)  # offset and column index offsets: a page index is refused
_META_OFFSETS = {9, 10, 11, 14}  # data, index and dictionary page offsets, bloom filter offset


class _Typed(Reader):
    """A compact-protocol reader that keeps each value's type, so that it can be written back."""

    def typed_struct(self, depth: int = 0) -> _Struct:
        if depth > _MAX_DEPTH:
            raise ThriftError("nested too deep")
        return [
            (fid, kind, kind == _TRUE if kind in (_TRUE, _FALSE) else self.typed(kind, depth + 1))
            for fid, kind in self.fields()
        ]

    def typed(self, kind: int, depth: int) -> Any:
        if kind == _STRUCT:
            return self.typed_struct(depth)
        if kind in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            if size > len(self.data) - self.pos:
                raise ThriftError("list longer than its bytes")
            if elem in (_TRUE, _FALSE):
                return elem, [self.byte() for _ in range(size)]
            return elem, [self.typed(elem, depth + 1) for _ in range(size)]
        if kind == _MAP:
            size = self.varint()
            if not size:
                return 0, 0, []
            types = self.byte()
            if 2 * size > len(self.data) - self.pos:
                raise ThriftError("map longer than its bytes")
            pairs = [
                (self.typed(types >> 4, depth + 1), self.typed(types & 0x0F, depth + 1)) for _ in range(size)
            ]
            return types >> 4, types & 0x0F, pairs
        return self.value(kind, depth)


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _write_struct(fields: _Struct, out: bytearray) -> None:
    last = 0
    for fid, kind, value in fields:
        if kind in (_TRUE, _FALSE):
            kind = _TRUE if value else _FALSE
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | kind)
        else:
            out.append(kind)
            out += _zigzag(fid)
        last = fid
        if kind not in (_TRUE, _FALSE):
            _write(kind, value, out)
    out.append(0)


def _write(kind: int, value: Any, out: bytearray) -> None:
    if kind == _STRUCT:
        _write_struct(value, out)
    elif kind in (_LIST, _SET):
        elem, items = value
        if len(items) < 15:
            out.append(len(items) << 4 | elem)
        else:
            out.append(0xF0 | elem)
            out += _varint(len(items))
        for item in items:
            if elem in (_TRUE, _FALSE):
                out.append(item)
            else:
                _write(elem, item, out)
    elif kind == _MAP:
        key_kind, value_kind, pairs = value
        out += _varint(len(pairs))
        if pairs:
            out.append(key_kind << 4 | value_kind)
            for k, v in pairs:
                _write(key_kind, k, out)
                _write(value_kind, v, out)
    elif kind == _BYTE:
        out += struct.pack("b", value)
    elif kind in (_I16, _I32, _I64):
        out += _zigzag(value)
    elif kind == _DOUBLE:
        out += struct.pack("<d", value)
    elif kind == _BINARY:
        out += _varint(len(value))
        out += value
    else:
        raise ThriftError(f"unknown type {kind}")


def _footer(path: Path) -> tuple[_Struct, int]:
    """A Parquet file's footer, read keeping its types, and where it starts (its data's end)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        if size < 12 or f.read(4) != _MAGIC:
            raise ThriftError(f"{path}: not a Parquet file")
        f.seek(size - 8)
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if tail[4:] != _MAGIC or length > size - 12:
            raise ThriftError(f"{path}: no Parquet footer")
        f.seek(size - 8 - length)
        return _Typed(f.read(length)).typed_struct(), size - 8 - length


def _field(fields: _Struct, fid: int) -> Any:
    return next((value for f, _kind, value in fields if f == fid), None)


def _replace(fields: _Struct, fid: int, value: Any) -> _Struct:
    return [(f, kind, value if f == fid else v) for f, kind, v in fields]


def _moved(group: _Struct, by: int) -> _Struct:
    """A row group's metadata with every offset moved ``by`` bytes (pyarrow numbers no
    row group: an ``ordinal`` would be written as it came)."""
    out: _Struct = []
    for fid, kind, value in group:
        if fid == _GROUP_COLUMNS:
            elem, chunks = value
            value = (elem, [_moved_chunk(chunk, by) for chunk in chunks])
        elif fid == _GROUP_OFFSET and value:
            value += by
        out.append((fid, kind, value))
    return out


def _moved_chunk(chunk: _Struct, by: int) -> _Struct:
    out: _Struct = []
    for fid, kind, value in chunk:
        if fid in _CHUNK_OFFSETS and value:  # 0: not set (the file's magic is there)
            value += by
        elif fid == _CHUNK_META:
            value = [(f, k, v + by if f in _META_OFFSETS and v else v) for f, k, v in value]
        out.append((fid, kind, value))
    return out


def append_parquet(into: Path, parts: Sequence[Path]) -> None:
    """Append the row groups of ``parts`` (Parquet files of ``into``'s schema, as one
    writer with the same options wrote it) to ``into``, in their order, and remove them.

    A part with a page index is refused, ``into`` unchanged: its offset indexes hold
    where its pages are, and would have to be written again. Past the parts' footers,
    ``into`` is rewritten in place: a failure then leaves it without one (not a
    Parquet file), which is why it is a file being staged."""
    if not parts:
        return
    meta, end = _footer(into)
    footers = [_footer(part) for part in parts]
    for part, (part_meta, _end) in zip(parts, footers, strict=True):
        for group in _field(part_meta, _FILE_GROUPS)[1]:
            chunks = _field(group, _GROUP_COLUMNS)[1]
            if any(_field(chunk, f) is not None for chunk in chunks for f in _CHUNK_INDEXES):
                raise ValueError(f"{part}: a page index, which appending it would not move")
    elem, row_groups = _field(meta, _FILE_GROUPS)
    row_groups = list(row_groups)
    rows = _field(meta, _FILE_ROWS)
    with into.open("r+b") as out:
        out.truncate(end)
        out.seek(end)
        for part, (part_meta, part_end) in zip(parts, footers, strict=True):
            by = out.tell() - len(_MAGIC)  # the part's row groups start past its magic
            with part.open("rb") as src:
                src.seek(len(_MAGIC))
                _copy(src, out, part_end - len(_MAGIC))
            row_groups += [_moved(group, by) for group in _field(part_meta, _FILE_GROUPS)[1]]
            rows += _field(part_meta, _FILE_ROWS)
        meta = _replace(_replace(meta, _FILE_GROUPS, (elem, row_groups)), _FILE_ROWS, rows)
        footer = bytearray()
        _write_struct(meta, footer)
        out.write(bytes(footer) + len(footer).to_bytes(4, "little") + _MAGIC)
        out.flush()
    for part in parts:
        part.unlink()


def _copy(src: Any, dst: Any, count: int) -> None:
    """``count`` bytes from ``src``'s position to ``dst``'s, in the kernel where it can."""
    dst.flush()
    left = count
    src_at, dst_at = src.tell(), dst.tell()
    try:
        while left:
            n = os.copy_file_range(src.fileno(), dst.fileno(), left, src_at, dst_at)
            if n == 0:
                raise ThriftError("a part file ended early")
            src_at, dst_at, left = src_at + n, dst_at + n, left - n
    except OSError:  # another file system, or no copy_file_range: copy through this process
        src.seek(src_at)
        dst.seek(dst_at)
        while left:
            chunk = src.read(min(left, 1 << 20))
            if not chunk:
                raise ThriftError("a part file ended early") from None
            dst.write(chunk)
            left -= len(chunk)
        return
    dst.seek(dst_at)
