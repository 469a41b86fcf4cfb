"""Payload digests: stored with every GET body, derived for files written before,
and every location of a payload found by ``lookup_digest``, against a reference."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from typer.testing import CliRunner

from tests.factories import attempt, rewrite_store_file
from web_index import WebIndex
from web_index.cli import app
from web_index.errors import InvalidRecordError
from web_index.models import Digest, PageKey, RecordType

BODIES = [b"", b"same", b"other", bytes(range(256)) * 40]
URLS = ["https://a.example.com/x", "https://a.example.com/y", "http://b.example.org/", "http://127.0.0.1/p"]
TIMES = [datetime(2024, 7, 31, 23, 30, tzinfo=UTC), datetime(2024, 8, 1, 0, 30, tzinfo=UTC)]


def sha1(body: bytes) -> str:
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode()


def sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def drop_digests(store: Path) -> int:
    """Rewrite every ``get`` file of ``store`` as a file of format 2 (no digest columns)."""
    n = 0
    for path in (store / "get").rglob("*.parquet"):
        table = pq.read_table(path)
        keep = [c for c in table.column_names if not c.startswith("payload_")]
        rewrite_store_file(path, table.select(keep).replace_schema_metadata(pq.read_metadata(path).metadata))
        n += 1
    return n


class Digests(RuleBasedStateMachine):
    """Inserts (chains whose redirects carry bodies too), flushes, compactions and
    files rewritten without digests, against a dict of every response's body."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.index = WebIndex(self.dir / "s", create=True)
        self.bodies: dict[tuple[str, int], bytes] = {}  # (request id, chain index) -> body
        self.n = 0

    def teardown(self) -> None:
        self.index.close()
        shutil.rmtree(self.dir)

    @rule(
        url=st.sampled_from(URLS),
        at=st.sampled_from(TIMES),
        body=st.sampled_from(BODIES),
        hops=st.integers(1, 2),
    )
    def insert(self, url: str, at: datetime, body: bytes, hops: int) -> None:
        self.n += 1
        key = self.index.insert(*attempt(url, at + timedelta(seconds=self.n), hops=hops, body=body))
        for i in range(hops):
            self.bodies[(key.request_id, i)] = body if i == hops - 1 else b""

    @rule()
    def flush(self) -> None:
        self.index.flush()

    @rule()
    def compact(self) -> None:
        self.index.compact()

    @rule()
    def written_before_digests(self) -> None:
        self.index.flush()
        drop_digests(self.dir / "s")

    @invariant()
    def every_location_found(self) -> None:
        for body in BODIES:
            expected = {k for k, b in self.bodies.items() if b == body}
            for digest in (sha1(body), sha256(body)):
                hits = self.index.lookup_digest(digest)
                assert {(h.request_id, h.chain_index) for h in hits} == expected, digest
                assert all(h.sha1 == sha1(body) and h.sha256 == sha256(body) for h in hits)
                assert [(h.timestamp, h.request_id, h.chain_index) for h in hits] == sorted(
                    (h.timestamp, h.request_id, h.chain_index) for h in hits
                )


def test_lookup_digest_against_reference() -> None:
    run_state_machine_as_test(
        Digests, settings=settings(max_examples=25, stateful_step_count=12, deadline=None)
    )


