"""Identical payloads stored once (storage/_dedupe.py, _payload_refs.py).

The property: random stores with repeated payloads (same URL and across URLs,
across months and domains, some re-crawls compacted and some buffered) answer
every query, scan, capture lookup and WARC export exactly as the same records
stored without sharing (``WriteOptions(share_payloads=False)``), and verify
finds nothing wrong. Then what must never happen: a reference whose holder is
gone or damaged is an error naming both records, never an empty or wrong body.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from tests.factories import T0, attempt, rewrite_store_file
from web_index import FlushPolicy, WebIndex, WriteOptions
from web_index.archive import export_warcs, import_warcs
from web_index.errors import CorruptFileError
from web_index.ingest import new_request_id
from web_index.models import PageKey, RecordType, SimplePageQuery, TimeAwarePageQuery

URLS = [
    "https://a.example.com/x",
    "https://a.example.com/y",
    "https://www.a.example.com/z",  # the same registrable domain, another host
    "https://b.example.org/x",  # another domain: never shares with a.example.com
]
# Long enough to share, short (kept in its row), empty, and one of several pages.
PAYLOADS = [b"", b"tiny", b"A" * 300, b"<p>" + bytes(range(256)) * 20, b"<html>" + b"c" * 40_000]
TIMES = [T0 + timedelta(days=d, hours=h) for d, h in ((0, 0), (0, 1), (1, 0), (35, 0), (36, 5), (70, 0))]
NO_FLUSH = FlushPolicy(max_rows=10**9, compact_parts=0)

inserts = st.tuples(
    st.just("insert"),
    st.integers(0, len(URLS) - 1),
    st.integers(0, len(TIMES) - 1),
    st.integers(0, len(PAYLOADS) - 1),
    st.integers(1, 2),
)
steps = st.lists(
    st.one_of(inserts, inserts, inserts, st.just(("flush",)), st.just(("compact",))), max_size=24
)


def _apply(index: WebIndex, plan: list[tuple[Any, ...]], ids: list[str]) -> list[PageKey]:
    keys: list[PageKey] = []
    n = 0
    for step in plan:
        if step[0] == "insert":
            _, u, t, p, hops = step
            item = attempt(URLS[u], TIMES[t], hops=hops, body=PAYLOADS[p])
            keys += index.insert_many([item], request_ids=[ids[n]])
            n += 1
        elif step[0] == "flush":
            index.flush()
        else:
            index.compact()
    return keys


def _answers(index: WebIndex, keys: list[PageKey], out: Path) -> dict[str, Any]:
    queries: list[Any] = [SimplePageQuery(url=u) for u in URLS]
    queries += [TimeAwarePageQuery(url=u, timestamp=t) for u in URLS for t in TIMES]
    captures = {}
    for u in URLS:
        lines = list(index.captures(u))
        captures[u] = [(line.split(" ", 2)[:2], index.capture_response(line)) for line in lines]
    export_warcs(index, out)
    return {
        "queries": index.query(queries),
        "keys": index.query(keys),
        "scan": list(index.scan(RecordType.GET)),
        "captures": captures,
        "warc": _warc_records(out),
    }


def _warc_records(folder: Path) -> list[tuple[Any, ...]]:
    records = []
    for path in sorted(folder.glob("*.warc.gz")):
        with path.open("rb") as f:
            for r in ArchiveIterator(f):
                if r.rec_type == "warcinfo":
                    continue
                h = r.rec_headers
                payload = hashlib.sha1(r.content_stream().read()).hexdigest()
                records.append(
                    (r.rec_type, h.get_header("WARC-Target-URI"), h.get_header("WARC-Date"), payload)
                )
    return records


def _references(root: Path) -> int:
    total = 0
    for path in root.glob("get/*/*/*.parquet"):
        schema = pq.read_schema(path)
        if "payload_ref" in schema.names:
            total += pq.read_table(path, columns=["payload_ref"]).column(0).drop_null().__len__()
    return total


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_shared_payloads_answer_as_every_body_stored(tmp_path: Path, plan: list[tuple[Any, ...]]) -> None:
    shutil.rmtree(tmp_path, ignore_errors=True)
    ids = [new_request_id() for _ in plan]
    plan = [*plan, ("compact",)] if len(plan) % 3 else plan  # some end compacted, some buffered
    plain = WebIndex(tmp_path / "plain", policy=NO_FLUSH, write_options=WriteOptions(share_payloads=False))
    shared = WebIndex(tmp_path / "shared", policy=NO_FLUSH)
    with plain, shared:
        keys = _apply(plain, plan, ids)
        assert _apply(shared, plan, ids) == keys
        assert _answers(shared, keys, tmp_path / "out-shared") == _answers(
            plain, keys, tmp_path / "out-plain"
        )
        report = shared.verify()
        assert report.problems == []
        # A month compacted again has its payloads' places written again where other months name them.
        assert not [n for n in report.notes if "place their payload" in n.message]
    assert _references(tmp_path / "plain") == 0


def test_a_recrawl_stores_its_unchanged_payloads_once(tmp_path: Path) -> None:
    """Across months and within one: each long payload once per domain; the rest refer."""
    urls = [f"https://a.example.com/p{i}" for i in range(6)]
    body = {u: (u.encode() + b" ") * 100 for u in urls}
    with WebIndex(tmp_path / "s", policy=NO_FLUSH) as index:
        for day in (0, 1, 40):  # a crawl, a re-crawl the next day, one a month later
            index.insert_many([attempt(u, T0 + timedelta(days=day), body=body[u]) for u in urls])
            index.flush()
            index.compact()
        assert _references(tmp_path / "s") == 12
        pages = index.query([SimplePageQuery(url=u) for u in urls])
        assert [p.responses[0].data for p in pages] == [body[u] for u in urls]  # type: ignore[union-attr]
        # The month-later captures' lines name the first month's file as the payload's.
        lines = [line for u in urls for line in index.captures(u)]
        assert sum('"held":"2024/08"' in line for line in lines) == 6
        assert all(index.capture_response(line).data == body[u] for u in urls for line in index.captures(u))  # type: ignore[union-attr]
        assert index.verify().problems == []


def _two_months(root: Path) -> tuple[str, bytes]:
    url = "https://a.example.com/page"
    body = b"<html>" + b"payload " * 100
    with WebIndex(root, policy=NO_FLUSH) as index:
        for day in (0, 40):
            index.insert_many([attempt(url, T0 + timedelta(days=day), body=body)])
            index.flush()
            index.compact()
    assert _references(root) == 1
    return url, body


@pytest.mark.parametrize("damage", ["holder file gone", "holder row holds other bytes"])
def test_a_reference_without_its_payload_is_an_error_naming_both_records(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "s"
    url, body = _two_months(root)
    holder = root / "get/2024/08/example.com.parquet"
    table = pq.read_table(holder)
    if damage == "holder file gone":
        holder.unlink()
    else:  # a file rewritten by hand, checksums and all: only the digests can tell
        other = body.replace(b"payload", b"PAYLOAD")
        table = table.set_column(table.schema.get_field_index("data"), "data", [[other]])
        rewrite_store_file(holder, table)
    with WebIndex(root, read_only=True) as index:
        lines = list(index.captures(url))
        later = [line for line in lines if '"held"' in line]
        assert later
        with pytest.raises(CorruptFileError) as caught:
            list(index.scan(RecordType.GET, start=T0 + timedelta(days=30)))
        holder_id = table.column("request_id")[0].as_py()
        assert "example.com.parquet" in str(caught.value) and holder_id in str(caught.value)
        assert "refers to" in str(caught.value)
        # A capture lookup never gives the wrong body: its place is checked, then the reference.
        with pytest.raises(CorruptFileError, match="refers to"):
            index.capture_response(later[0])
        problems = [str(p) for p in index.verify().problems]
        assert any("refers to" in p and holder_id in p for p in problems), problems


def test_a_warc_revisit_is_imported_as_a_reference(tmp_path: Path) -> None:
    url, body = _two_months(tmp_path / "s")
    with WebIndex(tmp_path / "s", read_only=True) as index:
        export_warcs(index, tmp_path / "warcs")
    types = [r[0] for r in _warc_records(tmp_path / "warcs")]
    assert types.count("revisit") == 1
    with WebIndex(tmp_path / "t", policy=NO_FLUSH) as index:
        import_warcs(index, [tmp_path / "warcs"])
        index.compact()
        assert _references(tmp_path / "t") == 1
        pages = index.query([SimplePageQuery(url=url)])
        assert pages[0] is not None and pages[0].responses[0].data == body
        assert index.verify().problems == []


def test_bulk_load_refers_to_payloads_already_compacted(tmp_path: Path) -> None:
    url, body = _two_months(tmp_path / "s")
    with WebIndex(tmp_path / "s", policy=NO_FLUSH) as index, index.bulk_load() as load:
        load.add([attempt(url, T0 + timedelta(days=80), body=body)])
    assert _references(tmp_path / "s") == 2
    with WebIndex(tmp_path / "s", read_only=True) as index:
        page = index.query([SimplePageQuery(url=url)])[0]
        assert page is not None and page.responses[0].data == body
        assert index.verify().problems == []


def test_a_month_compacted_again_gives_the_other_months_its_new_places(tmp_path: Path) -> None:
    root = tmp_path / "s"
    url, body = _two_months(root)  # August holds the payload, September refers to it
    with WebIndex(root, policy=NO_FLUSH) as index:
        # A late capture of another August page sorts before the holder: its place moves.
        index.insert_many([attempt("https://a.example.com/a", T0 + timedelta(hours=1), body=b"x" * 1000)])
        index.flush()
        index.compact()
        report = index.verify()
        assert report.problems == []
        assert not [n for n in report.notes if "place their payload" in n.message], report.notes
        september = [line for line in index.captures(url) if '"held":"2024/08"' in line]
        assert len(september) == 1 and index.capture_response(september[0]).data == body  # type: ignore[union-attr]


@pytest.mark.parametrize("how", ["compact", "bulk_load"])
def test_a_holder_compacted_again_while_its_places_are_read_leaves_no_stale_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The race a kill test found: September's capture index reads August's places;
    another process compacts August again before September's index is there for
    its refresh (refresh_held_places finds none), and the index would keep the old
    places. The build sees the holder's version moved and reads the places anew."""
    from web_index.storage import payloads

    root = tmp_path / "s"
    url, body = _two_months(root)
    locate = payloads._refs.locate_holders
    august = "get/2024/08/"
    raced: list[bool] = []

    def compacted_meanwhile(handle: Any, holders: Any) -> Any:  # the fault: a concurrent compaction
        found = locate(handle, holders)
        if not raced and any(h.path.startswith(august) for h in holders):
            raced.append(True)
            with WebIndex(root, policy=NO_FLUSH) as other:  # a late capture sorts before the holder
                other.insert_many(
                    [attempt("https://a.example.com/a", T0 + timedelta(hours=1), body=b"x" * 999)]
                )
                other.flush()
                other.compact()
        return found

    with WebIndex(root, policy=NO_FLUSH) as index:
        monkeypatch.setattr(payloads._refs, "locate_holders", compacted_meanwhile)
        if how == "compact":
            index.insert_many([attempt(url, T0 + timedelta(days=41), body=body)])  # September again
            index.flush()
            index.compact()
        else:  # a load's file written compacted, its index made from what it wrote
            with index.bulk_load() as load:
                load.add([attempt(url, T0 + timedelta(days=75), body=body)])  # October
        monkeypatch.undo()
        assert raced
        report = index.verify()
        assert report.problems == []
        assert not [n for n in report.notes if "place their payload" in n.message], report.notes
        held = [line for line in index.captures(url) if '"held":"2024/08"' in line]
        assert len(held) == 2
        assert all(index.capture_response(line).data == body for line in held)  # type: ignore[union-attr]
        assert not [n for n in index.verify().notes if "place their payload" in n.message]


