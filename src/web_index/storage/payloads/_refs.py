"""Payload references: a ``get`` row whose body another row holds.

A response whose payload (by SHA-256) is already stored in its domain is
written by compaction with an empty ``data`` and, in ``payload_ref``, the
identity of the row that holds the payload (``storage.payloads._sharing``)::

    <attempt_us> <request_id> <chain_index> <url_key>

the holder's attempt start (microseconds), request id, position in its chain
and URL key: its sort key, so that it is found in its compacted file (of the
same type and domain, in the month of its attempt) by the ``url_key``
statistics of the row groups, without an index. A holder always holds its
body (never a reference itself), is always in a compacted file, and is never
rewritten as a reference: so a reference stays true for good, whatever is
compacted later.

Reading resolves a reference to the holder's body, checked against the
holder's own SHA-1 and the referring row's: a holder that is missing, is a
reference, or holds other bytes is a :class:`CorruptFileError` naming both
records. Never a wrong or an empty body.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from web_index._retry import retrying
from web_index.errors import CorruptFileError
from web_index.models import RecordType, from_us, payload_sha1
from web_index.storage._layout import Partition
from web_index.storage._schema import BODY_COLUMN, DIGEST_COLUMNS, REF_COLUMN
from web_index.storage.backends import Backend, FileInfo
from web_index.urls import domain_of

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from web_index.storage.pages import BodyPlace

__all__ = [
    "Holder",
    "Wanted",
    "holder_places",
    "holder_ref",
    "locate_holders",
    "parse_ref",
    "read_payloads",
    "resolve_rows",
    "resolve_table",
]

_TRIES = 8  # a holder's file replaced this often while it was read (compactions) is an error
_KEYS = ["url_key", "attempt_timestamp", "request_id", "chain_index"]


class Holder(NamedTuple):
    """The row a reference names."""

    url_key: str
    attempt_us: int
    request_id: str
    chain_index: int

    @property
    def path(self) -> str:
        """Its compacted file: the ``get`` partition of its attempt's month and domain."""
        start = from_us(self.attempt_us)
        return Partition(RecordType.GET, start.year, start.month, domain_of(self.url_key)).compacted_path


class Wanted(NamedTuple):
    """A reference to resolve: its text, the referring row's SHA-1 (if known) and
    how to name that row in an error."""

    ref: str
    sha1: bytes | None
    label: str


def holder_ref(url_key: str, attempt_us: int, request_id: str, chain_index: int) -> str:
    """The ``payload_ref`` naming this row."""
    return f"{attempt_us} {request_id} {chain_index} {url_key}"


def parse_ref(ref: str) -> Holder | None:
    """The holder a ``payload_ref`` names, or ``None`` for a malformed one."""
    parts = ref.split(" ", 3)
    if len(parts) != 4 or not parts[0].isdigit() or not parts[2].isdigit():
        return None
    return Holder(parts[3], int(parts[0]), parts[1], int(parts[2]))


def locate_holders(handle: pq.ParquetFile, holders: Iterable[Holder]) -> dict[Holder, tuple[int, int]]:
    """Where each of ``holders`` is in this open file: (row group, row in it).
    Only the row groups whose ``url_key`` range holds one are read, key columns only."""
    by_key: dict[str, list[Holder]] = defaultdict(list)
    for h in holders:
        by_key[h.url_key].append(h)
    meta = handle.metadata
    key_at = handle.schema_arrow.get_field_index("url_key")
    out: dict[Holder, tuple[int, int]] = {}
    for g in range(meta.num_row_groups):
        stats = meta.row_group(g).column(key_at).statistics
        low = stats.min if stats is not None and stats.has_min_max else None
        high = stats.max if stats is not None and stats.has_min_max else None
        if low is not None and high is not None:
            keys = [k for k in by_key if low <= k <= high]
        else:
            keys = list(by_key)
        if not keys:
            continue
        table = handle.read_row_group(g, columns=_KEYS, use_threads=False)
        found = _rows_of(table, {h for k in keys for h in by_key[k]})
        out.update((h, (g, row)) for h, row in found.items())
    return out


