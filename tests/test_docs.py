"""Every code block of the README and docs/ runs as written, and the CLI
reference in docs/cli.md is the one the app renders (cog).

``python`` blocks run in order, one namespace per page; ``sh`` blocks run in
bash (``-euo pipefail``) with the project's ``web-index`` on PATH; ``json``
blocks are parsed line by line. Each page runs in a fresh folder with its own
``WEB_INDEX_STORE``. ``text`` and ``mermaid`` blocks are not code. A block
that cannot run here says why in a ``<!-- not run: ... -->`` comment above it.
deploy.md's example bucket and database are the test servers' (SeaweedFS,
PostgreSQL), by replacing those two strings.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.servers import BUCKET, Postgres, SeaweedFS

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(
    r"(?P<note><!-- not run: (?P<why>[^>]*)-->\n)?^```(?P<lang>[\w-]*)\n(?P<code>.*?)^```$", re.M | re.S
)
_NOT_CODE = {"text", "mermaid"}


@dataclass
class Block:
    page: Path
    line: int
    lang: str
    code: str
    not_run: str | None


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, m.start("code")), m["lang"], m["code"], m["why"])
        for m in _FENCE.finditer(text)
    ]


def test_every_block_says_what_it_is() -> None:
    for page in PAGES:
        for b in blocks(page):
            assert b.lang in {"python", "sh", "json", *_NOT_CODE}, f"{b.page.name}:{b.line}: ```{b.lang}"
            assert b.not_run is None or b.not_run.strip(), f"{b.page.name}:{b.line}: say why it is not run"


def _run_page(page: Path, tmp_path: Path, replace: dict[str, str], env: dict[str, str]) -> int:
    namespace: dict[str, object] = {"__name__": "__main__"}
    ran = 0
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for b in blocks(page):
            if b.not_run is not None or b.lang in _NOT_CODE:
                continue
            code = b.code
            for old, new in replace.items():
                code = code.replace(old, new)
            where = f"{page.name}:{b.line}"
            if b.lang == "python":
                exec(compile(code, where, "exec"), namespace)  # the docs' own examples
            elif b.lang == "sh":
                returncode, out, err = _run_shell(code, tmp_path, env)
                assert returncode == 0, f"{where}: exit {returncode}\n{out}\n{err}"
            else:
                for line in code.splitlines():
                    json.loads(line)
            ran += 1
    finally:
        os.chdir(cwd)
    return ran


def _run_shell(code: str, cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    """Run a block in bash; then stop whatever it started in the background and left running
    (a server a failing block never reached its ``kill`` for would hold its port for the next run)."""
    shell = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", code], cwd=cwd, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = shell.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(shell.pid, signal.SIGTERM)
        shell.wait()
    return shell.returncode, out, err


def _env(tmp_path: Path) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{bindir}:{os.environ['PATH']}",
        "WEB_INDEX_STORE": str(tmp_path / "store"),
    }


@pytest.mark.parametrize("page", [p for p in PAGES if p.name != "deploy.md"], ids=lambda p: p.name)
def test_the_page_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(tmp_path)
    monkeypatch.setenv("WEB_INDEX_STORE", env["WEB_INDEX_STORE"])
    _run_page(page, tmp_path, {}, env)


def test_the_deploy_page_runs_on_s3_and_postgres(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seaweed: SeaweedFS, postgres: Postgres
) -> None:
    env = {**_env(tmp_path), **seaweed.env()}
    for key, value in seaweed.env().items():
        monkeypatch.setenv(key, value)
    replace = {
        "s3://my-bucket/web-index": f"s3://{BUCKET}/docs-{tmp_path.name}",
        "postgresql://crawler@db.internal/webindex": postgres.new_database(),
    }
    assert _run_page(ROOT / "docs" / "deploy.md", tmp_path, replace, env) >= 1


def test_the_cli_reference_is_current() -> None:
    run = subprocess.run(
        [str(Path(sys.executable).parent / "cog"), "--check", "docs/cli.md"], cwd=ROOT,
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, (
        "docs/cli.md is out of date: run `.venv/bin/cog -r docs/cli.md`\n" + run.stdout
    )