class _Killed(BaseException):
    """The process killed: no handler of the store's sees it."""


def _august_compacted_again(root: Path) -> None:
    """Another process compacts August again: a late capture sorts before the holder and
    moves its place."""
    with WebIndex(root, policy=NO_FLUSH) as other:
        other.insert_many(
            [attempt("https://a.example.com/a", T0 + timedelta(hours=1), body=os.urandom(20_000))]
        )
        other.flush()
        other.compact()


def _healed(root: Path, url: str, body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed writer's mark is there and its index's places are stale (a slower path,
    right answers); the next compact() writes the index again, and removes the mark once
    it is older than a writer at work could be."""
    from web_index.storage.indexes import _captures, _captures_build

    assert len(list((root / "_captures").rglob("*.check"))) == 1
    with WebIndex(root, read_only=True) as reader:
        assert [n for n in reader.verify().notes if "place their payload" in n.message]
    with WebIndex(root, policy=NO_FLUSH) as index:
        index.compact()
        report = index.verify()
        assert report.problems == []
        assert not [n for n in report.notes if "place their payload" in n.message], report.notes
        held = [line for line in index.captures(url) if '"held":"2024/08"' in line]
        assert held and all(index.capture_response(line).data == body for line in held)  # type: ignore[union-attr]
        assert len(list((root / "_captures").rglob("*.check"))) == 1  # young: kept
        later = time.time() + _captures_build._MARK_KEPT + 1
        monkeypatch.setattr(_captures, "time", SimpleNamespace(time=lambda: later))
        index.compact()
    assert not list((root / "_captures").rglob("*.check"))


def test_a_writer_killed_before_checking_its_places_has_its_index_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race above, with August compacted again after September's lines were made and
    before its index was written, and that index's writer killed before it checked the
    holders' versions (a kill test found it): the mark it wrote first is left, and the
    next compact() writes the index again from the places as they are."""
    from web_index.storage.indexes import _captures_build

    root = tmp_path / "s"
    url, body = _two_months(root)
    write, moved = _captures_build.write_capture_index, _captures_build.holders_moved
    raced: list[bool] = []  # True while the other compaction runs

    def compacted_meanwhile(backend: Any, partition: Any, *args: Any, **kwargs: Any) -> Any:
        if not raced and partition.month == 9:
            raced.append(True)
            _august_compacted_again(root)
            raced[0] = False
        return write(backend, partition, *args, **kwargs)

    def killed(backend: Any, holders: Any) -> bool:  # this writer, of an index that places payloads
        if holders and raced and not raced[0]:
            raise _Killed
        return moved(backend, holders)

    index = WebIndex(root, policy=NO_FLUSH)
    monkeypatch.setattr(_captures_build, "write_capture_index", compacted_meanwhile)
    monkeypatch.setattr(_captures_build, "holders_moved", killed)
    index.insert_many([attempt(url, T0 + timedelta(days=41), body=body)])
    index.flush()
    with pytest.raises(_Killed):
        index.compact()
    monkeypatch.undo()
    assert raced
    _healed(root, url, body, monkeypatch)


def test_a_load_killed_before_checking_its_places_has_its_indexes_written_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same for a bulk load, which places its capture indexes and then checks their
    holders: August compacted again after October's lines were made, the load killed
    before its check. Its mark is left, and the next compact() writes the index again."""
    from web_index.storage import _load

    root = tmp_path / "s"
    url, body = _two_months(root)
    mark = _load.mark_checking
    raced: list[bool] = []

    def compacted_meanwhile(backend: Any, index: str, holders: Any) -> Any:
        if not raced and holders:
            raced.append(True)
            _august_compacted_again(root)
        return mark(backend, index, holders)

    def killed(backend: Any, holders: Any) -> bool:
        raise _Killed

    index = WebIndex(root, policy=NO_FLUSH)
    monkeypatch.setattr(_load, "mark_checking", compacted_meanwhile)
    monkeypatch.setattr(_load, "holders_moved", killed)
    with pytest.raises(_Killed), index.bulk_load() as load:
        load.add([attempt(url, T0 + timedelta(days=75), body=body)])  # October
    monkeypatch.undo()
    assert raced
    _healed(root, url, body, monkeypatch)


def test_a_batch_over_many_small_files_of_references_gets_every_body(tmp_path: Path) -> None:
    """Small files dense in winners are read whole (query/_results.py): their
    referring rows get their payloads through their capture lines' places."""
    urls = [f"https://site{d}.example/p{i}" for d in range(10) for i in range(5)]
    body = {u: (u.encode() + b" unchanged ") * 30 for u in urls}
    with WebIndex(tmp_path / "s", policy=NO_FLUSH) as index:
        for day in (0, 40):
            with index.bulk_load() as load:
                load.add([attempt(u, T0 + timedelta(days=day), body=body[u]) for u in urls])
        assert _references(tmp_path / "s") == len(urls)
        pages = index.query([SimplePageQuery(url=u) for u in urls])
        assert [p.timestamp for p in pages] == [T0 + timedelta(days=40)] * len(urls)  # type: ignore[union-attr]
        assert [p.responses[0].data for p in pages] == [body[u] for u in urls]  # type: ignore[union-attr]


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_load_compacted_meanwhile_writes_a_part_that_holds_every_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """A bulk load's partition that another process compacted between the load's
    listing and its commit is written as a part: a part never refers (a
    compaction may make its rows references), so it holds every body again; also
    when worker processes wrote the load's files (the loader names them)."""
    from web_index.storage import LocalBackend

    url, body = _two_months(tmp_path / "s")
    later = T0 + timedelta(days=80)  # October: no file yet, so the load means to write it compacted
    has_file, place = LocalBackend.has_file, LocalBackend.place
    parts: list[int] = []  # the references in each part file placed

    def compacted_meanwhile(self: LocalBackend, path: str) -> bool:  # the fault: a concurrent compaction
        return path.startswith("get/2024/10/") or has_file(self, path)

    def placed(self: LocalBackend, spool: Path, path: str) -> None:
        if path.startswith("get/") and path.count(".") > 2:  # <domain>.<part id>.parquet
            parts.append(len(pq.read_table(spool, columns=["payload_ref"]).column(0).drop_null()))
        place(self, spool, path)

    monkeypatch.setattr(LocalBackend, "has_file", compacted_meanwhile)
    monkeypatch.setattr(LocalBackend, "place", placed)
    with WebIndex(tmp_path / "s", policy=NO_FLUSH) as index:
        with index.bulk_load(jobs=jobs) as load:
            load.add([attempt(url, later, body=body), attempt(url, later + timedelta(hours=1), body=body)])
        assert parts == [0]
        # The load's end compacted the part: its rows now refer to the stored copy.
        assert _references(tmp_path / "s") == 3
        pages = index.query([SimplePageQuery(url=url)])
        assert pages[0] is not None and pages[0].responses[0].data == body
        assert index.verify().problems == []
