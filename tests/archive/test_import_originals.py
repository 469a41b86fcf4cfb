"""Revisits stored with the bulk load that took their originals (archive/_import_originals.py):
told their payload in the original's partition, given the original's record read again in another
domain's, held back for a load of their own only in another month of the domain (a reference
once that month is compacted). Every body as the buffered import, which resolves each revisit
from the store, gives it."""

from __future__ import annotations

import base64
import hashlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

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
