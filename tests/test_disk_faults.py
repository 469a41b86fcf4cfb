"""A full disk and a read-only mount, for real (a small tmpfs and a read-only bind
mount in a mount namespace of the test's own, as root): a clear error naming
the cause and the documented exit code, nothing acknowledged lost, and the
store usable again once there is room."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.servers import missing

ROOT = Path(__file__).resolve().parent.parent

# Runs inside the namespace: fills a 4 MiB tmpfs through the API, then checks
# what was acknowledged, frees room and inserts again, then tries the CLI.
_FILL = """
import json, os, subprocess, sys
from datetime import timedelta
from tests.factories import T0, attempt
from web_index import WebIndex
from web_index.errors import StoreError
from web_index.models import SimplePageQuery

root, filler = sys.argv[1], sys.argv[2]
acked, error = [], None
with WebIndex(root) as idx:
    try:
        for n in range(100_000):
            url = f"https://a.example.com/{n}"
            idx.insert(*attempt(url, T0, body=os.urandom(30_000)))
            acked.append(url)
    except StoreError as exc:
        error = str(exc)
    found = [r is not None for r in idx.query([SimplePageQuery(url=u) for u in acked])]
    os.remove(filler)  # room again
    idx.insert(*attempt("https://a.example.com/after", T0))
    after = idx.query([SimplePageQuery(url="https://a.example.com/after")])[0] is not None
with open(filler, "wb") as fh:  # full again, for the CLI
    try:
        while True:
            fh.write(b"x" * 65536)
            fh.flush()
    except OSError:
        pass
line = json.dumps({"type": "get", "url": "https://b.example.com/", "timestamp": "2024-08-01T12:00:00Z",
    "metadata": {"state": "success", "url": "https://b.example.com/", "fetcher_name": "t",
                 "fetcher_version": "1", "fetcher_calibre": 10},
    "data": [{"url": "https://b.example.com/", "request_url": "https://b.example.com/", "status_code": 200,
              "headers": {}, "timestamp": "2024-08-01T12:00:00Z", "data": "eA==" * 20000, "is_final": True,
              "fetcher_name": "t", "fetcher_version": "1", "fetcher_calibre": 10}]})
main = "from web_index.cli import main; main()"
cli = subprocess.run([sys.executable, "-c", main, "insert", "-", "-s", root],
                     input=(line + "\\n") * 50, capture_output=True, text=True)
print(json.dumps({"acked": len(acked), "error": error, "found": found, "after": after,
                  "cli": [cli.returncode, cli.stderr]}))
"""

_READ_ONLY = """
import json, subprocess, sys
from web_index import WebIndex
from web_index.errors import StoreError
root = sys.argv[1]
try:
    WebIndex(root)
    api = None
except StoreError as exc:
    api = str(exc)
cli = subprocess.run([sys.executable, "-c", "from web_index.cli import main; main()", "flush", "-s", root],
                     capture_output=True, text=True)
print(json.dumps({"api": api, "cli": [cli.returncode, cli.stderr]}))
"""


def _in_namespace(setup: str, script: str, *args: str) -> dict[str, object]:
    import json

    if os.geteuid() != 0:
        missing("root, for mounts in a private mount namespace")
    code = textwrap.dedent(script)
    shell = f'{setup} && exec {sys.executable} -c "$0" "$@"'
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", shell, code, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}", "COLUMNS": "300"},
        timeout=300,
    )
    if done.returncode != 0 and "mount" in done.stderr and "permission" in done.stderr.lower():
        missing("mounts in a private mount namespace (unshare -m)")
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_full_disk_is_a_clear_error_and_loses_nothing_acknowledged(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # 4 MiB of disk; a filler file takes 1 MiB of it, to be freed later.
    setup = f"mount -t tmpfs -o size=4m tmpfs {mnt} && head -c 1048576 /dev/zero > {mnt}/filler"
    out = _in_namespace(setup, _FILL, str(mnt / "store"), str(mnt / "filler"))
    assert out["error"] is not None and "database or disk is full" in str(out["error"]), out["error"]
    assert "insert buffer" in str(out["error"])
    assert int(str(out["acked"])) > 10
    assert out["found"] == [True] * int(str(out["acked"]))  # every acknowledged insert is there
    assert out["after"] is True
    code, stderr = out["cli"]  # type: ignore[misc]
    lines = [line for line in str(stderr).splitlines() if line.strip()]
    assert code == 4, stderr
    assert len(lines) == 1 and "disk is full" in lines[0] and "Traceback" not in str(stderr), stderr


def test_writing_to_a_read_only_store_is_a_clear_error(tmp_path: Path) -> None:
    from tests.factories import attempt
    from web_index import WebIndex

    store = tmp_path / "store"
    with WebIndex(store) as idx:
        idx.insert(*attempt("https://a.example.com/"))
    for name in os.listdir(store / "_buffer"):
        if name != "buffer.sqlite3":
            (store / "_buffer" / name).unlink()
    os.rmdir(store / "_locks") if (store / "_locks").exists() and not os.listdir(store / "_locks") else None
    out = _in_namespace(f"mount --bind -o ro {store} {store}", _READ_ONLY, str(store))
    assert out["api"] is not None and "Read-only file system" in str(out["api"]), out
    assert "read-only" in str(out["api"])
    code, stderr = out["cli"]  # type: ignore[misc]
    lines = [line for line in str(stderr).splitlines() if line.strip()]
    assert code == 4 and len(lines) == 1 and "Read-only file system" in lines[0], stderr


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
