"""Revisits told apart: two captures of a URL in one microsecond, each repeated later by a
revisit, which must get the body of the capture it names (``WARC-Refers-To``) or, without a
name, of the capture with its payload digest."""

from __future__ import annotations

import base64
import gzip
import hashlib
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.archive.test_import_warc import T0, Warc
from web_index import WebIndex
from web_index.archive import import_warcs
from web_index.models import Page, TimeAwarePageQuery


@pytest.mark.parametrize("bulk", [True, False])
def test_a_revisit_gets_the_capture_its_warc_refers_to_names(tmp_path: Path, bulk: bool) -> None:
    """Two captures of one URL in the same microsecond, both gzipped on the wire (so stored
    decoded: the revisits' digests, of the wire's payloads, match neither stored body): only
    ``WARC-Refers-To`` tells them apart, and each revisit gets the body of the record it names."""
    zipped = [("Content-Type", "text/html"), ("Content-Encoding", "gzip")]
    assert _two_revisits(tmp_path, bulk, zipped, gzip.compress, named=True) == [b"<p>1</p>", b"<p>2</p>"]


@pytest.mark.parametrize("bulk", [True, False])
def test_a_revisit_without_warc_refers_to_gets_the_capture_with_its_payload(
    tmp_path: Path, bulk: bool
) -> None:
    """The same, stored as sent and without ``WARC-Refers-To``: the digest tells them apart."""
    assert _two_revisits(tmp_path, bulk, [("Content-Type", "text/html")], bytes, named=False) == [
        b"<p>1</p>",
        b"<p>2</p>",
    ]


def _two_revisits(
    tmp: Path, bulk: bool, headers: list[tuple[str, str]], wire: Callable[[bytes], bytes], *, named: bool
) -> list[bytes | None]:
    """Captures of ``<p>1</p>`` and ``<p>2</p>`` at T0 (their payloads ``wire(body)``), a revisit
    of each a day and two days later (naming its record when ``named``): the bodies they get."""
    url, w = "https://example.com/", Warc()
    ids = {body: w.capture(url, wire(body), headers=headers) for body in (b"<p>1</p>", b"<p>2</p>")}
    for day, (body, rid) in enumerate(ids.items(), 1):
        digest = "sha1:" + base64.b32encode(hashlib.sha1(wire(body)).digest()).decode()
        w.revisit(
            url, T0 + timedelta(days=day), refers_to=T0, record_id=rid if named else None, digest=digest
        )
    with WebIndex(tmp / "s", create=True) as index:
        assert import_warcs(index, [w.save(tmp / "a.warc.gz")], bulk=bulk).stored == 4
        return [_latest(index, url, T0 + timedelta(days=day)) for day in (1, 2)]


def _latest(index: WebIndex, url: str, when: datetime) -> bytes | None:
    page = index.query([TimeAwarePageQuery(url=url, timestamp=when, not_before=when, not_after=when)])[0]
    assert isinstance(page, Page)
    return page.data
