"""A flipped bit in a stored file is an error naming that file, or the right
answer: never a wrong one (issue 21, item 4).

Each case flips one bit of one file of a compacted partition (the data file,
its metadata file, the month key index), asks the same queries as on the
intact store, and asserts each batch either returns exactly the intact
answers or raises ``CorruptFileError`` naming the flipped file; the month
index is derived data, so damage to it must never even be an error. Before
checksums, 14 of 315 such flips answered wrongly.
"""

from __future__ import annotations

import functools
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from tests.factories import T0, attempt, judge_damage
from tests.servers import SeaweedFS
from web_index import FlushPolicy, WebIndex, WriteOptions
from web_index.errors import CorruptFileError
from web_index.models import PageKey, Query, SimplePageQuery, TimeAwarePageQuery
from web_index.storage.backends import S3Backend
from web_index.storage.indexes import _month_open
from web_index.storage.pages import _known
from web_index.storage.pages._reader import body_pages

URLS = [f"https://shop.example.com/p{i}" for i in range(5)]


def _fill(idx: WebIndex) -> list[Query]:
    keys: list[PageKey] = []
    for round in range(2):  # two flushes, then one compaction: one compacted file per type
        batch = []
        for i, url in enumerate(URLS):
            ts = T0 + timedelta(days=3 * i + round, hours=round)
            state = "timeout" if (i + round) % 4 == 3 else "success"
            batch.append(
                attempt(
                    url,
                    ts,
                    state=state,
                    hops=1 + i % 2,
                    calibre=10 + 20 * round,
                    body=f"<p>{url} {round}</p>".encode() * 20,
                )
            )
        keys += idx.insert_many(batch)
        idx.flush()
    assert idx.compact() == 2  # the get partition and its get-metadata one
    queries: list[Query] = list(keys)
    for url in URLS:
        for type in ("get", "get-metadata"):
            queries.append(SimplePageQuery(url=url, type=type))
            queries.append(SimplePageQuery(url=url, type=type, calibre=30))
            queries.append(
                TimeAwarePageQuery(
                    url=url,
                    type=type,
                    timestamp=T0 + timedelta(days=4),
                    not_before=T0,
                    not_after=T0 + timedelta(days=9),
                )
            )
    queries.append(SimplePageQuery(url="https://shop.example.com/absent"))
    return queries


def _flips(size: int, footer: int, rng: random.Random, sample: int) -> Iterator[tuple[int, int]]:
    """Every byte of the footer and trailer, and ``sample`` bytes before it; one random bit each."""
    body = range(size - footer)
    for pos in sorted(rng.sample(body, min(sample, len(body)))) + list(range(size - footer, size)):
        yield pos, rng.randrange(8)


def _footer_size(data: bytes) -> int:
    return int.from_bytes(data[-8:-4], "little") + 8


def _replace(path: Path, data: bytes) -> None:
    # A new file renamed into place, as the store writes: a new version for every cache.
    tmp = path.with_suffix(".flip")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _store(root: Path, paged: bool = False) -> tuple[WebIndex, list[Query], list[object]]:
    # paged: the get file written with body pages and the page index however
    # small, so that its bodies are read by page (storage/pages/_reader.py).
    options = WriteOptions(paged_min_bytes=0, body_page_bytes=256) if paged else None
    idx = WebIndex(root, policy=FlushPolicy(compact_parts=0, max_age_s=10**6), write_options=options)
    queries = _fill(idx)
    expected = idx.query(queries)
    assert sum(r is not None for r in expected) >= len(queries) - 6  # a store worth damaging
    return idx, queries, expected


@pytest.mark.parametrize("kind", ["get", "get-paged", "get-metadata", "index"])
def test_a_flipped_bit_in_a_local_file_is_an_error_naming_it_or_the_right_answer(
    tmp_path: Path, kind: str
) -> None:
    paged_kind = kind == "get-paged"
    idx, queries, expected = _store(tmp_path / "store", paged=paged_kind)
    kind = kind.removesuffix("-paged")
    if kind == "index":
        target = next((tmp_path / "store" / "_index" / "get").rglob("*.parquet"))
    else:
        target = next(p for p in (tmp_path / "store" / kind).rglob("*.parquet"))
    if kind == "get":
        handle = idx._store.backend.open_parquet(target.relative_to(tmp_path / "store").as_posix())
        assert (body_pages(handle) is not None) == paged_kind
    rel = target.relative_to(tmp_path / "store").as_posix()
    data = target.read_bytes()
    rng = random.Random(f"flips-{kind}")
    outcomes = {"right": 0, "error": 0}
    try:
        for pos, bit in _flips(len(data), _footer_size(data), rng, sample=300):
            flipped = bytearray(data)
            flipped[pos] ^= 1 << bit
            _replace(target, bytes(flipped))
            _known.KNOWN.clear()  # what the intact file taught would hide a damaged offset index
            try:
                got = idx.query(queries)
            except CorruptFileError as exc:
                assert kind != "index", f"damage to the index (byte {pos}) must cost speed, not answers"
                assert exc.path == rel, f"byte {pos} bit {bit}: error names {exc.path}"
                outcomes["error"] += 1
            else:
                assert got == expected, f"byte {pos} bit {bit} of {rel}: a wrong answer"
                outcomes["right"] += 1
    finally:
        _replace(target, data)
        _month_open._OPEN.clear()
    assert idx.query(queries) == expected
    idx.close()
    if kind != "index":
        assert outcomes["error"] > 0.9 * sum(outcomes.values())  # checked, not merely lucky


