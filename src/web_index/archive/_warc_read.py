"""Reading WARC files record by record, strictly (fastwarc underneath).

fastwarc (like warcio) is lenient: a record cut short comes back shorter, a
truncated last gzip member is dropped without a word. An archive importer
must not store half a page as if it were whole, so every record is checked
here: its block is as long as its ``Content-Length`` says, it has a
``WARC-Date``; and the end of a per-record gzip file is checked to hold
nothing but whole members. A problem is a :class:`~web_index.errors.WarcError` naming the
file and the byte offset of the record (in the compressed file for
per-record gzip; for a whole-file gzip, the position the reader had reached).

A file is a path or a seekable binary stream (a WARC member of a WACZ package,
read from the ZIP in place): the checks seek back to look at the start and at
the gzip members after a record.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO

from fastwarc.warc import ArchiveIterator, WarcRecordType

from web_index.errors import InvalidRecordError, WarcError
from web_index.models import parse_ts

__all__ = [
    "HEAD_BYTES",
    "WARC_SUFFIXES",
    "WarcRecord",
    "checked_date",
    "head_problem",
    "not_this_kind",
    "read_warc",
    "tail_problem",
    "warc_files",
]

WARC_SUFFIXES = (".warc", ".warc.gz", ".arc", ".arc.gz")  # what warc_files finds in folders
_LOOK_AHEAD = 64 << 20  # bytes read to check the members after a record
_TYPES = frozenset(
    {"warcinfo", "response", "resource", "request", "metadata", "revisit", "conversion", "continuation"}
)


@dataclass(frozen=True, slots=True)
class WarcRecord:
    """One whole, checked record: its WARC headers (names as written) and block."""

    path: str
    offset: int
    type: str
    headers: dict[str, str]
    date: datetime
    block: bytes

    def header(self, name: str) -> str | None:
        return self.headers.get(name)


def warc_files(paths: list[Path]) -> list[Path]:
    """The WARC (and ARC) files of ``paths``: files as given, folders searched (sorted)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(WARC_SUFFIXES))
        else:
            found.append(path)
    return found


def read_warc(path: Path | IO[bytes], name: str | None = None) -> Iterator[WarcRecord | WarcError]:
    """Each record of ``path`` (a file, or a seekable binary stream), or the
    problem where one is not whole.

    A record with a problem is yielded as the problem and reading goes on; a
    file whose end is cut off yields its problem last, in place of the record
    it cut. An unreadable file raises ``OSError``.
    """
    name = name or str(path)  # what messages call the file
    if (wrong := not_this_kind(path, name, "WARC")) is not None:
        yield wrong
        return
    last_offset = -1
    per_record_gzip = True
    with _opened(path) as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        records = iter(ArchiveIterator(fh, parse_http=False, record_types=WarcRecordType.any_type))
        held: WarcRecord | WarcError | None = None  # given out once the next record is found where it ends
        while True:
            try:
                record = next(records)
            except StopIteration:
                break
            except OSError as exc:
                if exc.errno is not None:  # the disk, not the format
                    raise
                if held is not None and gzipped and per_record_gzip:
                    cut = tail_problem(path, held.offset, members=2, name=name)
                    if cut is not None and cut.offset != held.offset:  # the next member is the damaged one
                        yield held
                        yield cut
                        return
                where = held.offset if held is not None else 0
                yield WarcError(
                    name,
                    where,
                    "no WARC record where this one ends: its Content-Length is wrong,"
                    f" or the file is damaged ({exc})",
                )
                return  # nothing after it can be trusted to start where it seems
            if held is not None:
                yield held
            offset = record.stream_pos
            per_record_gzip &= offset > last_offset
            last_offset = offset
            held = _checked(record, name, offset)
    # The last record is given out only if its gzip member ends the file
    # whole: a member cut in its trailer still inflates to the whole record,
    # but nothing vouches for its bytes (the CRC is what is missing).
    tail = (
        tail_problem(path, last_offset, name=name)
        if held is not None and gzipped and per_record_gzip
        else None
    )
    if held is not None and not (tail is not None and tail.offset == last_offset):
        yield held
    if tail is not None:
        yield tail


