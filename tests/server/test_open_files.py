"""A server keeps its store's files open, a share of what the process may open: ``serve``
raises the process's soft limit to its hard one (at most 65,536), and the local backend's
descriptors follow the limit as it is when one is let go, not as it was when the store opened.
Each runs in a process of its own: it changes the process's limit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_serve_raises_the_soft_limit_of_open_files() -> None:
    out = _run(
        """
        import resource
        from web_index.server._app import _more_open_files
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
        _more_open_files()
        want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
        print(resource.getrlimit(resource.RLIMIT_NOFILE) == (want, hard), want > 256)
        """
    )
    assert out in ("True True", "True False")  # False: a hard limit of 256 or less, nothing to raise


def test_the_files_kept_open_follow_the_limit_as_it_is_now(tmp_path: Path) -> None:
    for n in range(600):
        (tmp_path / f"f{n}.bin").write_bytes(b"x" * 64)
    out = _run(
        f"""
        import resource
        from pathlib import Path
        from web_index.storage.backends.local import LocalBackend
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        top = 8192 if hard == resource.RLIM_INFINITY else min(hard, 8192)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, top), hard))
        backend = LocalBackend(Path({str(tmp_path)!r}))
        for n in range(100):
            assert backend.read_range(f"f{{n}}.bin", 0, 8) == b"x" * 8
        low = len(backend._descriptors._open)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))
        for n in range(600):
            assert backend.read_range(f"f{{n}}.bin", 0, 8) == b"x" * 8
        print(low, len(backend._descriptors._open), top)
        """
    )
    low, high, top = map(int, out.split())
    assert low == max(16, min(256, top) // 8)
    assert high == min(600, max(16, top // 8))
    assert top < 512 or high > low  # the limit raised, more kept
