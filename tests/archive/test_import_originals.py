"""Revisits stored with the bulk load that took their originals (archive/_import_originals.py):
told their payload in the original's partition, given the original's record read again in another
domain's, held back for a load of their own only in another month of the domain (a reference
once that month is compacted). Every body as the buffered import, which resolves each revisit
from the store, gives it."""

from __future__ import annotations

import base64
import gzip
import hashlib
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.archive.test_import_warc import T0, Warc
from tests.test_shared_payloads import _references
from web_index import WebIndex
from web_index.archive import _import_originals, _import_run, import_warcs
from web_index.models import Page, TimeAwarePageQuery

PAGE, MIRROR, OTHER, LATER = (
    "https://a.example.com/page",
    "https://c.example.net/copy",
    "https://a.example.com/other",
    "https://b.example.org/x",
)
BODY_A, BODY_B = b"<p>" + b"a" * 600 + b"</p>", b"<p>" + b"b" * 700 + b"</p>"
# Each revisit: its URL, its time, the URL it refers to and that capture's body.
REVISITS = [
    (PAGE, T0 + timedelta(days=1), PAGE, BODY_A),  # the original's partition
    (OTHER, T0 + timedelta(hours=2), PAGE, BODY_A),  # the same partition, another URL
    (MIRROR, T0 + timedelta(days=1), PAGE, BODY_A),  # another domain
    (LATER, T0 + timedelta(days=40), LATER, BODY_B),  # the domain's next month
]


def _warc(path: Path) -> Path:
    w = Warc()
    w.capture(PAGE, BODY_A)
    w.capture(LATER, BODY_B)
    for url, when, target, body in REVISITS:
        digest = "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()
        w.revisit(url, when, refers_to=T0, digest=digest, refers_to_uri=target)
    return w.save(path)


def _bodies(root: Path) -> list[tuple[bytes | None, int]]:
    with WebIndex(root, read_only=True) as index:
        asked = [TimeAwarePageQuery(url=u, timestamp=t, not_before=t, not_after=t) for u, t, _, _ in REVISITS]
        pages = index.query(asked)
        assert index.verify().problems == []
    assert all(isinstance(p, Page) for p in pages)
    return [(p.data, p.responses[0].status_code) for p in pages if isinstance(p, Page)]


