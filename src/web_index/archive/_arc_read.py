"""Reading ARC files (the Internet Archive's format before WARC), strictly.

warcio reads them (fastwarc does not) and gives each record as the WARC
record it would be. As with WARC files, a record shorter than its header
says, or a gzip member cut short at the end, is a problem naming the file
and offset, never a page stored half. ARC records carry no id, so each gets
one from its URL, date and content: importing the file again finds it.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from web_index.archive._warc_read import WarcRecord, checked_date, not_this_kind, tail_problem
from web_index.errors import WarcError

__all__ = ["read_arc"]

_NAMESPACE = uuid.UUID("3a0e6c52-8f0b-4f57-b1c3-0d6b2f1e9a44")  # of the ids given to ARC records


def read_arc(path: Path, name: str | None = None) -> Iterator[WarcRecord | WarcError]:
    """Each record of an ARC file (``.arc``, ``.arc.gz``) as a WARC record, or
    the problem where one is not whole."""
    name = name or str(path)
    if (wrong := not_this_kind(path, name, "ARC")) is not None:
        yield wrong
        return
    last = -1
    held: WarcRecord | None = None  # given out once its gzip member is known to be whole
    with path.open("rb") as fh:
        gzipped = fh.read(2) == b"\x1f\x8b"
        fh.seek(0)
        records = ArchiveIterator(fh, arc2warc=True)
        try:
            for record in records:
                body = record.raw_stream.read()  # first: warcio reads on lazily from the same file
                offset = records.get_record_offset()
                last = offset
                if held is not None:
                    yield held
                    held = None
                if record.raw_stream.limit:
                    missing = record.raw_stream.limit
                    cut = f"record cut short (a truncated or damaged file): {missing} bytes missing"
                    yield WarcError(name, offset, cut)
                    return
                headers = dict(record.rec_headers.headers)
                date = checked_date(headers, name, offset)
                if isinstance(date, WarcError):
                    yield date
                    continue
                http = record.http_headers.to_bytes() if record.http_headers is not None else b""
                block = http + body
                url = headers.get("WARC-Target-URI", "")
                identity = f"{url} {headers.get('WARC-Date')} {hashlib.sha256(block).hexdigest()}"
                headers["WARC-Record-ID"] = f"<urn:uuid:{uuid.uuid5(_NAMESPACE, identity)}>"
                held = WarcRecord(name, offset, record.rec_type, headers, date, block)
        except ArchiveLoadFailed as exc:
            if held is not None:
                yield held
            # A member cut short shows as a record that does not parse: name where it starts.
            where = tail_problem(path, max(last, 0), members=2, name=name) if gzipped else None
            if where is None or where.offset == max(last, 0):
                where = WarcError(name, max(last, 0), f"not an ARC record where one should start: {exc}")
            yield where
            return
    tail = tail_problem(path, max(last, 0), name=name) if gzipped else None
    if held is not None and not (tail is not None and tail.offset == held.offset):
        yield held
    if tail is not None:
        yield tail
