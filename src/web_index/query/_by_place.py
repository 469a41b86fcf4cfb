"""Answers by place: a winner's values from its capture line, its body from the
page the line names (``storage.indexes._capture_records``), with no row group
decoded. :mod:`web_index.query._results` reads the rest, and the small files a
batch reads whole, here given the bodies their rows refer to.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Set
from typing import TYPE_CHECKING, Any

from web_index.models import Page, RecordType, Response, from_us
from web_index.query._find import FileRows, Found
from web_index.query._plan import Plan
from web_index.query._pool import in_chunks
from web_index.storage import BODY_COLUMN, REF_COLUMN, Store, StoredCapture, stored_response

if TYPE_CHECKING:
    from web_index.query._results import Result

__all__ = ["FileKey", "answer_by_place", "payloads_by_place", "rows_by_place"]

FileKey = tuple[str, int, str]  # a compacted file's path, size and version

# Bodies read by place are spread over the reader threads from this many a thread (fewer
# cost more to hand over than they save), when their pages average this many bytes a body
# (or the store is remote): see _heavy.
_SPREAD_BODIES = 64
_SPREAD_BYTES = 8192
_SPREAD_SAMPLE = 256  # wants whose pages decide it


def answer_by_place(
    store: Store,
    plans: list[Plan],
    found: dict[int, Found],
    answers: list[Result | bool],
    read_whole: Callable[[dict[FileKey, int]], set[FileKey]],
) -> set[int]:
    """Answer the plans whose winner the month index found in a compacted file
    with a capture index: each row's line, and its body by its place, with no
    row group decoded (``storage.indexes._capture_records``). Return the plans
    answered; the others (no index, a row it cannot give) are read by row group,
    and those in the files ``read_whole`` names (given each file's winners) are
    read with their files: but for the winners whose lines refer to another
    month's payload, which are answered here."""
    by_file: dict[FileKey, list[tuple[int, Found, FileRows]]] = defaultdict(list)
    for i, f in found.items():
        src = f.source
        if src is not None and src.from_index and src.version and not plans[i].type.is_metadata:
            by_file[(src.path, src.size, src.version)].append((i, f, src))
    whole = read_whole({key: len(winners) for key, winners in by_file.items()})
    if not by_file:
        return set()
    files = {
        key: (plans[winners[0][0]].type, sorted({r for _i, _f, src in winners for r in src.rows}))
        for key, winners in by_file.items()
    }
    # Lines in this thread (Python's work under the GIL, which reader threads only contend
    # for), then the bodies, spread over the reader threads: their reads, zstd and SHA-1 let
    # each other run.
    lines = _lines(store, files, referring=whole)
    for key in whole:
        _keep_referring(lines, key, by_file[key])
    read_files = _bodies(store, lines)
    done: set[int] = set()
    for key, winners in by_file.items():
        rows_read = read_files.get(key)
        if rows_read is None:
            continue
        for i, f, src in winners:
            p, c = plans[i], f.candidate
            responses: list[Response] = []
            for n, r in enumerate(src.rows):
                got = rows_read.get(r)
                if got is None:
                    break
                line, response = got
                if (line.request_id, line.page, line.attempt_us, line.position) != (
                    c.request_id,
                    p.url_key,
                    c.ts_us,
                    n,
                ):
                    break
                responses.append(response)
            else:
                answers[i] = Page(
                    type=p.type,
                    url=responses[0].url,
                    timestamp=from_us(c.ts_us),
                    request_id=c.request_id,
                    responses=responses,
                )
                done.add(i)
            # Else read the older way, which tells a stale place from a changed file.
    return done


def rows_by_place(
    store: Store, files: dict[FileKey, tuple[RecordType, list[int]]]
) -> dict[FileKey, dict[int, tuple[StoredCapture, Response]]]:
    """The line and response of these rows of these files, read through their capture
    indexes; a file without one is left out, and so is a row it cannot give (no line, a
    place that does not hold its body)."""
    return _bodies(store, _lines(store, files))


_Lines = dict[FileKey, tuple[RecordType, dict[int, StoredCapture]]]


def _lines(
    store: Store, files: dict[FileKey, tuple[RecordType, list[int]]], referring: Set[FileKey] = frozenset()
) -> _Lines:
    """The lines of these rows of these files; of the files in ``referring``, only
    if their indexes say some of their rows refer to another month's payload (the
    others' first: an index that says so is how the store learns it has any)."""
    lines: _Lines = {}
    ordered = sorted(files.items(), key=lambda item: item[0] in referring) if referring else files.items()
    for key, (type, rows) in ordered:
        got = store.captures_by_row(type, *key, rows, if_referring=key in referring)
        if got is not None:
            lines[key] = (type, got)
    return lines


def _keep_referring(lines: _Lines, key: FileKey, winners: list[tuple[int, Found, FileRows]]) -> None:
    """Keep, of a file read whole, the lines of the winners that refer to another
    month's payload: those bodies are read by place whatever reads the rows, and a
    file whose winners all refer is then not read at all (a reference's row there
    is a line's worth of values, and polars would decode it only to be told where
    the body is)."""
    type, got = lines.pop(key, (RecordType.GET, {}))
    keep = {
        r
        for _i, _f, src in winners
        if any(c is not None and c.held is not None for c in map(got.get, src.rows))
        for r in src.rows
    }
    if keep:
        lines[key] = (type, {r: c for r, c in got.items() if r in keep})


def _bodies(store: Store, lines: _Lines) -> dict[FileKey, dict[int, tuple[StoredCapture, Response]]]:
    """The responses of these lines, their bodies read by their places."""
    # Bodies in their rows' order, which is their pages' (a page decompressed once for its
    # bodies); the lines came in theirs (SURT order).
    wanted = [
        (key[0], c)
        for key, (type, got) in lines.items()
        if type is RecordType.GET
        for _row, c in sorted(got.items())
    ]
    least = _SPREAD_BODIES if store.remote or _heavy(wanted) else len(wanted) + 1
    bodies = iter(in_chunks(store, store.bodies_by_place, wanted, least=least))
    out: dict[FileKey, dict[int, tuple[StoredCapture, Response]]] = {}
    for key, (type, got) in lines.items():
        rows_read = out[key] = {}
        for row, line in sorted(got.items()):
            data = next(bodies) if type is RecordType.GET else None
            if data is not None or type is not RecordType.GET:
                rows_read[row] = (line, stored_response(line, data))
    return out


def _heavy(wanted: list[tuple[str, StoredCapture]]) -> bool:
    """Whether decompressing is most of reading these bodies, worth spreading over threads:
    their pages average ``_SPREAD_BYTES`` a body (judged on an even sample of them). Small
    bodies sharing pages are Python's work under the GIL, which threads only fight over
    (10,000 latest lookups of one site's 72-byte bodies: 2-3% slower spread)."""
    if len(wanted) < 2 * _SPREAD_BODIES:
        return False  # too few to spread anyway
    sample = wanted[:: max(1, len(wanted) // _SPREAD_SAMPLE)]
    pages = {(path, c.held, c.body[0]): c.body[2] for path, c in sample if c.body is not None}
    return sum(pages.values()) >= _SPREAD_BYTES * len(sample)


def payloads_by_place(
    store: Store,
    plans: list[Plan],
    found: dict[int, Found],
    chains: dict[tuple[str, str], list[dict[str, Any]]],
) -> None:
    """Give the referring rows read whole from small files (``chains``) their
    payloads through their files' capture indexes: each line names the place of
    the payload its row refers to, one read, where resolving the reference
    would open the holder's file and search it."""
    wanted: dict[FileKey, dict[int, dict[str, Any]]] = defaultdict(dict)
    type = None
    for i, f in found.items():
        src = f.source
        if src is None or not src.from_index or not src.version or plans[i].type.is_metadata:
            continue
        for row in chains.get((src.path, f.candidate.request_id), []):
            if row.get(REF_COLUMN) is not None and "_row" in row:
                wanted[(src.path, src.size, src.version)][row["_row"]] = row
                type = plans[i].type
    if type is None:  # no referring row
        return
    got = rows_by_place(store, {key: (type, sorted(rows)) for key, rows in wanted.items()})
    for key, rows in wanted.items():
        read = got.get(key, {})
        for n, row in rows.items():
            line = read.get(n)
            if line is not None and (line[0].request_id, line[0].position) == (
                row["request_id"],
                row["chain_index"],
            ):
                row[BODY_COLUMN] = line[1].data
                row[REF_COLUMN] = None  # resolved