def test_hits_say_where_and_find_the_page(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        first = index.insert(*attempt(URLS[0], TIMES[0], body=b"same"))
        index.insert(*attempt(URLS[2], TIMES[1] + timedelta(days=40), body=b"same"))
        assert [h.location for h in index.lookup_digest(sha1(b"same"))] == ["buffer", "buffer"]
        index.flush()
        hits = index.lookup_digest(sha1(b"same"))
        assert [h.location for h in hits] == [
            "get/2024/07/example.com." + hits[0].location.split(".", 2)[2],
            "get/2024/09/example.org." + hits[1].location.split(".", 2)[2],
        ]
        assert all((tmp_path / "s" / h.location).is_file() for h in hits)
        page = index.query([hits[0].key])[0]
        assert page is not None and page.key == PageKey(
            type=RecordType.GET, url=URLS[0], timestamp=TIMES[0], request_id=first.request_id
        )
        assert page.final.payload_digest == sha1(b"same")
        assert hits[0].to_dict()["timestamp"] == "2024-07-31T23:30:00Z"
        assert index.lookup_digest(sha1(b"never stored")) == []


def test_digests_stored_in_get_files_and_checked_by_verify(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        index.insert(*attempt(URLS[0], TIMES[0], body=b"same"))
        index.flush()
        (path,) = (tmp_path / "s" / "get").rglob("*.parquet")
        table = pq.read_table(path)
        assert table.column("payload_sha1").to_pylist() == [hashlib.sha1(b"same").digest()]
        assert table.column("payload_sha256").to_pylist() == [hashlib.sha256(b"same").digest()]
        assert index.verify().problems == []
        sha = hashlib.sha1(b"tampered").digest()
        wrong = table.set_column(
            table.column_names.index("payload_sha1"),
            table.schema.field("payload_sha1"),
            pa.array([sha], pa.binary(20)),
        )
        rewrite_store_file(path, wrong.replace_schema_metadata(pq.read_metadata(path).metadata))
        problems = [p.message for p in index.verify().problems]
        assert problems == ["1 payload digests differ from their bodies"]


def test_files_without_digests_are_derived_and_compacted_in(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        index.insert(*attempt(URLS[0], TIMES[0], body=b"old"))
        index.flush()
        assert drop_digests(tmp_path / "s") == 1
        notes = [n.message for n in index.verify().notes]
        assert notes == [
            "no payload digests (a file of format 2): derived when read; `compact --min-parts 0` adds them"
        ]
        assert len(index.lookup_digest(sha1(b"old"))) == 1
        index.insert(*attempt(URLS[0], TIMES[0] + timedelta(seconds=1), body=b"new"))
        index.flush()
        index.compact()
        (path,) = (tmp_path / "s" / "get").rglob("*.parquet")
        assert pq.read_table(path).column("payload_sha1").to_pylist() == [
            hashlib.sha1(b"old").digest(),
            hashlib.sha1(b"new").digest(),
        ]
        assert index.verify().notes == [] and index.verify().problems == []


@pytest.mark.parametrize(
    ("text", "algorithm", "raw"),
    [
        (sha1(b"x"), "sha1", hashlib.sha1(b"x").digest()),
        ("SHA1:" + hashlib.sha1(b"x").hexdigest().upper(), "sha1", hashlib.sha1(b"x").digest()),
        (sha1(b"x").lower(), "sha1", hashlib.sha1(b"x").digest()),
        (sha256(b"x"), "sha256", hashlib.sha256(b"x").digest()),
        (
            "sha256:" + base64.b32encode(hashlib.sha256(b"x").digest()).decode().rstrip("="),
            "sha256",
            hashlib.sha256(b"x").digest(),
        ),
    ],
)
def test_digest_forms(text: str, algorithm: str, raw: bytes) -> None:
    parsed = Digest.parse(text)
    assert (parsed.algorithm, parsed.raw) == (algorithm, raw)
    assert Digest.parse(str(parsed)) == parsed


@pytest.mark.parametrize(
    "text", ["", "md5:abc", "sha1", "sha1:", "sha1:abc", sha256(b"x").replace("sha256", "sha1")]
)
def test_bad_digests_name_the_field(text: str) -> None:
    with pytest.raises(InvalidRecordError) as caught:
        Digest.parse(text)
    assert caught.value.field == "digest"


def test_cli_lookup(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    with WebIndex(store, create=True) as index:
        index.insert(*attempt(URLS[0], TIMES[0], body=b"same"))
        index.insert(*attempt(URLS[1], TIMES[1], body=b"same"))
    runner = CliRunner()
    found = runner.invoke(app, ["lookup", "--store", store, "--digest", sha256(b"same"), "--fail-missing"])
    assert found.exit_code == 0, found.output
    lines = [json.loads(line) for line in found.stdout.splitlines()]
    assert [(h["url"], h["status_code"], h["sha1"]) for h in lines] == [
        (URLS[0], 200, sha1(b"same")),
        (URLS[1], 200, sha1(b"same")),
    ]
    missing = runner.invoke(
        app, ["lookup", "--store", store, "-d", sha1(b"same"), "-d", sha1(b"gone"), "--fail-missing"]
    )
    assert missing.exit_code == 1 and len(missing.stdout.splitlines()) == 2
    bad = runner.invoke(app, ["lookup", "--store", store, "--digest", "sha1:nothex"])
    assert bad.exit_code == 2
    assert "--digest not a sha1 digest in hex or base32: 'nothex'" in bad.stderr


def test_a_month_of_files_with_and_without_digests(tmp_path: Path) -> None:
    with WebIndex(tmp_path / "s", create=True) as index:
        index.insert(*attempt(URLS[2], TIMES[0], body=b"older"))
        index.flush()
        index.compact()
        index.insert(*attempt(URLS[0], TIMES[0], body=b"newer"))
        index.flush()
        drop_digests(tmp_path / "s")
        index.compact()  # example.com's part becomes a file with digests; example.org's stays without
        kinds = sorted(
            "payload_sha1" in pq.read_schema(p).names for p in (tmp_path / "s" / "get").rglob("*.parquet")
        )
        assert kinds == [False, True]
        for body in (b"older", b"newer"):
            assert [h.sha1 for h in index.lookup_digest(sha1(body))] == [sha1(body)]


@given(raw=st.binary(min_size=0, max_size=40))
def test_base32_letters_of_a_digest_are_the_standard_librarys(raw: bytes) -> None:
    from web_index.models import base32_sha1, sha1_base32, sha1_text

    letters = sha1_base32(raw)
    assert letters == base64.b32encode(raw).decode()
    if len(raw) == 20:
        assert base32_sha1(letters) == raw
        assert sha1_text(raw) == "sha1:" + letters