def _looked_up(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every revisit target the import asks the store for (a spy: the lookups still run)."""
    asked: list[Any] = []
    real = _import_run.resolve_revisits

    def spy(index: WebIndex, targets: Any) -> Any:
        asked.extend(t.uri for t in targets)
        return real(index, targets)

    monkeypatch.setattr(_import_run, "resolve_revisits", spy)
    return asked


@pytest.mark.parametrize("jobs", [1, 2])
def test_revisits_of_a_load_s_own_originals_are_stored_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    warc = _warc(tmp_path / "a.warc.gz")
    with WebIndex(tmp_path / "buffered", create=True) as index:
        assert import_warcs(index, [warc], bulk=False).stored == 6
    asked = _looked_up(monkeypatch)
    with WebIndex(tmp_path / "bulk", create=True) as index:
        assert import_warcs(index, [warc], jobs=jobs).stored == 6
    assert asked == [LATER]  # the others never waited for the load to commit
    got = _bodies(tmp_path / "bulk")
    assert got == _bodies(tmp_path / "buffered")
    assert [body for body, _ in got] == [body for *_, body in REVISITS]
    # The two in the original's partition and the next month's refer to their payloads; the
    # other domain's holds a copy (no file refers to another domain's).
    assert _references(tmp_path / "bulk") == 3


def test_an_original_that_cannot_be_read_again_leaves_its_revisit_to_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fault: the original's record not found where it was read (its file changed): the
    revisit waits for the load to commit, and gets its body from the store."""
    warc = _warc(tmp_path / "a.warc.gz")
    monkeypatch.setattr(_import_originals, "record_at", lambda path, offset: None)
    asked = _looked_up(monkeypatch)
    with WebIndex(tmp_path / "bulk", create=True) as index:
        assert import_warcs(index, [warc]).stored == 6
    assert sorted(asked) == sorted([PAGE, LATER])
    assert [body for body, _ in _bodies(tmp_path / "bulk")] == [body for *_, body in REVISITS]


_DOMAINS = ("https://a.example.com", "https://b.example.org", "https://c.example.net")
_BODIES = [b"<p>" + bytes([65 + n]) * size + b"</p>" for n, size in enumerate((10, 300, 900, 2000))]

_captures = st.lists(  # domain, path, days after T0, body, gzipped on the wire, file
    st.tuples(st.integers(0, 2), st.integers(0, 1), st.sampled_from([0, 1, 35]), st.integers(0, 3),
              st.booleans(), st.integers(0, 1)),
    min_size=1, max_size=5,
)  # fmt: skip
_revisits = st.lists(  # which capture, its own domain and path (or the capture's), days after it, file
    st.tuples(st.integers(0, 4), st.one_of(st.none(), st.tuples(st.integers(0, 2), st.integers(0, 1))),
              st.sampled_from([0, 1, 33]), st.integers(0, 1)),
    max_size=6,
)  # fmt: skip


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(captures=_captures, revisits=_revisits)
def test_any_revisit_gets_the_body_of_the_capture_it_names(
    tmp_path: Path, captures: list[tuple[int, int, int, int, bool, int]], revisits: list[Any]
) -> None:
    """Captures in up to two files, gzipped on the wire or not, and revisits of them in either
    file (after them or before, in their partition, another domain's or month's, another URL of
    their domain): each capture and each revisit answers with its body, `verify` clean."""
    shutil.rmtree(tmp_path, ignore_errors=True)
    tmp_path.mkdir()
    files = [Warc(), Warc()]
    written: list[tuple[str, Any, bytes, bytes]] = []  # url, time, wire payload, body
    expected: dict[tuple[str, Any], bytes] = {}
    for n, (domain, path, days, body, zipped, file) in enumerate(captures):
        url, when = f"{_DOMAINS[domain]}/p{path}", T0 + timedelta(days=days, seconds=n)
        wire = gzip.compress(_BODIES[body], mtime=0) if zipped else _BODIES[body]
        fields = [("Content-Type", "text/html"), *([("Content-Encoding", "gzip")] if zipped else [])]
        files[file].capture(url, wire, when=when, headers=fields)
        written.append((url, when, wire, _BODIES[body]))
        expected[(url, when)] = _BODIES[body]
    for n, (which, own, days, file) in enumerate(revisits):
        target, then, wire, body = written[which % len(written)]
        url = target if own is None else f"{_DOMAINS[own[0]]}/p{own[1]}"
        when = then + timedelta(days=days, seconds=100 * (n + 1))  # no two at one second
        digest = "sha1:" + base64.b32encode(hashlib.sha1(wire).digest()).decode()
        files[file].revisit(url, when, refers_to=then, digest=digest, refers_to_uri=target)
        expected[(url, when)] = body
    warcs = [w.save(tmp_path / f"{n}.warc.gz") for n, w in enumerate(files)]
    with WebIndex(tmp_path / "s", create=True) as index:
        assert import_warcs(index, warcs).stored == len(expected)
        asked = [TimeAwarePageQuery(url=u, timestamp=t, not_before=t, not_after=t) for u, t in expected]
        got = [p.data if isinstance(p, Page) else None for p in index.query(asked)]
        assert got == list(expected.values())
        assert index.verify().problems == []


@pytest.mark.parametrize("staged", [False, True])
def test_a_commit_between_an_original_and_its_revisit_leaves_the_revisit_to_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, staged: bool
) -> None:
    """A load that commits (or, a cluster worker's, stages) at every add: an original is never in
    the same commit as its revisit, which must not be told of it (the commit would not hold it)
    and waits for the load to end instead."""
    from web_index._bulk_load import BulkLoad
    from web_index.archive._import_run import ImportReport, Run, import_files
    from web_index.archive._revisits import Waiting
    from web_index.archive._sources import archive_files

    warc = _warc(tmp_path / "a.warc.gz")
    asked = _looked_up(monkeypatch)
    with WebIndex(tmp_path / "s", create=True) as index:
        run = Run(index, 10, 1, ImportReport(), 1, False)
        with Waiting[Any]() as run.deferred:
            stage = "_tmp/staged-test" if staged else None
            with BulkLoad(index._store, index.limits, chunk=1, commit_bytes=1, stage=stage) as load:
                run.load = load
                import_files(run, archive_files([warc]), None)
            assert load.commits > 1
            if staged:
                assert load.staged and asked == []  # every revisit waits for the client
                return
            run.store_deferred()
        assert sorted(asked) == sorted([PAGE, PAGE, PAGE, LATER])
    assert [body for body, _ in _bodies(tmp_path / "s")] == [body for *_, body in REVISITS]
