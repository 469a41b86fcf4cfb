"""Bounded content decoding and charset handling."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web_index.fetch import decode_body
from web_index.fetch._charset import charset_from_content_type, sniff_meta_charset
from web_index.fetch._decode import BoundedDecoder
from web_index.fetch._errors import DecompressionBombError


def decode_all(
    data: bytes, encoding: str | None, limit: int = 10**6, ratio: float = 1000, chunk: int = 7
) -> bytes:
    decoder = BoundedDecoder(encoding, limit, ratio)
    return b"".join(decoder.feed(data[i : i + chunk]) for i in range(0, len(data), chunk))


@given(st.binary(max_size=5000), st.integers(1, 300))
def test_gzip_round_trips_in_any_chunking(data: bytes, chunk: int) -> None:
    assert decode_all(gzip.compress(data), "gzip", chunk=chunk) == data


@given(st.binary(max_size=5000))
def test_deflate_zlib_and_raw_both_decode(data: bytes) -> None:
    assert decode_all(zlib.compress(data), "deflate") == data
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert decode_all(raw.compress(data) + raw.flush(), "deflate") == data


def test_stacked_encodings_and_concatenated_members() -> None:
    data = b"hello " * 100
    assert decode_all(gzip.compress(gzip.compress(data)), "gzip, gzip") == data
    assert decode_all(gzip.compress(b"a") + gzip.compress(b"b"), "gzip") == b"ab"


def test_identity_and_unknown_encodings_pass_through() -> None:
    assert decode_all(b"plain", None) == b"plain"
    assert decode_all(b"plain", "identity") == b"plain"
    decoder = BoundedDecoder("br", 100, 10)
    assert decoder.feed(b"\x1b\x00") == b"\x1b\x00" and decoder.undecoded == "br"


def test_size_limit_stops_a_bomb_early() -> None:
    bomb = gzip.compress(b"\0" * 5_000_000)
    decoder = BoundedDecoder("gzip", 100_000, 10**9)
    with pytest.raises(DecompressionBombError):
        decoder.feed(bomb)
    assert decoder.produced <= 100_001


def test_ratio_limit() -> None:
    bomb = gzip.compress(b"\0" * 3_000_000)
    with pytest.raises(DecompressionBombError, match="times"):
        decode_all(bomb, "gzip", limit=10**8, ratio=100, chunk=1000)


def test_corrupt_gzip_is_reported() -> None:
    with pytest.raises(DecompressionBombError, match="corrupt"):
        decode_all(b"\x1f\x8b\x08\x00garbage-garbage", "gzip")


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/html; charset=UTF-8", "utf-8"),
        ('text/html; charset="iso-8859-1"', "cp1252"),
        ("text/html; charset=shift_jis", "shift_jis"),
        ("text/html; charset=no-such-thing", None),
        ("text/html", None),
        (None, None),
    ],
)
def test_charset_from_content_type(content_type: str | None, expected: str | None) -> None:
    assert charset_from_content_type(content_type) == expected


def test_meta_and_bom_sniffing() -> None:
    assert (
        sniff_meta_charset(b'<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">')
        == "koi8-r"
    )
    text, codec = decode_body("hé".encode("utf-8-sig"), "text/html; charset=latin-1")
    assert (text, codec) == ("hé", "utf-8")
    text, codec = decode_body("hé".encode("utf-16"), None)
    assert text == "hé" and codec.startswith("utf-16")


def test_fallbacks() -> None:
    assert decode_body("é".encode(), None) == ("é", "utf-8")
    assert decode_body(b"caf\xe9", None) == ("café", "cp1252")
    assert decode_body(b"caf\xe9", "text/html; charset=utf-8")[0] == "caf\ufffd"


@given(st.binary(max_size=2000), st.one_of(st.none(), st.text(max_size=60)))
def test_decode_body_never_raises(body: bytes, content_type: str | None) -> None:
    text, codec = decode_body(body, content_type)
    assert isinstance(text, str) and codec


@pytest.mark.parametrize("chunk", [1024, 16 * 1024, 64 * 1024])
def test_a_bomb_is_refused_before_it_inflates_past_the_ratio(chunk: int) -> None:
    """Output never runs ahead of what the ratio allows for the input read so far
    (past the first MiB): a 100 MB-of-zeros bomb costs a few MiB, not the 32 MiB cap."""
    bomb = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    data = bomb.compress(b"\0" * 100_000_000) + bomb.flush()
    decoder = BoundedDecoder("gzip", 32 * 1024 * 1024, 200)
    most = 0
    with pytest.raises(DecompressionBombError, match="times its compressed size"):
        for i in range(0, len(data), chunk):
            out = decoder.feed(data[i : i + chunk])
            most = max(most, len(out))
    allowed = max(1 << 20, 200 * decoder.consumed) + 1
    assert decoder.produced <= allowed, (decoder.produced, decoder.consumed)
    assert decoder.produced <= max(1 << 20, 200 * chunk) + 1
    assert most <= allowed


def test_a_large_body_that_compresses_well_still_decodes() -> None:
    page = b"<tr><td>cell</td><td>another cell</td></tr>\n" * 120_000  # 5.3 MB, ~300x in gzip
    packed = gzip.compress(page)
    ratio = len(page) / len(packed)
    assert decode_all(packed, "gzip", limit=32 << 20, ratio=2 * ratio, chunk=64 * 1024) == page
    # Under the floor a ratio is not judged at all.
    small = b"a" * 900_000
    assert decode_all(gzip.compress(small), "gzip", limit=32 << 20, ratio=2, chunk=64 * 1024) == small
