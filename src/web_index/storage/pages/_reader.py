"""One record, one read: a body from the one data page it lives in.

A ``get`` file's body column is read by row group through pyarrow, which
decompresses the whole column chunk (a megabyte or more) to return one body.
Big files are written with small body pages and the Parquet page index
(``WriteOptions``, docs/format.md): the OffsetIndex gives each page's offset,
size and first row, so a body costs one positioned read of its page, one
decompression and a PLAIN decode. The file stays plain Parquet; this module
only reads it differently.

Every step is checked against what the checksummed footer says (pyarrow
parsed it): the offset index must tile the column chunk exactly, the page's
header must agree with its index entry, its CRC with its bytes, and its
values must fill it exactly. Anything else is a :class:`CorruptFileError`
naming the file and the record; a file without a page index for the body
column, or with an encoding or codec this reader does not decode, is read by
row group as before (:func:`body_pages` returns ``None``, or
:class:`UnsupportedPageError` is raised).
"""

from __future__ import annotations

import bisect
import functools
import itertools
import weakref
import zlib
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from web_index.errors import CorruptFileError
from web_index.models import payload_sha1
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN
from web_index.storage.pages._checksum import CHECKSUM_KEY
from web_index.storage.pages._format import (
    Reader,
    ThriftError,
    UnsupportedPageError,
    level_bits,
    page_locations,
    plain_values,
)
from web_index.storage.pages._known import KNOWN, Known, Page

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from web_index.storage.pages._checked_file import CheckedFile

__all__ = ["BodyPages", "UnsupportedPageError", "body_pages", "read_group"]

_DATA_PAGE, _DATA_PAGE_V2 = 0, 3
_RLE = 3
# Parquet codec names (as pyarrow reports them) that pyarrow's Codec decodes
# exactly as Parquet frames them. (Parquet's old LZ4 is Hadoop-framed: not here.)
_CODECS = {"ZSTD": "zstd", "SNAPPY": "snappy", "GZIP": "gzip", "BROTLI": "brotli", "LZ4_RAW": "lz4_raw"}


