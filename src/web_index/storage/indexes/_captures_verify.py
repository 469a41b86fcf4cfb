"""What ``verify`` says about a partition's capture index.

Apart from opening and lookup (``_captures``): queries never run this
check, which reads the whole index and the file it covers, and compares the
index's lines with the lines the file makes now: every response's values and
its body's place (each place learnt anew from the file's pages). An index
that is missing or unusable costs speed (a note); one that is used and
disagrees with its file gives wrong CDX answers (a problem).
"""

from __future__ import annotations

import msgspec

from web_index.errors import CorruptFileError
from web_index.storage._layout import Partition, StoredFile, compacted_file
from web_index.storage.backends import Backend
from web_index.storage.indexes._capture_lines import line_row
from web_index.storage.indexes._captures import capture_index_path, index_names, open_capture_index
from web_index.storage.indexes._captures_build import file_lines

__all__ = ["capture_index_findings"]


def capture_index_findings(
    backend: Backend, partition: Partition, files: list[StoredFile]
) -> list[tuple[bool, str, str]]:
    """``(is_problem, where, message)`` of the partition's capture index (a
    ``get`` or ``head`` partition with a compacted file; nothing otherwise)."""
    covered = compacted_file(files)
    if covered is None or partition.type.is_metadata:
        return []
    path = capture_index_path(partition, covered)
    folder, name = path.rsplit("/", 1)
    found: list[tuple[bool, str, str]] = []
    others = [n for n in index_names(backend, folder, partition.domain) if n != name]
    if others:
        found.append(
            (
                False,
                folder,
                f"{len(others)} capture index(es) of older files of {partition}:"
                " `web-index compact` removes them",
            )
        )
    fix = f"delete {path} (derived data) and run `web-index compact`"
    try:
        index = open_capture_index(backend, path, fresh=True)
    except FileNotFoundError:
        return [
            *found,
            (
                False,
                str(partition),
                "no capture index: CDX queries read the partition; `web-index compact` writes it",
            ),
        ]
    except (CorruptFileError, OSError) as exc:
        return [
            *found,
            (False, path, f"capture index unusable ({exc}): CDX queries read the partition; {fix}"),
        ]
    if not index.covers(covered):
        return [
            *found,
            (False, path, f"capture index describes another file than {covered.path}: not used; {fix}"),
        ]
    try:
        index.check()
        held = list(index.lines((b"",)))
        # Every row's line in one pass, a block decompressed once (row by row, a block a row).
        lined = dict(index.row_lines(range(index.meta.rows)))
        astray = sum(line_row(lined.get(r, b"- - {}")) != r for r in range(index.meta.rows))
    except CorruptFileError as exc:
        return [
            *found,
            (False, path, f"capture index unusable ({exc}): CDX queries read the partition; {fix}"),
        ]
    expected = file_lines(partition.type, backend.open_parquet(covered.path), backend, covered.path)
    if astray or index.meta.rows != len(expected):
        found.append(
            (
                True,
                path,
                f"capture index's row table disagrees with {covered.path} ({astray} row(s) name another"
                f" line, {index.meta.rows} rows for {len(expected)} captures): batches read from it"
                f" fall back, CDX answers are right; {fix}",
            )
        )
    if held != expected and [_unplaced(x) for x in held] == [_unplaced(x) for x in expected]:
        moved = sum(a != b for a, b in zip(held, expected, strict=True))
        found.append(
            (
                False,
                path,
                f"{moved} line(s) place their payload in another month's file as it was before it was"
                f" compacted again: those lookups take the slower path, answers are right; {fix}",
            )
        )
    elif held != expected:
        missing, extra = len(set(expected) - set(held)), len(set(held) - set(expected))
        found.append(
            (
                True,
                path,
                f"capture index disagrees with {covered.path}: {missing} capture(s) missing, {extra} not"
                f" in the file; CDX answers from it are wrong: {fix}",
            )
        )
    return found


def _unplaced(line: bytes) -> bytes:
    """A line without the place of a payload another month's file holds (storage/payloads/_refs.py)."""
    if b'"held":' not in line:
        return line
    key, stamp, rest = line.split(b" ", 2)
    fields = msgspec.json.decode(rest)
    for name in ("body", "codec", "held"):
        fields.pop(name, None)
    return b" ".join((key, stamp, msgspec.json.encode(fields)))
