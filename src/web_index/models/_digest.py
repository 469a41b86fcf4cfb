"""Payload digests: the SHA-1 and SHA-256 of a stored body, and their text forms.

A WARC file names a payload by ``sha1:`` and 32 base32 letters
(``WARC-Payload-Digest``), and so do CDX indexes; SHA-256 is the stronger hash
newer tools write, as ``sha256:`` and either base32 or hex. web-index stores both
hashes of every GET body (the bytes of ``Response.data``, as stored) and reads
every one of these forms.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import datetime
from typing import Any, Literal, NamedTuple

import msgspec

from web_index.errors import InvalidRecordError
from web_index.models._enums import RecordType
from web_index.models._queries import PageKey
from web_index.models._time import format_ts

__all__ = [
    "Digest",
    "DigestHit",
    "payload_digests",
    "payload_sha1",
    "sha1_base32",
    "sha1_text",
    "sha256_text",
]

Algorithm = Literal["sha1", "sha256"]
_SIZES: dict[str, int] = {"sha1": 20, "sha256": 32}


def payload_sha1(body: bytes) -> bytes:
    """The raw SHA-1 (20 bytes) of ``body``: what WARC and CDX name a payload by."""
    return hashlib.sha1(body, usedforsecurity=False).digest()  # a name, not a security use


def payload_digests(body: bytes) -> tuple[bytes, bytes]:
    """The raw SHA-1 (20 bytes) and SHA-256 (32 bytes) of ``body``."""
    return payload_sha1(body), hashlib.sha256(body).digest()


def sha1_text(raw: bytes) -> str:
    """A raw SHA-1 as WARC writes it: ``sha1:`` and 32 base32 letters."""
    return "sha1:" + sha1_base32(raw)


def sha1_base32(raw: bytes) -> str:
    """The 32 base32 letters of a raw SHA-1 (20 bytes), as a capture line and a CDX
    ``digest`` write it; :func:`base32_sha1` reads them back. The standard library's
    encoder walks the bytes in Python (2.7 us a digest, two a Resource answer): here
    two 80-bit numbers, ten bits a table lookup (1.0 us)."""
    if len(raw) != 20:
        return base64.b32encode(raw).decode()
    t = _PAIRS
    a, b = int.from_bytes(raw[:10], "big"), int.from_bytes(raw[10:], "big")
    return "".join(
        (
            t[a >> 70], t[a >> 60 & 1023], t[a >> 50 & 1023], t[a >> 40 & 1023],
            t[a >> 30 & 1023], t[a >> 20 & 1023], t[a >> 10 & 1023], t[a & 1023],
            t[b >> 70], t[b >> 60 & 1023], t[b >> 50 & 1023], t[b >> 40 & 1023],
            t[b >> 30 & 1023], t[b >> 20 & 1023], t[b >> 10 & 1023], t[b & 1023],
        )
    )  # fmt: skip


def base32_sha1(letters: str) -> bytes:
    """The 20 bytes of a SHA-1 written as 32 base32 letters (a capture line's
    digest: no ``sha1:``); the standard library's base32 decoder is 4x slower."""
    return int(letters.translate(_BASE32), 32).to_bytes(20, "big")


_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_BASE32 = str.maketrans(_LETTERS, "0123456789abcdefghijklmnopqrstuv")
_PAIRS = [a + b for a in _LETTERS for b in _LETTERS]  # ten bits: two letters


def sha256_text(raw: bytes) -> str:
    """A raw SHA-256 as ``sha256:`` and 64 hex digits."""
    return "sha256:" + raw.hex()


class Digest(NamedTuple):
    """A payload digest to look for: the algorithm and the raw hash."""

    algorithm: Algorithm
    raw: bytes

    @classmethod
    def parse(cls, text: str) -> Digest:
        """``sha1:`` or ``sha256:`` then base32 or hex (case-insensitive);
        anything else is an :class:`InvalidRecordError` naming ``digest``."""
        label, colon, value = text.strip().partition(":")
        algorithm = label.lower()
        if not colon or algorithm not in _SIZES:
            expected = "expected sha1:<base32> or sha256:<hex or base32>"
            raise InvalidRecordError("digest", f"{expected}, got {text!r}")
        size = _SIZES[algorithm]
        value = value.strip()
        raw: bytes | None = None
        try:
            if len(value) == 2 * size:
                raw = bytes.fromhex(value)
            else:
                padded = value.upper() + "=" * (-len(value) % 8)
                raw = base64.b32decode(padded)
        except (ValueError, binascii.Error):
            raw = None
        if raw is None or len(raw) != size:
            raise InvalidRecordError("digest", f"not a {algorithm} digest in hex or base32: {value!r}")
        return cls("sha1" if algorithm == "sha1" else "sha256", raw)

    def matches(self, body: bytes) -> bool:
        """Whether ``body`` has this digest (only this algorithm is computed)."""
        found = payload_sha1(body) if self.algorithm == "sha1" else hashlib.sha256(body).digest()
        return found == self.raw

    def __str__(self) -> str:
        return sha1_text(self.raw) if self.algorithm == "sha1" else sha256_text(self.raw)


class DigestHit(msgspec.Struct, frozen=True, kw_only=True):
    """One stored response whose body has the digest looked up, and where it is.

    ``url``, ``timestamp`` and ``request_id`` are the attempt's (a
    :class:`PageKey` of type ``get`` finds it); ``request_url``,
    ``chain_index`` and ``status_code`` the response's within its chain (a
    redirect's body has a digest too). ``location`` is the store path of the
    file holding it, or ``"buffer"`` if it is not flushed yet.
    """

    url: str
    timestamp: datetime
    request_id: str
    request_url: str
    chain_index: int
    status_code: int
    location: str
    sha1: str  # sha1:<base32>, as WARC writes it
    sha256: str  # sha256:<hex>

    @property
    def key(self) -> PageKey:
        """The :class:`PageKey` of the attempt that holds this response."""
        return PageKey(
            type=RecordType.GET, url=self.url, timestamp=self.timestamp, request_id=self.request_id
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f: getattr(self, f) for f in self.__struct_fields__}
        out["timestamp"] = format_ts(self.timestamp)
        return out