def _rows_of(table: pa.Table, wanted: Collection[Holder]) -> dict[Holder, int]:
    """The row of ``table`` (its key columns) that each of ``wanted`` is, if there."""
    import pyarrow as pa

    keys = table.select(_KEYS)
    keys = keys.set_column(1, "attempt_timestamp", keys.column(1).cast(pa.int64()))
    out: dict[Holder, int] = {}
    for row, values in enumerate(zip(*(c.to_pylist() for c in keys.columns), strict=True)):
        h = Holder(*values)
        if h in wanted:
            out[h] = row
    return out


def holder_places(
    backend: Backend,
    handle: pq.ParquetFile,
    path: str,
    refs: Mapping[int, str],
    seen: dict[str, FileInfo] | None = None,
    own: tuple[pa.Table, Sequence[BodyPlace | None]] | None = None,
    sizes: Sequence[int | None] | None = None,
) -> dict[int, tuple[BodyPlace, str | None]]:
    """Where the payload each referring row of the file ``handle`` (at ``path``)
    names is, for its capture line: the holder's body place, and the month
    (``yyyy/mm``) of the holder's file when it is not this one. A reference whose
    holder cannot be placed is left out (its line then has no place: reading it
    resolves the reference, or fails naming the records). ``seen`` gets each
    other holder file's version as it was before it was read: a place learnt from
    a file compacted again since is out of date (``refresh_held_places``).
    ``own``: the file's rows and their places, when its writer has them in hand: a
    holder in this file is then found there, the file not read for it; ``sizes``: the file's
    bodies' lengths, row by row, when its writer has those only: a holder in this file is placed
    from them, its page not decompressed (:func:`~web_index.storage.pages.body_places`)."""
    from web_index.storage.pages import body_places

    by_file: dict[str, dict[Holder, list[int]]] = defaultdict(lambda: defaultdict(list))
    for row, ref in refs.items():
        holder = parse_ref(ref)
        if holder is not None:
            by_file[holder.path][holder].append(row)
    out: dict[int, tuple[BodyPlace, str | None]] = {}
    for where, holders in by_file.items():
        if where == path and own is not None:
            table, own_places = own
            for h, row in _rows_of(table, holders).items():
                place = own_places[row]
                if place is not None:
                    out.update((referring, (place, None)) for referring in holders[h])
            continue
        try:
            if seen is not None and where != path:
                seen[where] = backend.file_info(where, fresh=True)
            source = handle if where == path else backend.open_parquet(where)
            found = locate_holders(source, holders)
            groups: dict[int, list[BodyPlace | None] | None] = {}
            known = _group_sizes(source, sizes) if where == path and sizes is not None else None
            for h, (g, row) in found.items():
                if g not in groups:
                    groups[g] = body_places(source, g, None if known is None else known(g))
                places = groups[g]
                place = None if places is None else places[row]
                if place is None:
                    continue
                held = None if where == path else "/".join(where.split("/")[1:3])
                for referring in holders[h]:
                    out[referring] = (place, held)
        except (CorruptFileError, FileNotFoundError, OSError):
            continue  # read by resolving the reference, which names what is wrong
    return out


def _group_sizes(
    handle: pq.ParquetFile, sizes: Sequence[int | None]
) -> Callable[[int], Sequence[int | None]]:
    """The lengths of row group ``g``'s bodies, out of the whole file's ``sizes``."""
    meta = handle.metadata
    starts = [0, *itertools.accumulate(meta.row_group(g).num_rows for g in range(meta.num_row_groups))]
    return lambda g: sizes[starts[g] : starts[g + 1]]


def read_payloads(backend: Backend, wanted: Iterable[Wanted]) -> dict[str, bytes]:
    """The payload each reference names, by its text; a reference that does not
    resolve to the body its row's digest says is a :class:`CorruptFileError`."""
    by_file: dict[str, dict[Holder, list[Wanted]]] = defaultdict(lambda: defaultdict(list))
    for w in wanted:
        holder = parse_ref(w.ref)
        if holder is None:
            raise CorruptFileError(w.label, f"its payload reference {w.ref!r} is malformed")
        by_file[holder.path][holder].append(w)
    out: dict[str, bytes] = {}
    for path, holders in by_file.items():

        def read(path: str = path, holders: Mapping[Holder, list[Wanted]] = holders) -> dict[str, bytes]:
            return _read_file_payloads(backend, path, holders)

        out.update(
            retrying(
                read,
                tries=_TRIES,
                on=(FileNotFoundError,),
                gave_up=f"{path} kept changing while payloads were read from it; try again",
            )
        )
    return out


