"""Reading and writing the Parquet files of one partition.

The visible files of a partition are its compacted file (if any) plus every
part file that the compacted file does not list as superseded. A compaction
writes the new compacted file *with* the list of parts it absorbed, then
deletes those parts; so at every instant each record is visible exactly once,
and a compaction killed at any point leaves the store correct.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage._layout import Partition, StoredFile, parse_file_name
from web_index.storage._schema import (
    BODY_COLUMN,
    DIGEST_COLUMNS,
    FORMAT_VERSION,
    REF_COLUMN,
    SORT_KEYS,
    schemas,
)
from web_index.storage._tables import conform
from web_index.storage.pages import check_bytes

if TYPE_CHECKING:  # polars and pyarrow are imported where used: the lookup path needs neither
    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

from web_index.storage.backends import Backend, LocalBackend

__all__ = [
    "FORMAT_KEY",
    "SUPERSEDED_KEY",
    "WriteOptions",
    "list_partition_files",
    "outdated",
    "read_small_files",
    "read_superseded",
    "read_table",
    "row_groups",
    "schema_matches",
    "visible_files",
    "write_partition_file",
]

SUPERSEDED_KEY = b"web_index.superseded"
FORMAT_KEY = b"web_index.format"
# Formats written as this version writes (a format-3 file is a format-4 file
# without payload references: nothing to gain by rewriting it).
_CURRENT_FORMATS = (b"3", FORMAT_VERSION.encode())


class WriteOptions:
    """How part and compacted files are written (tuned in ``docs/performance.md``)."""

    def __init__(
        self,
        *,
        row_group_rows: int = 4096,
        body_row_group_rows: int = 128,
        compression_level: int = 3,
        group_min_bytes: int = 1 << 20,
        group_max_bytes: int = 64 << 20,
        body_page_bytes: int = 8 << 10,
        paged_min_bytes: int = 256 << 10,
        dictionary_min_rows: int = 1000,
        share_payloads: bool = True,
    ) -> None:
        self.row_group_rows = row_group_rows
        # Files with bodies get smaller row groups: a lookup decodes a whole row
        # group of the body column to return one body.
        self.body_row_group_rows = body_row_group_rows
        self.compression_level = compression_level
        # Row groups hold at least group_min_bytes (128 rows of 2 KB bodies made
        # 256 KB row groups: a 5 GB file had 20,000, a 20 MB footer that every
        # open parses and a compaction held in memory) and at most
        # group_max_bytes (128 rows of 64 MiB bodies would be 8 GiB in memory
        # while compaction streams). See docs/format.md.
        self.group_min_bytes = group_min_bytes
        self.group_max_bytes = group_max_bytes
        # Bodies are written in data pages of about body_page_bytes, so that a
        # lookup decompresses one page (its place is in the capture index's
        # line: storage/pages/_places.py), not its row group's body chunk. Each
        # page is a zstd frame of its own, which cannot draw on the others: the
        # trade between a lookup's time and the body column's bytes is measured
        # in docs/performance.md. Files with at least paged_min_bytes of bodies
        # also carry the Parquet page index, by which a query reads a body's page
        # without an index line (storage/pages/_reader.py); smaller ones skip its bytes.
        self.body_page_bytes = body_page_bytes
        self.paged_min_bytes = paged_min_bytes
        # A dictionary page costs a page header and footer entries: in the
        # typical file of tens of rows, more than the repeated strings it saves.
        self.dictionary_min_rows = dictionary_min_rows
        # A compacted ``get`` row whose payload its domain already stores refers to
        # it instead of holding a copy (storage/payloads/_sharing.py); off, every row holds its body.
        self.share_payloads = share_payloads

    def group_rows(self, type: RecordType, held: int = 0, size: int = 0) -> int:
        """Rows per row group; with ``held`` rows of ``size`` bytes in hand, as
        many as keep a row group within the byte bounds."""
        rows = self.body_row_group_rows if type is RecordType.GET else self.row_group_rows
        if not held:
            return rows
        per_row = max(1, size // held)
        return max(1, min(max(rows, -(-self.group_min_bytes // per_row)), self.group_max_bytes // per_row))

    def compression(self, type: RecordType) -> tuple[dict[str, str], dict[str, int]]:
        """Codec and level per column: zstd for bodies, LZ4 for everything else.

        Reading one row group decompresses every column chunk of it, and
        pyarrow's zstd costs ~25 us a chunk before it decodes a byte (LZ4 a
        tenth of that): with zstd everywhere, the 14 small columns of a ``get``
        row group cost more to read than its 128 bodies. Bodies are most of
        the bytes, so they keep zstd's ratio; the rest compress ~4% worse.
        Measured in docs/performance.md.
        """
        codecs = {name: ("zstd" if name == BODY_COLUMN else "lz4") for name in schemas()[type].names}
        return codecs, {BODY_COLUMN: self.compression_level} if BODY_COLUMN in codecs else {}

    def dictionary(self, rows: int) -> list[str]:
        """The columns dictionary-encoded in a file of ``rows`` rows (so far)."""
        return ["fetcher_name", "fetcher_version", "state"] if rows >= self.dictionary_min_rows else []

    def paging(self, type: RecordType, body_bytes: int, rows: int) -> dict[str, Any]:
        """The writer's page options for a file with ``body_bytes`` of bodies in
        ``rows`` rows (so far): small body pages, and the page index in a big file.

        pyarrow checks a page's size only after every ``write_batch_size``
        values (1,024 by default, which would make pages of megabytes): the
        batch is set so that a batch of average bodies is at most half a page.
        The page size applies to every column; the small ones compress a
        little worse for it.
        """
        if type is not RecordType.GET or not rows:
            return {"write_page_index": False}
        mean = max(1, body_bytes // rows)
        return {
            "write_page_index": body_bytes >= self.paged_min_bytes,
            "data_page_size": self.body_page_bytes,
            "write_batch_size": max(1, min(1024, self.body_page_bytes // (2 * mean))),
        }


def outdated(meta: pq.FileMetaData, type: RecordType, options: WriteOptions) -> bool:
    """Whether a file's footer shows it written as this store no longer writes
    files: an older format, or a ``get`` file big enough for body pages
    without a page index for its bodies (``compact(min_parts=0)`` rewrites it)."""
    written = (meta.metadata or {}).get(FORMAT_KEY, b"")
    if written.isdigit() and int(written) < int(_CURRENT_FORMATS[0]):
        return True
    # A newer format (or another writer's file) is left as it is: rewriting it
    # here would drop what this version does not know.
    names = meta.schema.names
    if written not in _CURRENT_FORMATS or type is not RecordType.GET or BODY_COLUMN not in names:
        return False
    body = names.index(BODY_COLUMN)
    chunks = [meta.row_group(g).column(body) for g in range(meta.num_row_groups)]
    # Parquet's size counts a page header and 4 bytes a value where the writer's
    # (Arrow's) counts 8 bytes a value: less a header a row group, it is never
    # more than the writer's, so a file just under the line is not rewritten unpaged again.
    size = sum(c.total_uncompressed_size for c in chunks) - 64 * len(chunks)
    return size >= options.paged_min_bytes and not all(c.has_offset_index for c in chunks)


def write_partition_file(
    backend: Backend,
    partition: Partition,
    table: pa.Table | Iterable[pa.Table],
    options: WriteOptions,
    *,
    part: str | None,
    superseded: Sequence[str] = (),
    condition: dict[str, object] | None = None,
) -> int:
    """Write a sorted table as a part file (``part`` given) or the compacted file.

    ``table`` may be an iterable of tables of one row group each, written as
    they come (a compaction larger than memory).

    ``condition`` (``{"if_match": version}`` or ``{"create": True}``) makes the
    write conditional on an object store (see ``Backend.write_parquet``).
    """
    path = partition.compacted_path if part is None else partition.part_path(part)
    data, write_options = partition_file_args(partition, table, options, superseded=superseded)
    return backend.write_parquet(path, data, **write_options, **(condition or {}))


def partition_file_args(
    partition: Partition,
    table: pa.Table | Iterable[pa.Table],
    options: WriteOptions,
    *,
    superseded: Sequence[str] = (),
) -> tuple[pa.Table | pa.RecordBatchReader, dict[str, Any]]:
    """What :func:`write_partition_file` writes (the data and the Parquet writer's
    options), wherever it goes. A file that absorbed no parts carries no
    superseded list, so a part file and a compacted file that absorbed nothing
    are written alike: a bulk load writes one first and names it either way after."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    meta = {FORMAT_KEY: FORMAT_VERSION.encode()}
    if superseded:  # absent means none (read_superseded): ~35 bytes a file saved
        meta[SUPERSEDED_KEY] = json.dumps(sorted(superseded)).encode()
    schema = schemas()[partition.type].with_metadata(meta)
    data: pa.Table | pa.RecordBatchReader
    if isinstance(table, pa.Table):
        data = table.replace_schema_metadata(meta)
        paging = options.paging(partition.type, _body_bytes(table), table.num_rows)
        dictionary = options.dictionary(table.num_rows)
    else:
        # A stream is judged by its first row groups: a file of two or more is big.
        stream = iter(table)
        head = list(itertools.islice((t for t in stream if t.num_rows), 2))
        body = sum(_body_bytes(t) for t in head)
        rows = sum(t.num_rows for t in head)
        if len(head) > 1:
            body = max(body, options.paged_min_bytes)
        # The head's own rows: the page size follows their mean body.
        paging = options.paging(partition.type, body, rows)
        dictionary = options.dictionary(options.dictionary_min_rows if len(head) > 1 else rows)
        data = pa.RecordBatchReader.from_batches(schema, _one_batch_each(itertools.chain(head, stream)))
    sorting = [pq.SortingColumn(schema.get_field_index(c)) for c in SORT_KEYS[partition.type]]
    codecs, levels = options.compression(partition.type)
    return data, dict(
        compression=codecs,
        compression_level=levels or None,
        row_group_size=(
            options.group_rows(partition.type, table.num_rows, table.nbytes)
            if isinstance(table, pa.Table)
            else None  # a stream comes in row groups already (see merge_sorted)
        ),
        use_dictionary=dictionary,
        # Only the URL key's: the one the store's reads prune by (a file or row
        # group is a key range). The time's and request id's served only other
        # tools' pushdown, for ~250 bytes a file (footer and page headers).
        write_statistics=["url_key"],
        sorting_columns=sorting,
        # A partition file is small (tens of rows is typical): its footer is a
        # large part of it. The Arrow schema copy (~1.4 KB, base64) would add
        # to every file, and so would the page index, which only big files
        # need (see WriteOptions.paging); readers get the types back from the
        # Parquet schema (see read_table).
        store_schema=False,
        **paging,
    )


