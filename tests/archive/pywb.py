"""The real pywb 2.10 replaying WARCs, for tests: ``running_pywb(warcs, cdxj, workdir)``.

pywb lives in a virtualenv of its own, ``.pywb-venv`` (built by ``scripts/pywb-venv.sh`` from
``tests/archive/pywb-requirements.txt``), because it pins old dependencies. The first use in a
process runs that script (under a file lock, so parallel workers don't race; it is silent and
quick when the venv is up to date); if it fails, ``missing()`` fails the test under CI=true and
skips it elsewhere.

The server is ``wayback`` on 127.0.0.1 only, on a free port, over a collection laid out in
``workdir``::

    workdir/config.yaml
    workdir/collections/<coll>/archive/<warc>       symlinks to the given WARCs
    workdir/collections/<coll>/indexes/index.cdxj   a copy of the given CDXJ (or pywb's own)

pywb reads the CDXJ by binary search, so it must be sorted as bytes (``LC_ALL=C sort``); each
line is ``<surt key> <14-digit timestamp> <JSON>`` and the JSON's ``filename`` is relative to
``archive/``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.servers import ROOT, free_port, missing, wait_port

VENV = ROOT / ".pywb-venv"
SETUP = ROOT / "scripts" / "pywb-venv.sh"
START_TIMEOUT = 60.0  # the first start (cold imports, .pyc writing) can be slow
SETUP_TIMEOUT = 900.0

_setup_error: str | None = None
_setup_done = False


def pywb_bin(name: str) -> Path:
    """A console script of the pywb venv (``wayback``, ``wb-manager``, ``cdx-indexer``, ...)."""
    return VENV / "bin" / name


def ensure_pywb_venv() -> None:
    """Run ``scripts/pywb-venv.sh`` once per process, under a lock; ``missing()`` if it fails."""
    global _setup_done, _setup_error
    if not _setup_done:
        tag = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
        lock_path = Path(tempfile.gettempdir()) / f"web-index-pywb-venv-{tag}.lock"
        with lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                done = subprocess.run(
                    [str(SETUP)],
                    cwd=ROOT,
                    env=_clean_env(),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    timeout=SETUP_TIMEOUT,
                    check=False,
                )
                if done.returncode != 0:
                    last = (done.stdout.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
                    _setup_error = last.removeprefix("pywb-venv.sh: ")
            except (OSError, subprocess.TimeoutExpired) as exc:
                _setup_error = str(exc)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        _setup_done = True
    if _setup_error is not None:
        missing(f"pywb 2.10 (scripts/pywb-venv.sh: {_setup_error})")


def _clean_env() -> dict[str, str]:
    """This environment without what would leak .venv into pywb's interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PYTHONUNBUFFERED"] = "1"  # the log is complete when we read its tail
    return env


@dataclass
class PywbServer:
    """A running ``wayback``: ``base_url`` (no trailing slash) and one collection."""

    base_url: str
    collection: str
    workdir: Path
    log: Path
    client: httpx.Client = field(repr=False)

    def replay_url(self, url: str, timestamp: str) -> str:
        """The identity (``id_``) replay URL: the archived response, not rewritten."""
        return f"{self.base_url}/{self.collection}/{timestamp}id_/{url}"

    def replay_raw(self, url: str, timestamp: str) -> httpx.Response:
        """GET the ``id_`` replay of ``url`` (no redirects followed).

        Sent with ``Accept-Encoding: identity``: pywb then decodes a stored ``Content-Encoding``
        itself and renames the header to ``X-Archive-Orig-Content-Encoding`` (as it does for a
        stored ``Transfer-Encoding: chunked``), so ``.content`` is the bytes pywb sent. pywb
        serves the capture *closest* to ``timestamp`` without redirecting: the
        ``Memento-Datetime`` header tells which one it was.
        """
        return self.client.get(self.replay_url(url, timestamp), headers={"Accept-Encoding": "identity"})

    def cdx(self, url: str, **params: str) -> list[dict[str, Any]]:
        """pywb's CDX server API for ``url`` (extra ``params``: ``matchType``, ``filter``, ...)."""
        r = self.client.get(
            f"{self.base_url}/{self.collection}/cdx", params={"url": url, "output": "json", **params}
        )
        r.raise_for_status()
        return [json.loads(line) for line in r.text.splitlines() if line.strip()]

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.log, lines)


def _run(args: list[str], cwd: Path) -> None:
    done = subprocess.run(
        args, cwd=cwd, env=_clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout[-4000:]}")


