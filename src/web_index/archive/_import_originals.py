"""The responses an import's bulk load took, found again by the revisits that name them.

A revisit names its original by URI, date and payload digest. While the load
that took the original has not committed, the store cannot answer for it, and a
revisit held back till then is stored by a load of its own, whose commit
rewrites every partition it lands in (their files were written by the first).
So the import remembers what each response it gave the load would be named by
(its URI and ``WARC-Payload-Digest``) and where its record is; a revisit of one
is stored with the same load: told its payload when it is in the original's
partition (``BulkLoad.add``'s ``payload_of``, no body read or written twice),
and when it is in another domain's (whose files never refer to this one's: it
gets a copy however it is stored), given the body of the original's record read
again from its file and decoded as it was. A revisit in another month of the
original's domain, or whose original is not found here (another load's, a
committed one's, a record in a WACZ or an ARC file, no digest), is held back as
before: a reference to the original once that is compacted.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

from web_index.archive._http import parse_http_response, store_body
from web_index.archive._warc_fields import RevisitTarget, record_request_id
from web_index.archive._warc_read import WarcRecord, record_at
from web_index.errors import InvalidRecordError
from web_index.models import Digest, from_us, to_us
from web_index.urls import key_and_domain

__all__ = ["Originals", "Taken", "body_again", "partition_of"]

_SAME_CAPTURE = timedelta(seconds=1)  # a WARC-Refers-To-Date is often to the second


class Taken(NamedTuple):
    """A response a bulk load took: its request id, time and partition, and where its record is."""

    rid: str
    date: datetime
    where: tuple[str, int, int]
    source: Path | None
    offset: int


# An entry a response: its request id's 16 bytes, its time (µs), its record's offset, its file's number.
_ENTRY = struct.Struct("<16sqqI")


class Originals:
    """What the load took since it last committed, by what a revisit names.

    Held compactly (~170 bytes a response: a 16-byte key and a 36-byte entry), as a commit
    comes every few GiB of bodies, some 400,000 responses of pages of ~10 KB."""

    def __init__(self) -> None:
        self._by: dict[bytes, bytes] = {}
        self._sources: list[Path | None] = []
        self._source_no: dict[Path | None, int] = {}

    def __bool__(self) -> bool:
        return bool(self._by)

    def clear(self) -> None:
        self._by.clear()

    def took(self, url: str, record: WarcRecord, rid: str, source: Path | None) -> None:
        """The load took ``record``'s response of ``url`` as ``rid``; ``source``: its local file."""
        try:
            digest = Digest.parse(record.header("WARC-Payload-Digest") or "")
        except InvalidRecordError:
            return  # no digest a revisit could name
        no = self._source_no.setdefault(source, len(self._sources))
        if no == len(self._sources):
            self._sources.append(source)
        entry = _ENTRY.pack(uuid.UUID(rid).bytes, to_us(record.date), record.offset, no)
        self._by[_key(url, digest)] = entry

    def find(self, refers: RevisitTarget) -> Taken | None:
        """The response a revisit refers to, if the load took it (its URI's partition, in its month)."""
        if refers.digest is None:
            return None
        entry = self._by.get(_key(refers.uri, refers.digest))
        if entry is None:
            return None
        rid, at_us, offset, no = _ENTRY.unpack(entry)
        date = from_us(at_us)
        if abs(date - refers.date) > _SAME_CAPTURE:
            return None
        try:
            where = partition_of(refers.uri, date)
        except InvalidRecordError:
            return None
        return Taken(str(uuid.UUID(bytes=rid)), date, where, self._sources[no], offset)


def _key(url: str, digest: Digest) -> bytes:
    """What a revisit names a response by (its URI and payload digest), in 16 bytes."""
    named = hashlib.blake2b(digest_size=16, usedforsecurity=False)
    for part in (url.encode(), digest.algorithm.encode(), digest.raw):
        named.update(len(part).to_bytes(4, "little"))
        named.update(part)
    return named.digest()


def partition_of(url: str, at: datetime) -> tuple[str, int, int]:
    """The domain and month whose partition a capture of ``url`` at ``at`` is stored in."""
    return key_and_domain(url)[1], at.year, at.month


def body_again(taken: Taken, max_bytes: int) -> bytes | None:
    """The body ``taken`` was stored with, from its record read again (``None`` if it cannot be)."""
    if taken.source is None:
        return None
    record = record_at(taken.source, taken.offset)
    if record is None:
        return None
    if record_request_id((record.header("WARC-Record-ID") or "").strip(), record.date) != taken.rid:
        return None  # the file changed since it was read
    try:
        _, wire, body = parse_http_response(record.block)
        return store_body(wire, body, max_bytes)[0]
    except InvalidRecordError:
        return None
