"""What an import reads from a WARC record's fields: a revisit's target, the request id a
record is stored under, the fetcher a warcinfo names."""

from __future__ import annotations

import hashlib
import uuid
from datetime import UTC, datetime
from typing import NamedTuple

from web_index.archive._warc_read import WarcRecord
from web_index.errors import InvalidRecordError
from web_index.models import Digest, parse_when, to_us

__all__ = ["RevisitTarget", "names_record", "record_request_id", "revisit_target", "warcinfo_software"]

_TIME_BITS = 48  # a request id's leading bits: its time, the rest made of the record id


class RevisitTarget(NamedTuple):
    """What a revisit refers to: the capture of ``uri`` at ``date``; the record's id
    (``WARC-Refers-To``) when it gives one, and its payload's digest when it gives one."""

    uri: str
    date: datetime
    digest: Digest | None
    record_id: str | None


def revisit_target(record: WarcRecord) -> RevisitTarget | None:
    """What a revisit refers to, ``None`` without a target URI and date."""
    target = (record.header("WARC-Refers-To-Target-URI") or "").strip().strip("<>")
    when = record.header("WARC-Refers-To-Date")
    if not target or not when:
        return None
    try:
        at = parse_when(when, "WARC-Refers-To-Date")
    except InvalidRecordError:
        return None
    try:
        digest: Digest | None = Digest.parse(record.header("WARC-Payload-Digest") or "")
    except InvalidRecordError:
        digest = None  # nothing to check the nearest capture against
    return RevisitTarget(target, at, digest, (record.header("WARC-Refers-To") or "").strip() or None)


def record_request_id(record_id: str, date: datetime) -> str:
    """A UUIDv7 for a WARC record: its capture time in milliseconds, then 74
    bits of the SHA-256 of its ``WARC-Record-ID``: the same record, the same id."""
    digest = int.from_bytes(hashlib.sha256(record_id.encode()).digest()[:10], "big")
    ms = to_us(date) // 1000
    value = (ms & ((1 << _TIME_BITS) - 1)) << (128 - _TIME_BITS) | 0x7 << 76 | (digest >> 68 & 0xFFF) << 64
    value |= 0b10 << 62 | (digest & ((1 << 62) - 1))
    return str(uuid.UUID(int=value))


def names_record(request_id: str, record_id: str) -> bool:
    """Whether ``request_id`` is the one a record of ``record_id`` is stored under. Its time
    is left out: a ``WARC-Refers-To-Date`` may be less precise than the record's ``WARC-Date``."""
    rest = (1 << (128 - _TIME_BITS)) - 1
    try:
        found = uuid.UUID(request_id).int
    except ValueError:
        return False  # not an imported record's id
    epoch = datetime.fromtimestamp(0, tz=UTC)
    return found & rest == uuid.UUID(record_request_id(record_id, epoch)).int & rest


def warcinfo_software(block: bytes) -> tuple[str, str] | None:
    """The fetcher named by a warcinfo's ``software`` field ("Wget/1.21.3")."""
    for line in block.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "software" and value.strip():
            product = value.strip().split()[0]
            name, _, version = product.partition("/")
            return name[:200], (version or "unknown")[:200]
    return None
