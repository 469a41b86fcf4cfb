"""WARC/1.1 records of stored responses, built one way for the export and the
server's Resource API.

A capture's ``response`` record holds the status line, the header fields as
an HTTP message carrying the stored body must have them (``wire_headers``)
and the body, dated when the response arrived, with its payload and block
digests. Its id is derived from the attempt's request id and the response's
position in the chain, so whoever writes the record of a capture (an export,
the Resource API) gives it the same id, and an import stores it once.

Records are written as their bytes (:func:`warc_record`), not through
fastwarc's record object, which reads them: a record is nine header lines and
its block, and building fastwarc's object, setting its fields and writing it
out cost 20 us of a Resource answer where the lines cost 8
(docs/performance.md, "A record as its bytes").
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import NamedTuple

from web_index.archive._http import status_line, wire_headers
from web_index.models import Response, payload_sha1, sha1_text
from web_index.urls import target_uri

__all__ = [
    "BuiltResponse",
    "capture_ident",
    "record_id",
    "response_record",
    "warc_date",
    "warc_record",
]

_NAMESPACE = uuid.UUID("5f1d7c1e-2b8a-4d0e-9a57-7d3f0c6b9e21")  # of web-index's WARC record ids
_NAMESPACE_BYTES = _NAMESPACE.bytes
_REVISIT_PROFILE = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
_LINE_BREAKS = re.compile(r"[\r\n]+")


def capture_ident(request_id: str, position: int) -> str:
    """What names the records of the ``position``-th response of an attempt's chain."""
    return f"{request_id}/{position}"


def record_id(ident: str, kind: str) -> str:
    """The ``WARC-Record-ID`` of the ``kind`` record (``response``, ``request``…) of ``ident``:
    ``uuid.uuid5(_NAMESPACE, f"{kind}:{ident}")``, made without the ``UUID`` object (a
    Resource answer makes one: 2.7 against 1.2 us)."""
    name = f"{kind}:{ident}".encode()
    raw = bytearray(hashlib.sha1(_NAMESPACE_BYTES + name, usedforsecurity=False).digest()[:16])
    raw[6] = raw[6] & 0x0F | 0x50  # version 5
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    x = raw.hex()
    return f"<urn:uuid:{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}>"


def warc_date(moment: datetime) -> str:
    """WARC-Date: seconds, with the microseconds when there are any (WARC/1.1 allows a fraction)."""
    u = moment if moment.tzinfo is UTC else moment.astimezone(UTC)
    day = f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}"
    return day + (f".{u.microsecond:06d}Z" if u.microsecond else "Z")


class BuiltResponse(NamedTuple):
    """A response's record as a WARC file holds it uncompressed, its payload's
    SHA-1 (``None`` without a body), and whether it is a ``revisit`` record."""

    record: bytes
    sha1: bytes | None
    revisit: bool


def response_record(
    response: Response,
    *,
    warc_record_id: str,
    warcinfo_id: str | None = None,
    written: Mapping[bytes, tuple[str, str, str]] | None = None,
    sha1: bytes | None = None,
) -> BuiltResponse:
    """The ``response`` record of ``response``. A body whose payload is in
    ``written`` (the payloads a file holds already, by SHA-1: the target URI,
    WARC-Date and WARC-Record-ID of the record holding each) makes it a
    ``revisit`` record of that one instead, which holds the HTTP head only.
    ``sha1``: the body's SHA-1, when its caller has it checked already (a
    store's capture read by its place): not hashed again."""
    body = response.data
    headers = wire_headers(response.headers, body)
    head = b"".join(
        [_latin1(status_line(response.status_code)), *(_latin1(f"{n}: {v}") for n, v in headers), b"\r\n"]
    )
    if sha1 is None and body is not None:
        sha1 = payload_sha1(body)
    refers_to = written.get(sha1) if written is not None and sha1 is not None and body else None
    fields = [
        ("WARC-Date", warc_date(response.timestamp)),
        ("WARC-Target-URI", target_uri(response.request_url)),
    ]
    if warcinfo_id is not None:
        fields.append(("WARC-Warcinfo-ID", warcinfo_id))
    fields.append(("Content-Type", "application/http; msgtype=response"))
    if sha1 is not None:
        fields.append(("WARC-Payload-Digest", sha1_text(sha1)))
    if refers_to:
        fields += [
            ("WARC-Profile", _REVISIT_PROFILE),
            ("WARC-Refers-To-Target-URI", refers_to[0]),
            ("WARC-Refers-To-Date", refers_to[1]),
            # The URI and date may name several captures (two fetches in one microsecond): the id, one.
            ("WARC-Refers-To", refers_to[2]),
        ]
        return BuiltResponse(warc_record("revisit", warc_record_id, fields, head), sha1, True)
    return BuiltResponse(warc_record("response", warc_record_id, fields, head, body or b""), sha1, False)


def warc_record(kind: str, warc_record_id: str, fields: Iterable[tuple[str, str]], *block: bytes) -> bytes:
    """A WARC/1.1 record of ``kind`` (``response``, ``request``…) as a file holds
    it uncompressed: ``WARC-Type`` and ``WARC-Record-ID`` (``<urn:uuid:…>``), the
    header ``fields`` in order, the ``WARC-Block-Digest`` and ``Content-Length``
    of ``block`` (its parts, joined: a large body is hashed where it lies), then
    the block. A run of line breaks in a value becomes a space (fastwarc's records
    made CRLF a space and dropped a lone CR): a value cannot add a field. Values
    are written in UTF-8, which WARC/1.1 allows; one that is not text (a lone
    surrogate) is an error, never bytes a reader cannot decode."""
    digest = hashlib.sha1(usedforsecurity=False)
    for part in block:
        digest.update(part)
    size = sum(len(part) for part in block)
    head = [
        ("WARC-Type", kind),
        ("WARC-Record-ID", warc_record_id),
        *fields,
        ("WARC-Block-Digest", sha1_text(digest.digest())),
        ("Content-Length", str(size)),
    ]
    text = "".join(["WARC/1.1\r\n", *(f"{name}: {value}\r\n" for name, value in head), "\r\n"])
    if text.count("\n") != len(head) + 2 or text.count("\r") != len(head) + 2:  # a value broke its line
        text = "".join(["WARC/1.1\r\n", *(f"{n}: {_LINE_BREAKS.sub(' ', v)}\r\n" for n, v in head), "\r\n"])
    return b"".join([text.encode(), *block, b"\r\n\r\n"])


def _latin1(line: str) -> bytes:
    """A line of the HTTP head as the wire has it: Latin-1, which import reads
    back exactly; a character beyond it (only a hand-made record has one) in UTF-8."""
    try:
        return line.encode("latin-1") + b"\r\n"
    except UnicodeEncodeError:
        return line.encode("utf-8", "surrogateescape") + b"\r\n"
