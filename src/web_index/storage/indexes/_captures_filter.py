"""A capture index's key filter: a Bloom filter of the SURT keys of its lines (10 bits a
key, 4 hashes from BLAKE2b-64, ~1% false positives), so that an exact lookup of a URL
the partition does not hold that month reads no block of the index (``_captures_format``).
"""

from __future__ import annotations

import hashlib

__all__ = ["key_filter", "may_hold"]

_BITS_A_KEY = 10
_HASHES = 4


def key_filter(keys: set[bytes]) -> bytes:
    """A Bloom filter of ``keys``: ~10 bits a key, 4 bits set each (~1% false positives)."""
    bits = max(64, -(-len(keys) * _BITS_A_KEY // 8) * 8)
    table = bytearray(bits // 8)
    for key in keys:
        h1, h2 = _hashes(key)
        for i in range(_HASHES):
            bit = (h1 + i * h2) % bits
            table[bit >> 3] |= 1 << (bit & 7)
    return bytes(table)


def may_hold(table: bytes, key: bytes) -> bool:
    """Whether ``key`` may be one of the keys the filter ``table`` was made of (never
    ``False`` for one of them; an empty table may hold anything)."""
    bits = 8 * len(table)
    if not bits:
        return True
    h1, h2 = _hashes(key)
    for i in range(_HASHES):  # a loop, not all(...): a lookup asks this of every month
        bit = (h1 + i * h2) % bits
        if not table[bit >> 3] >> (bit & 7) & 1:
            return False
    return True


def _hashes(key: bytes) -> tuple[int, int]:
    h = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")
    return h & 0xFFFFFFFF, (h >> 32) | 1