def record_at(path: Path, offset: int) -> WarcRecord | None:
    """The record that starts at ``offset`` of the local WARC file ``path`` (one
    gzip member of a per-record-gzip file, or a plain file's record), read again;
    ``None`` if none whole starts there."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            records = ArchiveIterator(fh, parse_http=False, record_types=WarcRecordType.any_type)
            record = next(iter(records), None)
            found = None if record is None else _checked(record, str(path), offset)
    except OSError:
        return None
    return found if isinstance(found, WarcRecord) else None


def _checked(record: object, name: str, offset: int) -> WarcRecord | WarcError:
    headers = dict(record.headers.items())  # type: ignore[attr-defined]
    block = record.reader.read()  # type: ignore[attr-defined]
    declared = headers.get("Content-Length")
    if declared is None or not declared.strip().isdigit():
        return WarcError(name, offset, "not a whole record (no Content-Length): a truncated or damaged file")
    if len(block) != int(declared):
        return WarcError(
            name,
            offset,
            f"record cut short (a truncated or damaged file): Content-Length says {int(declared)} bytes,"
            f" {len(block)} follow",
        )
    kind = headers.get("WARC-Type", "").strip().lower()
    if kind not in _TYPES:
        return WarcError(name, offset, f"unknown WARC-Type {headers.get('WARC-Type')!r}")
    date = checked_date(headers, name, offset)
    if isinstance(date, WarcError):
        return date
    return WarcRecord(name, offset, kind, headers, date, block)


@contextmanager
def _opened(source: Path | IO[bytes]) -> Iterator[IO[bytes]]:
    """A stream of ``source`` at its start: a path opened (and closed after), a
    stream as it is (its owner closes it)."""
    if isinstance(source, Path):
        with source.open("rb") as fh:
            yield fh
        return
    source.seek(0)
    yield source


# How each kind of file begins: its first record's first line.
_MAGIC = {"WARC": b"WARC/", "ARC": b"filedesc:"}
HEAD_BYTES = 512  # what head_problem needs of a file


def not_this_kind(path: Path | IO[bytes], name: str, kind: str) -> WarcError | None:
    """The problem of a file that does not begin as a ``kind`` ("WARC", "ARC")
    file does (inside its gzip when gzipped): any other file given by name (a
    JSONL file, a .wacz) is said to be that, not a record of a wrong length."""
    with _opened(path) as fh:
        head = fh.read(HEAD_BYTES)
    return head_problem(head, name, kind)


def head_problem(head: bytes, name: str, kind: str) -> WarcError | None:
    """:func:`not_this_kind` of a file's first :data:`HEAD_BYTES` bytes."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(31).decompress(head, 64)
        except zlib.error:
            return None  # damage the reader names, with its offset
    magic = _MAGIC[kind]
    if head.startswith(magic) or magic.startswith(head):  # an empty file holds no record: not wrong
        return None
    article = "an" if kind[0] in "AEIOU" else "a"
    zipped = (
        " (a zip file: a WACZ package is read as one when its name ends in .wacz)"
        if head[:4] == b"PK\x03\x04"
        else ""
    )
    return WarcError(name, 0, f"not {article} {kind} file: it does not begin with {magic.decode()}{zipped}")


def checked_date(headers: dict[str, str], name: str, offset: int) -> datetime | WarcError:
    """The record's ``WARC-Date``, or the problem with it."""
    raw_date = headers.get("WARC-Date")
    if raw_date is None:
        return WarcError(name, offset, "no WARC-Date")
    try:
        return parse_ts(raw_date.strip(), "WARC-Date")
    except InvalidRecordError as exc:
        return WarcError(name, offset, f"WARC-Date {raw_date!r}: {exc.problem}")


def tail_problem(
    path: Path | IO[bytes], last_offset: int, members: int | None = None, name: str | None = None
) -> WarcError | None:
    """From ``last_offset`` on, only whole gzip members, up to the end of the
    file (or ``members`` of them): a member cut short (which the reader drops
    silently) or bytes that are no member are a problem."""
    with _opened(path) as fh:
        fh.seek(last_offset)
        data = fh.read() if members is None else fh.read(_LOOK_AHEAD)
    capped = members is not None and len(data) == _LOOK_AHEAD  # a member may go on past what was read
    pos = checked = 0
    while pos < len(data) and (members is None or checked < members):
        checked += 1
        inflate = zlib.decompressobj(31)
        pending = data[pos:]
        try:
            while pending and not inflate.eof:
                inflate.decompress(pending, 1 << 20)  # output dropped, and capped
                pending = inflate.unconsumed_tail
        except zlib.error as exc:
            return WarcError(name or str(path), last_offset + pos, f"corrupt gzip member: {exc}")
        if not inflate.eof:
            if capped:
                return None
            return WarcError(
                name or str(path), last_offset + pos, "gzip member cut short: the file is truncated"
            )
        pos = len(data) - len(inflate.unused_data)
    return None