class BodyPages:
    """The body column of one open file, page by page."""

    def __init__(self, handle: CheckedFile, column: int, codec: str, *, optional: bool, crcs: bool) -> None:
        import pyarrow as pa

        # Weakly: this reader is the value of _READERS, keyed weakly by the handle,
        # and a strong reference back would keep every paged file ever read open
        # (and its mapped pages in the process's memory) for good.
        self._handle = weakref.ref(handle)
        self.column = column
        self.codec_name = codec
        self.codec = pa.Codec(_CODECS[codec]) if codec in _CODECS else None  # type: ignore[arg-type]
        self.optional = optional
        self.crcs = crcs  # our files carry a CRC on every page: a missing one is damage
        # What is learnt of the file's footer and offset indexes outlives this
        # handle: a query opens its files anew, and parsing them again in Python
        # cost more than the page read. Keyed by the file's checksum, which
        # changes with any byte of it.
        digits = (handle.metadata.metadata or {}).get(CHECKSUM_KEY)
        self._key = (handle.store_path, digits) if digits else None
        self._known = (KNOWN.get(self._key) if self._key else None) or Known()

    @property
    def handle(self) -> CheckedFile:
        handle = self._handle()
        if handle is None:  # only its file's users call it, and they hold the handle
            raise RuntimeError("the file of this page reader is closed")
        return handle

    @property
    def path(self) -> str:
        return self.handle.store_path

    def read(
        self, group: int, rows: Iterable[int], name: Callable[[int], str] | None = None
    ) -> dict[int, bytes | None]:
        """The bodies at these row numbers of row group ``group`` (numbered within
        the group); ``name(row)`` says which record a row is, for errors."""
        pages = self._index(group)
        wanted: dict[int, list[int]] = {}
        starts = [p.first_row for p in pages]
        for r in rows:
            wanted.setdefault(bisect.bisect_right(starts, r) - 1, []).append(r)
        out: dict[int, bytes | None] = {}
        for k, members in sorted(wanted.items()):
            end = pages[k + 1].first_row if k + 1 < len(pages) else self._group_rows(group)
            what = functools.partial(_naming, name or (lambda r: f"row {r}"), group, members)
            values = self._page(pages[k], end - pages[k].first_row, what)
            for r in members:
                out[r] = values[r - pages[k].first_row]
        return out

    def few(self, group: int, rows: Iterable[int]) -> bool:
        """Whether these rows' pages are few enough to read one by one: a page
        costs ~1/20 of its row group's body chunk (bench/results/pages.md), so
        up to a third of a group's pages (~16 of ~50 at 2 KB bodies)."""
        pages = self._index(group)
        starts = [p.first_row for p in pages]
        hit = {bisect.bisect_right(starts, r) for r in rows}
        return len(hit) <= 1 or 3 * len(hit) <= len(pages)

    # -- the offset index ---------------------------------------------------------

    def _group_rows(self, group: int) -> int:
        return int(self.handle.metadata.row_group(group).num_rows)

    def _index(self, group: int) -> list[Page]:
        pages = self._known.pages.get(group)
        if pages is None:
            pages = self._known.pages[group] = self._read_index(group)
            if self._key:
                KNOWN.put(self._key, self._known)
        return pages

    def _read_index(self, group: int) -> list[Page]:
        chunk = self.handle.metadata.row_group(group).column(self.column)
        if not _pageable(chunk, self.codec_name):
            raise UnsupportedPageError(f"row group {group} has no page index, or pages of another kind")
        where = self._locate(group, chunk)
        if where is None:
            raise UnsupportedPageError("offset index not found in the footer")
        at, length = where
        try:
            pages = [Page(*loc) for loc in page_locations(self._read(at, length))]
        except (ThriftError, KeyError, TypeError, ValueError) as exc:
            raise self._damaged(f"unreadable offset index of row group {group} ({exc})") from None
        start, end = chunk.data_page_offset, chunk.data_page_offset + chunk.total_compressed_size
        rows = self._group_rows(group)
        # The index is outside every checksum a read checks: it must tile the
        # chunk the footer describes, page after page, rows rising from 0.
        ok = bool(pages) and pages[0].offset == start and pages[0].first_row == 0
        for a, b in itertools.pairwise(pages):
            ok = ok and a.offset + a.size == b.offset and a.first_row < b.first_row
        ok = ok and pages[-1].offset + pages[-1].size == end and pages[-1].first_row < max(rows, 1)
        if not ok:
            raise self._damaged(f"offset index of row group {group} disagrees with the footer")
        return pages

    def _locate(self, group: int, chunk: Any) -> tuple[int, int] | None:
        """Where the footer says the chunk's offset index is.

        pyarrow tells whether a chunk has one but not where; parsing the whole
        footer in Python would cost more than the row group it saves. So the
        chunk is found by the bytes of its column path, near the start of each body
        column chunk's metadata, then parsed from there and checked against
        pyarrow's reading of the same footer.
        """
        footer = self._footer_bytes()
        spots = self._known.spots
        if spots is None:
            name = BODY_COLUMN.encode()
            # path_in_schema: field 3 (a list), one binary element, the name.
            needle = b"\x19\x18" + bytes([len(name)]) + name
            spots, at = [], footer.find(needle)
            while at >= 0:
                spots.append(at + len(needle))
                at = footer.find(needle, at + 1)
            self._known.spots = spots
        expected = (chunk.data_page_offset, chunk.total_compressed_size, chunk.num_values)
        # The group-th spot is the group-th chunk unless some other bytes of the
        # footer happen to look like a column path: then try each.
        order = ([spots[group]] if group < len(spots) else []) + spots
        for spot in order:
            try:
                reader = Reader(footer, spot)
                meta = reader.struct(last=3)  # the rest of ColumnMetaData
                rest = reader.struct(last=3)  # the rest of ColumnChunk
            except ThriftError:
                continue
            if (meta.get(9), meta.get(7), meta.get(5)) == expected and 4 in rest and 5 in rest:
                return int(rest[4]), int(rest[5])
        return None

    def _footer_bytes(self) -> bytes:
        if self._known.footer is None:
            source = self.handle.source
            assert source is not None  # checked by body_pages
            size = source.size()
            length = int.from_bytes(self._read(size - 8, 4), "little")
            self._known.footer = self._read(size - 8 - length, length)
        return self._known.footer

    # -- one page -------------------------------------------------------------------

    def _page(self, page: Page, count: int, what: Callable[[], str]) -> list[bytes | None]:
        import pyarrow as pa

        data = self._read(page.offset, page.size)
        try:
            reader = Reader(data)
            header = reader.struct()
            body = memoryview(data)[reader.pos :]
            kind, raw_size, size = header[1], header[2], header[3]
            if size != len(body):
                raise ValueError(f"header says {size} bytes, the index {len(body)}")
            crc = header.get(4)
            if crc is not None and zlib.crc32(body) != crc & 0xFFFFFFFF:
                raise ValueError("page checksum mismatch")
            if crc is None and self.crcs:
                raise ValueError("page without its checksum")
            if kind == _DATA_PAGE:
                values = self._v1(header[5], body, raw_size, count)
            elif kind == _DATA_PAGE_V2:
                values = self._v2(header[8], body, raw_size, count)
            else:
                raise ValueError(f"page of type {kind} where a data page should be")
        except UnsupportedPageError:
            raise
        except (ThriftError, KeyError, TypeError, ValueError, OSError, pa.ArrowException) as exc:
            raise self._damaged(f"body page of {what()} at byte {page.offset}: {exc}") from None
        return values

    def _v1(self, head: dict[int, Any], body: memoryview, raw_size: int, count: int) -> list[bytes | None]:
        if head[1] != count:
            raise ValueError(f"page holds {head[1]} values, its index {count} rows")
        plain = self._decompress(body, raw_size)
        levels: list[int] | None = None
        if self.optional:
            if head.get(3, _RLE) != _RLE:
                raise UnsupportedPageError("definition levels not RLE")
            length = int.from_bytes(plain[:4], "little")
            levels = level_bits(plain[4 : 4 + length], count)
            plain = plain[4 + length :]
        return plain_values(head[2], plain, count, levels)

    def _v2(self, head: dict[int, Any], body: memoryview, raw_size: int, count: int) -> list[bytes | None]:
        if head[1] != count or head[3] != count:
            raise ValueError(f"page holds {head[1]} values in {head[3]} rows, its index {count} rows")
        def_len, rep_len = head[5], head[6]
        if rep_len or (def_len and not self.optional) or def_len < 0:
            raise ValueError("levels a flat column cannot have")
        levels = level_bits(body[:def_len], count) if self.optional else None
        values = body[def_len:]
        plain = self._decompress(values, raw_size - def_len) if head.get(7, True) else bytes(values)
        return plain_values(head[4], plain, count, levels)

    def _decompress(self, data: memoryview, size: int) -> bytes:
        if self.codec is None:
            return bytes(data)
        out = self.codec.decompress(data, decompressed_size=size, asbytes=True)
        assert isinstance(out, bytes)
        if len(out) != size:
            raise ValueError(f"decompressed to {len(out)} bytes, header says {size}")
        return out

    # -- plumbing -------------------------------------------------------------------

    def _read(self, at: int, length: int) -> bytes:
        data = self.handle.read_at(at, length)
        if len(data) != length:
            raise self._damaged(f"file ended at {at + len(data)}, expected {at + length} bytes")
        return data

    def _damaged(self, problem: str) -> CorruptFileError:
        return CorruptFileError(self.path, problem)


