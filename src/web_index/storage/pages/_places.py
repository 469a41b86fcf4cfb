"""Where a body is, and reading it from there: the read of the find-then-read path.

A capture index line carries each body's *place*: where in its file the
compressed bytes of the Parquet data page that holds it start, how many
there are, their size decompressed, and where the value starts in them. A
body is then one positioned read, one zstd frame and a slice, with no footer,
no offset index and no pyarrow on the way: what pywb does with a CDXJ line's
offset and length in a WARC file.

Places are learnt once, when the index is written: every data page of the
body column is walked (its Thrift header read, its values decompressed and
their lengths summed), so a place is what the file held then, checked by
CRC-32 like every page. A place never vouches for itself at read time: the
body it gives is returned only if its SHA-1 is the line's digest, so a file
rewritten since (compacted again) or damaged is a :class:`PlaceError`, and
the caller reads the record the way it did before places (never a wrong body).
Files whose body column this reader cannot walk (dictionary pages, an
encoding other than PLAIN, page format v2, a codec it does not decompress)
get no places: their records are read the older way.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import zstandard

from web_index.errors import CorruptFileError
from web_index.storage._schema import BODY_COLUMN
from web_index.storage.pages._format import Reader, ThriftError, level_bits

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["BodyPlace", "PlaceError", "body_places", "page_values", "value_at"]

_DATA_PAGE, _DICTIONARY_PAGE = 0, 2
_PLAIN = 0
# Parquet codec names (pyarrow's spelling) whose pages this module decompresses.
_CODECS = {"ZSTD": "zstd", "UNCOMPRESSED": "none"}


class BodyPlace(NamedTuple):
    """Where one body is: ``size`` bytes at ``at`` in its file are a page's
    values compressed with ``codec``; ``raw`` bytes decompressed, in which the
    body's 4-byte length starts at ``value``."""

    at: int
    size: int
    raw: int
    value: int
    codec: str = "zstd"


class PlaceError(Exception):
    """The place does not hold the body it names (the file was rewritten or damaged)."""


def body_places(
    handle: pq.ParquetFile, group: int, sizes: Sequence[int | None] | None = None
) -> list[BodyPlace | None] | None:
    """The place of every body in row group ``group`` of a store file (``None``
    for a null one), or ``None`` when its pages are of a kind this module does
    not read (or ``handle`` reads no byte ranges). Raises
    :class:`~web_index.errors.CorruptFileError` for a page that is damaged.

    ``sizes``: the group's bodies' lengths (``None`` for a null one), known to the
    writer of a file just written: a page's places then follow from its header and
    them, its values not decompressed again (nor its checksum, of bytes just written)."""
    from web_index.storage.pages._checked_file import CheckedFile  # ``handle`` is open: pyarrow is

    schema = handle.schema
    column = next((i for i in range(len(schema)) if schema.column(i).path == BODY_COLUMN), None)
    if column is None or not isinstance(handle, CheckedFile) or handle.source is None:
        return None
    read_at = handle.read_at
    described = schema.column(column)
    if (
        described.physical_type != "BYTE_ARRAY"
        or described.max_repetition_level
        or described.max_definition_level > 1
    ):
        return None
    rows = handle.metadata.row_group(group).num_rows
    chunk = handle.metadata.row_group(group).column(column)
    try:
        optional = described.max_definition_level == 1
        return _group_places(read_at, chunk, rows, optional=optional, sizes=sizes)
    except (ThriftError, KeyError, TypeError, ValueError, zstandard.ZstdError) as exc:
        raise CorruptFileError(handle.store_path, f"body pages of row group {group}: {exc}") from None