def _body_bytes(table: pa.Table) -> int:
    if BODY_COLUMN not in table.column_names:
        return 0
    return int(table.column(BODY_COLUMN).nbytes)


def _one_batch_each(tables: Iterable[pa.Table]) -> Iterator[pa.RecordBatch]:
    for table in tables:
        if table.num_rows:
            yield from table.combine_chunks().to_batches()


def row_groups(handle: pq.ParquetFile) -> Iterator[pa.Table]:
    """A file's row groups, one table each, in order."""
    for g in range(handle.metadata.num_row_groups):
        yield handle.read_row_group(g, use_threads=False)


def read_table(type: RecordType, handle: pq.ParquetFile) -> pa.Table:
    """A whole store file with the type's exact Arrow schema (see :func:`conform`)."""
    return conform(type, handle.read().replace_schema_metadata(None))


def schema_matches(type: RecordType, schema: pa.Schema) -> bool:
    """Whether a file's Arrow schema is the type's, up to large/small variants
    (a ``get`` file written before payload digests were stored matches too)."""
    import pyarrow as pa

    found = _normalised(schema.remove_metadata())
    expected = schemas()[type]
    if type is RecordType.GET and REF_COLUMN not in schema.names:  # written before references
        expected = pa.schema([f for f in expected if f.name != REF_COLUMN])
    if type is RecordType.GET and DIGEST_COLUMNS[0] not in schema.names:
        expected = pa.schema([f for f in expected if f.name not in DIGEST_COLUMNS])
    return found.equals(_normalised(expected))