# Per open file: its body pages reader, or None (no page index: read by row group).
_READERS: weakref.WeakKeyDictionary[pq.ParquetFile, BodyPages | None] = weakref.WeakKeyDictionary()


def body_pages(handle: pq.ParquetFile) -> BodyPages | None:
    """The page reader of ``handle``'s body column, or ``None`` when its row
    groups must be read whole: no body column, no page index for it, a
    dictionary-encoded or nested one, a codec this module does not decode."""
    from web_index.storage.pages._checked_file import CheckedFile  # ``handle`` is open: pyarrow is

    if handle in _READERS:
        return _READERS[handle]
    reader = _make(handle) if isinstance(handle, CheckedFile) else None
    _READERS[handle] = reader
    return reader


def _make(handle: CheckedFile) -> BodyPages | None:
    meta = handle.metadata
    schema = handle.schema
    column = next((i for i in range(len(schema)) if schema.column(i).path == BODY_COLUMN), None)
    if column is None or not meta.num_row_groups or handle.source is None:
        return None
    described = schema.column(column)
    flat = not described.max_repetition_level and described.max_definition_level <= 1
    if described.physical_type != "BYTE_ARRAY" or not flat:
        return None
    # The first row group stands for all (each is checked again when read: a
    # big file has thousands, and a query opens its files anew).
    chunk = meta.row_group(0).column(column)
    codec = chunk.compression
    if not _pageable(chunk, codec):
        return None
    crcs = CHECKSUM_KEY in (meta.metadata or {})
    optional = described.max_definition_level == 1
    return BodyPages(handle, column, codec, optional=optional, crcs=crcs)