def _read_file_payloads(
    backend: Backend, path: str, holders: Mapping[Holder, list[Wanted]]
) -> dict[str, bytes]:
    from web_index.storage.pages import read_group

    try:
        handle = backend.open_parquet(path)
    except FileNotFoundError:
        try:
            backend.file_info(path)
        except FileNotFoundError:  # not a compaction's replacement: gone for good
            raise _unresolved(path, holders, set(holders), "is not stored") from None
        raise
    places = locate_holders(handle, holders)
    missing = set(holders) - set(places)
    if missing:
        raise _unresolved(path, holders, missing, "is not in the file")
    by_group: dict[int, list[Holder]] = defaultdict(list)
    for h, (g, _row) in places.items():
        by_group[g].append(h)
    out: dict[str, bytes] = {}
    for g, members in sorted(by_group.items()):
        rows = [places[h][1] for h in members]
        table, paged = read_group(handle, g, rows)
        refs = table.column(REF_COLUMN).to_pylist() if REF_COLUMN in table.column_names else None
        sha1s = (
            table.column(DIGEST_COLUMNS[0]).to_pylist() if DIGEST_COLUMNS[0] in table.column_names else None
        )
        for h in members:
            row = places[h][1]
            body = paged[row] if paged is not None else table.column(BODY_COLUMN)[row].as_py()
            if (refs is not None and refs[row] is not None) or body is None:
                raise _unresolved(path, holders, {h}, "holds no body")
            got = payload_sha1(body)
            for w in holders[h]:
                if (sha1s is not None and sha1s[row] != got) or (w.sha1 is not None and w.sha1 != got):
                    raise _unresolved(path, holders, {h}, "holds another payload")
                out[w.ref] = body
    return out


def _unresolved(
    path: str, holders: Mapping[Holder, list[Wanted]], which: set[Holder], why: str
) -> CorruptFileError:
    h = min(which)
    w = holders[h][0]
    record = f"record {h.request_id} (response {h.chain_index})"
    return CorruptFileError(path, f"{record}, which {w.label} refers to for its payload, {why}")


def resolve_rows(backend: Backend, rows: Iterable[dict[str, Any]]) -> None:
    """Give every row (a ``get`` row as a dict) that refers to its payload the
    payload, in place."""
    referring = [r for r in rows if r.get(REF_COLUMN) is not None]
    if not referring:
        return
    bodies = read_payloads(
        backend,
        (Wanted(r[REF_COLUMN], r.get(DIGEST_COLUMNS[0]), _label(r)) for r in referring),
    )
    for r in referring:
        r[BODY_COLUMN] = bodies[r[REF_COLUMN]]


def resolve_table(backend: Backend, table: pa.Table) -> pa.Table:
    """``table`` (``get`` rows) with every referring row's body in place."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if REF_COLUMN not in table.column_names or table.column(REF_COLUMN).null_count == table.num_rows:
        return table
    refs: list[str | None] = table.column(REF_COLUMN).to_pylist()
    at = [i for i, ref in enumerate(refs) if ref is not None]
    picked = table.select(["request_id", "chain_index", DIGEST_COLUMNS[0]]).take(pa.array(at)).to_pylist()
    wanted = [
        Wanted(ref, p[DIGEST_COLUMNS[0]], _label(p))
        for p, ref in zip(picked, (refs[i] for i in at), strict=True)
        if ref is not None
    ]
    bodies = read_payloads(backend, wanted)
    column = table.column(BODY_COLUMN).combine_chunks()
    mask = pc.is_valid(table.column(REF_COLUMN).combine_chunks())
    payloads = pa.array([bodies[w.ref] for w in wanted], type=column.type)
    body_at = table.schema.get_field_index(BODY_COLUMN)
    resolved = pc.replace_with_mask(column, mask, payloads)
    return table.set_column(body_at, table.schema.field(body_at), resolved)


def _label(row: Mapping[str, Any]) -> str:
    return f"record {row.get('request_id')} (response {row.get('chain_index', 0)})"