def _normalised(schema: pa.Schema) -> pa.Schema:
    import pyarrow as pa

    fields: list[pa.Field[Any]] = []
    for f in schema:
        if pa.types.is_large_binary(f.type):
            f = f.with_type(pa.binary())
        elif pa.types.is_large_string(f.type):
            f = f.with_type(pa.string())
        fields.append(f)
    return pa.schema(fields)


def read_superseded(file: pq.ParquetFile, path: str) -> frozenset[str]:
    # The footer's key-value metadata, without building the Arrow schema.
    meta = file.metadata.metadata or {}
    raw = meta.get(SUPERSEDED_KEY)
    if raw is None:
        return frozenset()
    try:
        parts = json.loads(raw)
        return frozenset(str(uuid.UUID(p)) for p in parts)
    except (ValueError, TypeError) as exc:
        raise CorruptFileError(path, f"unreadable superseded list: {exc}") from None


def list_partition_files(
    backend: Backend, folder: str, type: RecordType, year: int, month: int, domain: str | None = None
) -> dict[str, list[StoredFile]]:
    """Every file of a month folder (or of one domain in it), grouped by domain."""
    out: dict[str, list[StoredFile]] = {}
    for info in backend.list_files(folder, "" if domain is None else f"{domain}."):
        parsed = parse_file_name(info.name)
        if parsed is None:
            continue
        domain, part = parsed
        partition = Partition(type, year, month, domain)
        stored = StoredFile(partition, part, f"{folder}/{info.name}", info.size, info.version)
        out.setdefault(domain, []).append(stored)
    return out