def _group_places(
    read_at: Callable[[int, int], bytes],
    chunk: Any,
    rows: int,
    *,
    optional: bool,
    sizes: Sequence[int | None] | None = None,
) -> list[BodyPlace | None] | None:
    codec = _CODECS.get(chunk.compression)
    if codec is None or chunk.has_dictionary_page:
        return None
    start = chunk.data_page_offset
    data = read_at(start, chunk.total_compressed_size)
    if len(data) != chunk.total_compressed_size:
        raise ThriftError("the body column chunk ends early")
    places: list[BodyPlace | None] = []
    pos = 0
    while pos < len(data):
        reader = Reader(data, pos)
        header = reader.struct()
        kind, raw, size = header.get(1), header.get(2), header.get(3)
        body_at = reader.pos
        if kind != _DATA_PAGE or not isinstance(size, int) or not isinstance(raw, int):
            return None  # a dictionary page, page format v2, an index page: not ours
        page = header.get(5) or {}
        count, encoding = page.get(1), page.get(2)
        if encoding != _PLAIN or not isinstance(count, int):
            return None
        if sizes is not None and len(places) + count <= len(sizes):
            known = _known_places(
                sizes[len(places) : len(places) + count], start + body_at, size, raw, codec, optional=optional
            )
            if known is not None:
                places += known
                pos = body_at + size
                continue
        compressed = data[body_at : body_at + size]
        crc = header.get(4)
        if crc is not None and zlib.crc32(compressed) != crc & 0xFFFFFFFF:
            raise ThriftError(f"page checksum mismatch at byte {start + pos}")
        plain = _decompress(codec, compressed, raw)
        at = 0
        levels = None
        if optional:
            length = int.from_bytes(plain[:4], "little")
            levels = level_bits(plain[4 : 4 + length], count)
            at = 4 + length
        for i in range(count):
            if levels is not None and not levels[i]:
                places.append(None)
                continue
            places.append(BodyPlace(start + body_at, size, raw, at, codec))
            at += 4 + int.from_bytes(plain[at : at + 4], "little")
        if at != raw:
            raise ThriftError(f"values of the page at byte {start + pos} do not fill it")
        pos = body_at + size
    if len(places) != rows:
        raise ThriftError(f"the body pages hold {len(places)} values for {rows} rows")
    return places


def _known_places(
    sizes: Sequence[int | None], at: int, size: int, raw: int, codec: str, *, optional: bool
) -> list[BodyPlace | None] | None:
    """The places of a page's values whose lengths are ``sizes``: PLAIN values, each a 4-byte
    length and its bytes, which fill the page's ``raw`` bytes, after the definition levels (a
    4-byte length and their bytes) of an ``optional`` column (a store's ``data`` column is
    required: it has none); ``None`` if they cannot (not a page of these values: read it, then)."""
    values = sum(4 + n for n in sizes if n is not None)
    if optional:
        levels = raw - values - 4
        if not 0 <= levels <= len(sizes) + 16:  # 1-bit levels, run-length or bit-packed, take less
            return None
        value = 4 + levels
    elif values != raw or None in sizes:
        return None
    else:
        value = 0
    places: list[BodyPlace | None] = []
    for n in sizes:
        if n is None:
            places.append(None)
        else:
            places.append(BodyPlace(at, size, raw, value, codec))
            value += 4 + n
    return places


def page_values(read_range: Callable[[int, int], bytes], place: BodyPlace) -> bytes:
    """The decompressed values of the page ``place`` is in (``read_range(at,
    size)`` reads the file); a place that cannot be one is a :class:`PlaceError`."""
    data = read_range(place.at, place.size)
    if len(data) != place.size:
        raise PlaceError(f"{len(data)} bytes at {place.at}, {place.size} expected")
    try:
        return _decompress(place.codec, data, place.raw)
    except (zstandard.ZstdError, ValueError) as exc:
        raise PlaceError(f"page at {place.at}: {exc}") from None


def value_at(values: bytes, at: int) -> bytes:
    """The body whose length starts at ``at`` (a place's ``value``) in its page's
    ``values`` (:func:`page_values`), unchecked: the caller compares its digest."""
    length = int.from_bytes(values[at : at + 4], "little")
    if at + 4 + length > len(values):
        raise PlaceError(f"value at {at} runs past its page")
    return values[at + 4 : at + 4 + length]


_LOCAL = threading.local()


def _decompress(codec: str, data: bytes, raw: int) -> bytes:
    if codec == "none":
        if len(data) != raw:
            raise ValueError(f"{len(data)} bytes, the header says {raw}")
        return data
    # A decompressor is reused (its context costs more than a small page) and is not thread-safe.
    try:
        dctx = _LOCAL.zstd
    except AttributeError:
        dctx = _LOCAL.zstd = zstandard.ZstdDecompressor()
    out: bytes = dctx.decompress(data, max_output_size=raw)
    if len(out) != raw:
        raise ValueError(f"decompressed to {len(out)} bytes, the header says {raw}")
    return out