def test_verify_reports_every_flipped_bit_that_queries_may_not_see(tmp_path: Path) -> None:
    # A flip in a page header field no reader needs still answers right; verify
    # reads every byte against the file's checksum and names the file.
    idx, _queries, _expected = _store(tmp_path / "store")
    target = next((tmp_path / "store" / "get").rglob("*.parquet"))
    rel = target.relative_to(tmp_path / "store").as_posix()
    data = target.read_bytes()
    assert idx.verify().ok
    rng = random.Random("verify")
    for pos in rng.sample(range(len(data)), 40):
        flipped = bytearray(data)
        flipped[pos] ^= 1 << rng.randrange(8)
        _replace(target, bytes(flipped))
        report = idx.verify()
        wheres = [p.where for p in report.problems]
        # The damaged file, then what cannot be matched while it is unreadable.
        assert wheres[0] == rel and all(w.startswith("get/2024/08/example.com") for w in wheres), pos
    _replace(target, data)
    assert idx.verify().ok
    idx.close()


def test_the_cli_names_a_damaged_file_in_one_line_with_exit_code_4(tmp_path: Path) -> None:
    root = tmp_path / "store"
    idx, _queries, _expected = _store(root)
    idx.close()
    target = next((root / "get").rglob("*.parquet"))
    data = bytearray(target.read_bytes())
    data[len(data) - 40] ^= 0x10  # in the footer: every reader of the file sees it
    _replace(target, bytes(data))
    (root / "_index").rename(tmp_path / "no-index")  # so that the query reads the file
    cli = str(Path(sys.executable).parent / "web-index")
    run = subprocess.run([cli, "query", "--store", str(root), URLS[0]], capture_output=True, text=True)
    rel = target.relative_to(root).as_posix()
    assert run.returncode == 4, run
    assert run.stderr.count("\n") == 1 and rel in run.stderr and "Traceback" not in run.stderr
    run = subprocess.run([cli, "verify", "--store", str(root)], capture_output=True, text=True)
    assert run.returncode == 3 and rel in run.stdout + run.stderr, run


@pytest.mark.parametrize("paged", [False, True])
def test_a_flipped_bit_in_an_s3_object_is_an_error_naming_it_or_the_right_answer(
    seaweed: SeaweedFS, paged: bool
) -> None:
    loc = seaweed.new_store()
    idx, queries, expected = _store(loc, paged=paged)  # type: ignore[arg-type]
    backend = S3Backend(loc)
    month = "get/2024/08"
    name = next(f.name for f in backend.list_files(month) if f.name.endswith(".parquet"))
    path = f"{month}/{name}"
    data = backend.read_object(path)
    rng = random.Random("s3")
    outcomes = {"right": 0, "error": 0}
    for pos, bit in list(_flips(len(data), _footer_size(data), rng, sample=40))[::4]:
        flipped = bytearray(data)
        flipped[pos] ^= 1 << bit
        backend.put(path, bytes(flipped))
        _known.KNOWN.clear()
        fresh = WebIndex(loc)  # no cached listing or footer of the intact object
        try:
            ask = functools.partial(fresh.query, queries)
            judge_damage(ask, expected, path, outcomes, f"byte {pos} bit {bit}")
        finally:
            fresh.close()
    backend.put(path, data)
    assert outcomes["error"] > 0
    idx.close()


def test_a_footer_damaged_in_place_is_caught_by_a_process_that_read_it_before(tmp_path: Path) -> None:
    """A local store keeps the footers it checked while a file is that very file
    (inode, size, times): a byte changed in place, its modification time put
    back, is still a changed file (its ctime moved), so its footer is checked again."""
    idx, queries, expected = _store(tmp_path / "store")
    # A metadata file: a data file's records are read by their places (the capture index's
    # lines), which need no footer.
    target = next((tmp_path / "store" / "get-metadata").rglob("*.parquet"))
    rel = target.relative_to(tmp_path / "store").as_posix()
    data = target.read_bytes()
    before = target.stat()
    outcomes = {"right": 0, "error": 0}
    try:
        for pos in range(len(data) - _footer_size(data), len(data)):
            assert idx.query(queries) == expected  # the intact footer is read and kept
            kept = target.stat().st_ctime_ns
            with target.open("r+b") as fh:
                fh.seek(pos)
                fh.write(bytes([data[pos] ^ 0x10]))
            os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
            while target.stat().st_ctime_ns == kept:  # a change in the same clock tick: not seen
                time.sleep(0.001)
                os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
            ask = functools.partial(idx.query, queries)
            judge_damage(ask, expected, rel, outcomes, f"byte {pos} of {rel}")
            with target.open("r+b") as fh:
                fh.seek(pos)
                fh.write(data[pos : pos + 1])
            os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    finally:
        idx.close()
    assert outcomes["error"] > 0.9 * sum(outcomes.values())