def visible_files(
    backend: Backend, files: Sequence[StoredFile], *, once: bool = False
) -> tuple[list[tuple[StoredFile, pq.ParquetFile]], list[StoredFile]]:
    """Open the visible files of one partition; also return the superseded ones.
    ``once``: each is to be read once (``Backend.open_parquet``).

    Raises ``FileNotFoundError`` if a listed file vanished (a compaction
    finished meanwhile): the caller lists again.
    """
    compacted = [f for f in files if f.part is None]
    superseded: frozenset[str] = frozenset()
    opened: list[tuple[StoredFile, pq.ParquetFile]] = []
    if compacted:
        handle = backend.open_parquet(compacted[0].path, once=once)
        superseded = read_superseded(handle, compacted[0].path)
        opened.append((compacted[0], handle))
    dead = [f for f in files if f.part is not None and f.part in superseded]
    for f in files:
        if f.part is not None and f.part not in superseded:
            opened.append((f, backend.open_parquet(f.path, once=once)))
    return opened, dead


def read_small_files(
    backend: LocalBackend,
    paths: Sequence[str],
    columns: Sequence[str] | None = None,
    *,
    missing_as_null: bool = False,
) -> pl.DataFrame:
    """Every row of these small local store files in one frame, with ``_file``
    (the store path) and ``_row`` (the row's number in its file).

    Each file is read whole and checked against both its checksums before it
    is decoded (polars does not check page CRCs): one read, from the same bytes.
    Raises ``FileNotFoundError`` if one is gone, :class:`CorruptFileError` if
    one is damaged.
    """
    import polars as pl  # 27 MiB and ~120 ms of import that lookups do not need
    import pyarrow as pa

    from web_index.storage.pages import CheckedFile

    sources: list[bytes] = []
    rows: list[int] = []
    for path in paths:
        data = backend.file_path(path).read_bytes()
        check_bytes(path, data)
        handle = CheckedFile(pa.BufferReader(data), path=path)
        rows.append(handle.metadata.num_rows)
        sources.append(data)
    if not sources:
        return pl.DataFrame()
    # Files of one month may differ by the digest columns (format 2 has none):
    # the first file's columns are read from all, digests (which no bulk reader
    # of rows needs) never unless asked for. A file without a column asked for
    # is an error, or with ``missing_as_null`` a column of nulls.
    schema = None if columns is not None else pl.scan_parquet(sources[0]).collect_schema()
    # A ``get`` file written before payload references has no such column (its
    # rows all hold their bodies): read with later files, its rows get nulls.
    refs = schema is not None and BODY_COLUMN in schema
    if refs and schema is not None:
        schema[REF_COLUMN] = pl.String
    scan = pl.scan_parquet(
        sources,
        schema=schema if refs else None,
        missing_columns="insert" if missing_as_null or refs else "raise",
        extra_columns="ignore",
    )
    wanted = list(columns) if columns is not None else scan.collect_schema().names()
    frame = scan.select([c for c in wanted if columns is not None or c not in DIGEST_COLUMNS]).collect()
    owners = pl.DataFrame({"_file": list(paths), "_n": rows}, schema={"_file": pl.String, "_n": pl.Int64})
    where = owners.select(
        pl.col("_file").repeat_by("_n").explode(), pl.int_ranges(0, "_n").explode().alias("_row")
    ).drop_nulls()
    return pl.concat([where, frame], how="horizontal")
