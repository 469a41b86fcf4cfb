"""The real pywb 2.10 for the benches: a collection over WARCs and a CDXJ, served by
``wayback`` (the front end) or ``warcserver`` (its CDX server and Resource API).

pywb lives in a virtualenv of its own, ``.pywb-venv`` at the repository root (built by
``scripts/pywb-venv.sh`` from ``tests/archive/pywb-requirements.txt``), because it pins old
dependencies. The layout is the one ``tests/archive/pywb.py`` writes (copied here: the benches
import nothing from ``tests/``)::

    workdir/config.yaml
    workdir/collections/<coll>/archive/<warc>       symlinks to the WARCs
    workdir/collections/<coll>/indexes/index.cdxj   a symlink to the CDXJ

pywb reads the CDXJ by binary search, so it must be sorted as bytes (``export_warcs`` writes it
so); the JSON's ``filename`` is relative to ``archive/``.

``wayback`` serves ``/<coll>/cdx`` by asking its own in-process ``warcserver`` over HTTP (a new
connection per query, ``requests.get``) and ``/<coll>/<ts>id_/<url>`` by asking its
``/resource/postreq``; ``warcserver`` alone answers ``/<coll>/index`` (the CDX server) and
``/<coll>/resource`` (the Resource API: the capture's WARC record) directly.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from _procs import free_port

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".pywb-venv"
START_TIMEOUT = 90.0  # the first start (cold imports, .pyc writing) can be slow


def pywb_bin(name: str) -> Path:
    return VENV / "bin" / name


def check_venv() -> str:
    """pywb's version, or SystemExit saying how to get the venv."""
    if not pywb_bin("wayback").exists():
        raise SystemExit(f"no pywb venv at {VENV}: run scripts/pywb-venv.sh first")
    done = subprocess.run(
        [str(pywb_bin("python")), "-c", "import importlib.metadata as m; print(m.version('pywb'))"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def clean_env() -> dict[str, str]:
    """This environment without what would leak .venv into pywb's interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def layout(workdir: Path, warcs: list[Path], cdxj: Path, collection: str) -> None:
    """A fresh pywb folder in ``workdir`` with one collection over ``warcs`` and ``cdxj``."""
    coll = workdir / "collections" / collection
    for sub in ("archive", "indexes"):
        (coll / sub).mkdir(parents=True, exist_ok=True)
        for old in (coll / sub).iterdir():
            old.unlink()
    (workdir / "config.yaml").write_text(
        "# bench/_pywb.py: replay only, no live web, no recording\n"
        "collections_root: collections\n"
        "archive_paths: archive\n"
        "index_paths: indexes\n"
        "enable_memento: true\n"
    )
    for w in warcs:
        (coll / "archive" / w.name).symlink_to(w.resolve())
    (coll / "indexes" / "index.cdxj").symlink_to(cdxj.resolve())


# gevent's pywsgi leaves Nagle's algorithm on: a chunked answer goes out in several writes, the
# last of which waits for the ACK of the previous one, which a keep-alive client delays (~40 ms on
# Linux). ``start(..., nodelay=True)`` loads this into pywb's interpreter to see pywb without it.
_NODELAY = """import socket
from gevent import pywsgi

_handle = pywsgi.WSGIHandler.handle


def handle(self):
    self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return _handle(self)


pywsgi.WSGIHandler.handle = handle
"""


# pywb's warcserver as a WSGI application, for gunicorn's gevent workers (pywb's own
# warcserverapp.py serves a $live collection only; its CLI makes this one).
_WARCSERVER_APP = """from gevent.monkey import patch_all; patch_all()
from pywb.warcserver.warcserver import WarcServer

application = WarcServer()
"""


def start(
    kind: str, workdir: Path, collection: str, *, nodelay: bool = False, workers: int = 1
) -> tuple[subprocess.Popen[Any], str]:
    """``wayback`` or ``warcserver`` over ``workdir`` on a free loopback port, once it serves
    ``collection``: the process and its base URL. Its log (gevent writes a line a request, as
    pywb does out of the box) goes to ``workdir/<kind>.log``. ``nodelay``: with ``TCP_NODELAY``
    set on every connection it accepts (a ``sitecustomize`` on its ``PYTHONPATH``); pywb as
    shipped does not set it. ``workers`` above 1 (``warcserver`` only): that many processes
    under gunicorn's gevent workers, as pywb is deployed behind a WSGI server (gunicorn sets
    ``TCP_NODELAY`` on its listening socket, which accepted connections inherit)."""
    port = free_port()
    args = [str(pywb_bin(kind)), "--bind", "127.0.0.1", "--port", str(port)]
    if kind == "wayback":
        args += ["-d", str(workdir)]
    if workers > 1:
        if kind != "warcserver":
            raise ValueError("several pywb workers: warcserver only")
        (workdir / "pywb_warcserver_app.py").write_text(_WARCSERVER_APP)
        args = [str(pywb_bin("gunicorn")), "--worker-class", "gevent", "--workers", str(workers),
                "--bind", f"127.0.0.1:{port}", "--chdir", str(workdir),
                "pywb_warcserver_app:application"]  # fmt: skip
    env = clean_env()
    if nodelay:
        (workdir / "nodelay").mkdir(exist_ok=True)
        (workdir / "nodelay" / "sitecustomize.py").write_text(_NODELAY)
        env["PYTHONPATH"] = str(workdir / "nodelay")
    log = workdir / f"{kind}.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(args, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    # wayback: the collection's page; warcserver: the collection's index among its sources.
    probe, expect = (f"/{collection}/", "") if kind == "wayback" else (f"/{collection}/list_sources", ".cdxj")
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{kind} exited with status {proc.returncode}; see {log}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{kind} did not serve {collection!r} within {START_TIMEOUT:.0f} s; see {log}")
        try:
            r = httpx.get(base + probe, timeout=5.0, trust_env=False)
            if r.status_code == 200 and expect in r.text:
                return proc, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
