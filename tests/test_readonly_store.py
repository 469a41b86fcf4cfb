"""A store on read-only media (or for a user who may read it but not write it)
answers queries: readers never need to write, and see the insert buffer when
they can read it, or say once on stderr that they cannot.

The store is made read-only for real: a read-only bind mount in a mount
namespace of the reader's own (``unshare -m``, as root).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.factories import T0, attempt
from tests.servers import missing
from web_index import WebIndex


def _can_mount_read_only(tmp: Path) -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind -o ro {tmp} {tmp} && ! touch {tmp}/x"],
        capture_output=True,
    )
    return probe.returncode == 0


def _read_only(
    store: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python args...`` with ``store`` mounted read-only over itself."""
    command = " ".join(["exec", sys.executable, *(_quote(a) for a in args)])
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind -o ro {store} {store} && {command}"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        timeout=120,
    )


def _quote(arg: str) -> str:
    return "'" + arg.replace("'", "'\\''") + "'"


def _cli(store: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _read_only(store, "-c", "from web_index.cli import main; main()", *args, "-s", str(store))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    if not _can_mount_read_only(tmp_path):
        missing("a read-only bind mount (root and unshare -m)")
    root = tmp_path / "store"
    with WebIndex(root) as idx:
        idx.insert_many([attempt(f"https://a.example.com/{n}", T0 + timedelta(days=n)) for n in range(4)])
        idx.flush()
        idx.insert(*attempt("https://a.example.com/buffered", T0))
    return root


def _found(result: subprocess.CompletedProcess[str]) -> list[bool]:
    return [json.loads(line)["result"] is not None for line in result.stdout.splitlines()]


def test_every_reader_works_on_a_read_only_store(store: Path) -> None:
    assert not (store / "_buffer" / "buffer.sqlite3-wal").exists()  # closed cleanly: all in the file
    q = _cli(store, "query", "https://a.example.com/1", "https://a.example.com/buffered", "https://x.org/")
    assert (q.returncode, q.stderr) == (0, "")
    assert _found(q) == [True, True, False]
    p = _cli(store, "presence", "https://a.example.com/buffered")
    assert p.returncode == 0 and json.loads(p.stdout)["present"] is True
    v = _cli(store, "verify")
    assert v.returncode == 0, v.stderr
    s = _cli(store, "stats", "--json")
    assert s.returncode == 0, s.stderr
    code = (
        "from web_index.read_only import query, presence\n"
        "from web_index.models import SimplePageQuery as S\n"
        "qs = [S(url='https://a.example.com/buffered'), S(url='https://a.example.com/2')]\n"
        "print([r.request_id is not None for r in query(qs)], presence(qs))\n"
    )
    r = _read_only(store, "-c", code, env={"WEB_INDEX_STORE": str(store)})
    assert (r.returncode, r.stdout.strip()) == (0, "[True, True] [True, True]"), r.stderr


def test_a_buffer_it_cannot_read_is_said_once_and_the_files_still_answer(store: Path) -> None:
    # A WAL without its shared-memory file: reading it would mean creating that file.
    with WebIndex(store) as idx:
        idx.insert(*attempt("https://a.example.com/in-the-wal", T0))
        wal = store / "_buffer" / "buffer.sqlite3-wal"
        shutil.copy(wal, wal.with_name("saved-wal"))
    os.replace(wal.with_name("saved-wal"), wal)
    (store / "_buffer" / "buffer.sqlite3-shm").unlink(missing_ok=True)
    q = _cli(
        store, "query", "https://a.example.com/1", "https://a.example.com/2", "https://a.example.com/buffered"
    )
    assert q.returncode == 0
    assert _found(q) == [True, True, False]
    lines = [line for line in q.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot be read here" in lines[0] and "Traceback" not in q.stderr, q.stderr