def _layout(warcs: list[Path], cdxj: Path | None, workdir: Path, collection: str) -> None:
    names = [w.name for w in warcs]
    if len(set(names)) != len(names):
        raise ValueError(f"WARC file names must differ (the CDXJ names them by file name): {names}")
    coll = workdir / "collections" / collection
    if coll.exists():
        raise FileExistsError(f"{coll} exists: give each server a fresh workdir")
    (workdir / "config.yaml").write_text(
        "# tests/archive/pywb.py: replay only, no live web, no recording\n"
        "collections_root: collections\n"
        "archive_paths: archive\n"
        "index_paths: indexes\n"
        "enable_memento: true\n"
        "debug: true\n"  # tracebacks in the log
    )
    if cdxj is None:
        # pywb indexes the WARCs itself (wb-manager copies them into archive/ and writes index.cdxj).
        _run([str(pywb_bin("wb-manager")), "init", collection], workdir)
        _run([str(pywb_bin("wb-manager")), "add", collection, *(str(w.resolve()) for w in warcs)], workdir)
        return
    (coll / "archive").mkdir(parents=True)
    (coll / "indexes").mkdir()
    for w in warcs:
        (coll / "archive" / w.name).symlink_to(w.resolve())
    shutil.copyfile(cdxj, coll / "indexes" / "index.cdxj")


def _log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"


def _start(workdir: Path, log: Path, collection: str) -> tuple[subprocess.Popen[bytes], int]:
    """Start ``wayback`` on a free loopback port and wait until it serves ``collection``.

    Ready means: the port answers, ``GET /<coll>/`` is a 200 (pywb ignores a config.yaml it
    cannot parse, and its CDX API answers 200 even for a collection it lacks), and the process
    is still ours and alive. A start that dies (say, the free port was taken meanwhile) is
    retried on another port; a hang or a missing collection is not.
    """
    problems: list[str] = []
    for attempt in range(3):
        port = free_port()
        with log.open("ab") as out:
            out.write(f"\n=== wayback on 127.0.0.1:{port} (attempt {attempt + 1}) ===\n".encode())
            out.flush()
            proc = subprocess.Popen(
                [str(pywb_bin("wayback")), "--bind", "127.0.0.1", "--port", str(port), "-d", str(workdir)],
                cwd=workdir,
                env=_clean_env(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        problem = _wait_ready(proc, port, collection)
        if problem is None:
            return proc, port
        problems.append(problem)
        exited = proc.poll() is not None
        _stop(proc)
        if not exited:
            break  # not a lost port race: don't wait another minute for the same outcome
    tail = _log_tail(log)
    raise RuntimeError("pywb did not start: " + "; ".join(problems) + f"\n--- {log} tail ---\n{tail}")


def _wait_ready(proc: subprocess.Popen[bytes], port: int, collection: str) -> str | None:
    """None once ``proc`` serves ``collection`` on ``port``, else why not."""
    deadline = time.monotonic() + START_TIMEOUT
    last = "port closed"
    while True:
        if proc.poll() is not None:
            return f"wayback exited with status {proc.returncode}"
        if time.monotonic() > deadline:
            return f"nothing served 127.0.0.1:{port} after {START_TIMEOUT:.0f} s ({last})"
        try:
            wait_port(port, timeout=0.5)
        except TimeoutError:
            continue
        try:
            status = httpx.get(f"http://127.0.0.1:{port}/{collection}/", timeout=5.0, trust_env=False)
        except httpx.HTTPError as exc:
            last = f"GET /{collection}/ failed: {exc!r}"
            time.sleep(0.2)
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(0.2)  # a wayback that lost the port exits right after binding fails
        if proc.poll() is not None:
            return f"wayback exited with status {proc.returncode}"
        if status.status_code != 200:
            return f"pywb does not serve collection {collection!r} (GET /{collection}/: {status.status_code})"
        return None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running_pywb(
    warcs: list[Path], cdxj: Path | None, workdir: Path, *, collection: str = "coll"
) -> Iterator[PywbServer]:
    """pywb replaying ``warcs`` through ``cdxj`` (or, if None, an index pywb builds itself)."""
    ensure_pywb_venv()
    workdir.mkdir(parents=True, exist_ok=True)
    _layout(warcs, cdxj, workdir, collection)
    with _serving(workdir, collection) as server:
        yield server


@contextlib.contextmanager
def running_pywb_remote(index: str, workdir: Path, *, collection: str = "coll") -> Iterator[PywbServer]:
    """pywb with one collection whose ``index`` is a remote source (``cdx+URL``,
    ``memento+URL``): it has no WARCs of its own and loads what it replays from there."""
    ensure_pywb_venv()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.yaml").write_text(
        "# tests/archive/pywb.py: a collection of a remote source only\n"
        f"collections:\n  {collection}:\n    index: {json.dumps(index)}\n"
        "enable_memento: true\n"
        "debug: true\n"
    )
    with _serving(workdir, collection) as server:
        yield server


@contextlib.contextmanager
def _serving(workdir: Path, collection: str) -> Iterator[PywbServer]:
    log = workdir / "pywb.log"
    proc, port = _start(workdir, log, collection)
    try:
        with httpx.Client(timeout=START_TIMEOUT, trust_env=False, follow_redirects=False) as client:
            yield PywbServer(f"http://127.0.0.1:{port}", collection, workdir, log, client)
    finally:
        _stop(proc)
