"""A pack's compressed form: the same bytes back, and a damaged file is a
SearchError naming it that leaves no output behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.search.test_packs import T0
from web_index.errors import SearchError
from web_index.search import PageText, _compress, build_pack, compress_pack, decompress_pack, search_pack


@pytest.fixture
def compressed(tmp_path: Path) -> tuple[Path, Path]:
    pack = tmp_path / "p.db"
    texts = [
        PageText(url=f"https://s/{i}", title=f"page {i}", text=f"words {i} " * 200, fetched=T0)
        for i in range(300)
    ]
    build_pack(pack, "s", texts, watermark="w")
    return pack, tmp_path / "p.db.zst"


def test_round_trip_gives_the_same_bytes(compressed: tuple[Path, Path]) -> None:
    pack, packed = compressed
    written = compress_pack(pack, packed, level=5)
    assert written == packed.stat().st_size < pack.stat().st_size / 2
    back = packed.with_name("back.db")
    assert decompress_pack(packed, back) == pack.stat().st_size
    assert back.read_bytes() == pack.read_bytes()
    assert search_pack(back, "words").total == 300
    assert sorted(p.name for p in pack.parent.iterdir()) == ["back.db", "p.db", "p.db.zst"]


def _damaged(packed: Path, how: str) -> bytes:
    data = packed.read_bytes()
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "last byte missing":  # all the data there, the checksum not
        return data[:-1]
    if how == "bit flipped":
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0x10]) + data[middle + 1 :]
    if how == "trailing bytes":
        return data + b"\0junk"
    if how == "two frames":
        return data + data
    if how == "empty":
        return b""
    return os.urandom(5000)  # not zstd at all


@pytest.mark.parametrize(
    "how",
    ["truncated", "last byte missing", "bit flipped", "trailing bytes", "two frames", "empty", "random"],
)
def test_a_damaged_file_is_a_search_error_and_leaves_no_output(
    compressed: tuple[Path, Path], how: str
) -> None:
    pack, packed = compressed
    compress_pack(pack, packed)
    packed.write_bytes(_damaged(packed, how))
    dst = pack.with_name("out.db")
    with pytest.raises(SearchError, match=str(packed)):
        decompress_pack(packed, dst)
    assert sorted(p.name for p in pack.parent.iterdir()) == ["p.db", "p.db.zst"]


@pytest.mark.parametrize("how", ["trailing bytes", "two frames"])
def test_bytes_after_the_frame_are_found_whatever_the_reads(
    compressed: tuple[Path, Path], how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 1-byte reads: the frame ends exactly at the end of a read, and what
    # follows comes in the next ones.
    pack, packed = compressed
    compress_pack(pack, packed)
    packed.write_bytes(_damaged(packed, how))
    monkeypatch.setattr(_compress, "_READ", 1)
    with pytest.raises(SearchError, match="after the end"):
        decompress_pack(packed, pack.with_name("out.db"))
    assert not pack.with_name("out.db").exists()


def test_a_failed_decompression_keeps_the_old_destination(compressed: tuple[Path, Path]) -> None:
    pack, packed = compressed
    packed.write_bytes(b"garbage")
    dst = pack.with_name("out.db")
    dst.write_bytes(b"previous")
    with pytest.raises(SearchError):
        decompress_pack(packed, dst)
    assert dst.read_bytes() == b"previous"
