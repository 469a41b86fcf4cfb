"""A light install: without the extras (obstore, psycopg, Playwright) a local
store, the HTTP fetcher and the CLI work, and each part that needs an extra
says in one line which to install. Run in a child interpreter where those
modules cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BLOCK = """
import sys
for absent in ("obstore", "psycopg", "psycopg_binary", "playwright"):
    sys.modules[absent] = None  # as if not installed: importing it raises ModuleNotFoundError
"""


def _light(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = BLOCK + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )  # fmt: skip


def test_a_local_store_needs_no_extra(tmp_path: Path) -> None:
    run = _light(
        """
        import json, sys
        from datetime import UTC, datetime
        from web_index import WebIndex
        import web_index.fetch, web_index.cli, web_index.read_only
        from web_index.models import AttemptMetadata, SimplePageQuery
        with WebIndex(sys.argv[1]) as index:
            t = datetime(2026, 1, 2, tzinfo=UTC)
            meta = AttemptMetadata(state="retryable-error", url="https://example.com/", fetcher_name="f",
                                   fetcher_version="1", fetcher_calibre=10)
            index.insert("get", "https://example.com/", t, meta)
            index.flush()
            found = index.query([SimplePageQuery(type="get-metadata", url="https://example.com/")])
        extras = ("obstore", "psycopg", "playwright")
        loaded = sorted(n for n, m in sys.modules.items() if m and n.partition(".")[0] in extras)
        print(json.dumps({"state": str(found[0].state), "loaded": loaded,
                          "browser": web_index.fetch.chromium_available()}))
        """,
        str(tmp_path / "store"),
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"state": "retryable-error", "loaded": [], "browser": False}


@pytest.mark.parametrize(
    ("code", "extra"),
    [
        ("from web_index import WebIndex; WebIndex('s3://bucket/store')", "s3"),
        ("from web_index.storage.backends import S3Backend", "s3"),
        ("import web_index; web_index.WebIndex(sys.argv[1], buffer='postgresql://h/x')", "postgres"),
        ("from web_index.storage import PostgresBuffer", "postgres"),
        ("from web_index.fetch import BrowserFetcher", "browser"),
    ],
)
def test_a_part_that_needs_an_extra_names_it(tmp_path: Path, code: str, extra: str) -> None:
    run = _light(
        f"""
        import sys
        from web_index.errors import MissingExtraError
        try:
            {code}
        except MissingExtraError as exc:
            print(exc)
        """,
        str(tmp_path / "store"),
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().endswith(f"pip install 'web-index[{extra}]'"), run.stdout


def test_the_cli_says_it_in_one_line(tmp_path: Path) -> None:
    run = _light(
        """
        import sys
        from web_index.cli import main
        sys.argv = ["web-index", "stats", "--store", "s3://bucket/store"]
        main()
        """
    )
    assert run.returncode == 4, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'web-index[s3]'" in lines[0], run.stderr