def _pageable(chunk: Any, codec: str) -> bool:
    return bool(
        chunk.has_offset_index
        and not chunk.has_dictionary_page
        and chunk.compression == codec
        and (codec == "UNCOMPRESSED" or codec in _CODECS)
    )


def read_group(
    handle: pq.ParquetFile, group: int, rows: Iterable[int]
) -> tuple[pa.Table, dict[int, bytes | None] | None]:
    """Row group ``group`` of a store file, to take the rows ``rows`` (numbered
    within the group) from: the whole row group and ``None``, or, when its
    bodies can be read by page, its other columns and those rows' bodies.

    A body read by page is checked against its stored SHA-1 (files of format
    3): whatever a flipped bit outside every CRC could make this reader pick,
    it never returns it as the record's body.
    """
    pages = body_pages(handle)
    wanted = sorted(set(rows))
    try:
        few = pages is not None and pages.few(group, wanted)
    except UnsupportedPageError:
        _READERS[handle] = None  # another writer's row group: this file by row group from now on
        few = False
    if pages is not None and few:
        names = [n for n in handle.schema.names if n != BODY_COLUMN]
        table = handle.read_row_group(group, columns=names, use_threads=False)
        try:
            bodies = pages.read(group, wanted, functools.partial(_label, table))
        except UnsupportedPageError:
            _READERS[handle] = None
        else:
            if DIGEST_COLUMNS[0] in table.column_names:
                sha1s = table.column(DIGEST_COLUMNS[0])
                # A row that refers to its payload holds none (storage/payloads/_refs.py).
                refs = table.column(REF_COLUMN) if REF_COLUMN in table.column_names else None
                for r, body in bodies.items():
                    if refs is not None and refs[r].is_valid:
                        if body != b"":
                            raise CorruptFileError(
                                pages.path, f"{_label(table, r)} has a body and a reference"
                            )
                        continue
                    if body is None or payload_sha1(body) != sha1s[r].as_py():
                        problem = f"the body of {_label(table, r)} does not match its SHA-1"
                        raise CorruptFileError(pages.path, problem)
            return table, bodies
    return handle.read_row_group(group, use_threads=False), None


def _naming(name: Callable[[int], str], group: int, rows: list[int]) -> str:
    return ", ".join(name(r) for r in rows) + f" of row group {group}"


def _label(table: pa.Table, row: int) -> str:
    if row >= table.num_rows or "request_id" not in table.column_names:
        return f"row {row}"
    chain = table.column("chain_index")[row].as_py() if "chain_index" in table.column_names else 0
    return f"record {table.column('request_id')[row].as_py()} (response {chain})"
