"""The import layers of docs/architecture.md are checked (import-linter, in the
test command) and the check can fail: a lower layer importing a higher one
breaks it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(src: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(ROOT / "pyproject.toml")],
        capture_output=True, text=True, env=env, cwd=src.parent,
    )  # fmt: skip


def test_the_layers_hold() -> None:
    run = _lint(ROOT / "src")
    assert run.returncode == 0, run.stdout + run.stderr


def test_an_upward_import_breaks_them(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "web_index", src / "web_index")
    files = src / "web_index" / "storage" / "_files.py"
    files.write_text(files.read_text() + "\nimport web_index.query  # a storage module reaching up\n")
    run = _lint(src)
    assert run.returncode != 0
    assert "web_index.storage._files -> web_index.query" in run.stdout, run.stdout


def test_packages_meet_through_their_init_only() -> None:
    # A module of one package may import another package, never its private
    # modules (``web_index.storage._files``): each package's __init__ is its
    # internal API (names re-exported with ``as``), ``__all__`` its public one.
    import grimp

    graph = grimp.build_graph("web_index")
    reaching = []
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            parts = imported.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_") and i > 0), None)
            if private is None or private < 2:
                continue  # a top-level module of web_index (web_index._dsn) is shared by all
            owner = ".".join(parts[:private])
            if not (importer == owner or importer.startswith(owner + ".")):
                reaching.append(f"{importer} -> {imported}")
    assert reaching == []


# Run in a process of its own, on the tree at argv[1]: the import cycles between
# web_index's modules, one sorted list of modules per cycle (a strongly connected
# component of the import graph). grimp reads every import statement, those inside
# functions included; imports under ``if TYPE_CHECKING:`` are left out (never run).
_CYCLES = """
import json, sys
import grimp

graph = grimp.build_graph("web_index", exclude_type_checking_imports=True, cache_dir=None)
edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
index, low, stack, on, cycles = {}, {}, [], set(), []

def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        component = []
        while True:
            w = stack.pop()
            on.discard(w)
            component.append(w)
            if w == v:
                break
        if len(component) > 1:
            cycles.append(sorted(component))

sys.setrecursionlimit(10000)
for module in edges:
    if module not in index:
        visit(module)
print(json.dumps(sorted(cycles)))
"""


def _import_cycles(src: Path) -> list[list[str]]:
    env = {**os.environ, "PYTHONPATH": str(src)}
    run = subprocess.run([sys.executable, "-c", _CYCLES], capture_output=True, text=True, env=env, check=True)
    cycles: list[list[str]] = json.loads(run.stdout)
    return cycles


def test_no_module_imports_itself_through_others() -> None:
    # A cycle, even through an import inside a function, ties modules that must then
    # change together, and makes the order in which they are first imported matter.
    assert _import_cycles(ROOT / "src") == []


def test_an_import_in_a_function_that_closes_a_cycle_is_found(tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "web_index", src / "web_index")
    urls = src / "web_index" / "urls.py"  # imported by web_index.index, at the bottom of the layers
    urls.write_text(urls.read_text() + "\n\ndef _later() -> None:\n    import web_index.index  # noqa\n")
    cycles = _import_cycles(src)
    assert len(cycles) == 1 and {"web_index.urls", "web_index.index"} <= set(cycles[0]), cycles


def test_the_architecture_page_shows_the_contracts_layers() -> None:
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c["layers"] for c in config["contracts"] if c["type"] == "layers")
    page = (ROOT / "docs" / "architecture.md").read_text()
    block = page.split("tests/test_layers.py checks -->\n```text\n", 1)[1].split("```", 1)[0]
    shown = [line.split("  ", 1)[0].strip() for line in block.splitlines()]
    expected = [layer.replace("web_index.", "") for layer in layers]
    assert shown == expected


_LOOKUP = """
import sys
from datetime import UTC, datetime
from web_index import WebIndex
from web_index.archive import closest_capture, parse_cdx_query
from web_index.models import SimplePageQuery
from web_index.server import create_app
with WebIndex(sys.argv[1], read_only=True) as index:
    assert index.query([SimplePageQuery(url="https://example.com/a")])[0] is not None
    query = parse_cdx_query({"url": ["https://example.com/a"]})
    assert closest_capture(index, query, source="s") is not None
    assert list(index.captures("https://example.com/a"))
    create_app(index)
print(" ".join(sorted(m for m in ("polars", "pandas", "duckdb") if m in sys.modules)))
"""


def test_the_lookup_path_imports_no_dataframe_library(tmp_path: Path) -> None:
    """Opening a store, a query, a capture with its body and the archive server's app
    leave polars unimported: 27 MiB and ~120 ms a process that only looks records up
    would pay (a batch's RSS against pywb's is a target of its own)."""
    from tests.factories import attempt
    from web_index import WebIndex

    with WebIndex(tmp_path / "s") as index:
        index.insert(*attempt("https://example.com/a"))
        index.flush()
        index.compact()
    done = subprocess.run(
        [sys.executable, "-c", _LOOKUP, str(tmp_path / "s")], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "", done.stdout


_SERVE = """
import sys
import warnings
warnings.simplefilter("ignore")
import web_index.server
from starlette.testclient import TestClient
from web_index import WebIndex
from web_index.archive import closest_capture, find_captures, parse_cdx_query
from web_index.server import create_app
from web_index.ui import add_ui
assert "pyarrow" not in sys.modules, "imported by web_index.server"
url = "https://example.com/a"
with WebIndex(sys.argv[1], read_only=True) as index:
    for kind in ("get", "head"):
        query = parse_cdx_query({"url": [url], "type": [kind]})
        assert len(find_captures(index, query, source="s")) == 2
        found = closest_capture(index, query, source="s")
        assert found is not None and found.response.status_code == 200
        lines = list(index.captures(url, type=kind))
        assert len(lines) == 2
        for line in lines:
            response = index.capture_response(line, type=kind)
            assert response is not None and response.data == (b"<html>ok</html>" if kind == "get" else None)
    with TestClient(add_ui(create_app(index))) as http:
        assert len(http.get("/store/cdx", params={"url": url}).text.splitlines()) == 2
        assert http.get("/store/cdx", params={"url": url, "closest": "2024", "limit": "1"}).status_code == 200
        for kind in ("get", "head"):
            resource = http.get("/store/resource", params={"url": url, "type": kind})
            assert resource.status_code == 200, resource.text
print(" ".join(sorted(m for m in ("pyarrow", "polars", "pandas", "duckdb") if m in sys.modules)))
"""


def test_a_server_worker_looks_captures_up_without_pyarrow(tmp_path: Path) -> None:
    """``import web_index.server`` and, on a store whose every partition is compacted
    (capture indexes written, nothing buffered), the CDX API, the Resource API and
    ``WebIndex.captures`` + ``capture_response`` of GET and HEAD captures leave pyarrow
    unimported: a lookup reads the capture index and one data page, and a worker
    that only looks captures up should not carry pyarrow's ~45 MiB (issue 46)."""
    _leaves_pyarrow_out(_SERVE, tmp_path)


def _leaves_pyarrow_out(script: str, tmp_path: Path) -> None:
    """Run ``script`` on a compacted store of GET and HEAD captures of one URL in two months;
    it must pass, and print the heavy modules it imported: none."""
    from tests.factories import T0, attempt
    from web_index import WebIndex

    with WebIndex(tmp_path / "s") as index:
        for method in ("get", "head"):
            for days in (0, 45):  # two months
                index.insert(*attempt("https://example.com/a", T0 + timedelta(days=days), method=method))
        index.flush()
        index.compact()
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", done.stdout


def test_the_names_kept_without_pyarrow_are_the_schemas_own() -> None:
    """The column names that lookups and queries use without building a schema (so
    without importing pyarrow) are those of the schemas built on first use, and the
    names kept importable (``SCHEMAS``, ``RESULT_SCHEMA``, ``SCHEMA``) are those schemas."""
    from web_index import models
    from web_index.models import _io, _results_io
    from web_index.storage import _schema
    from web_index.storage.indexes import _month_format

    assert tuple(_io.query_schema().names) == _io._QUERY_COLUMNS
    assert _io.QUERY_SCHEMA is _io.query_schema()
    assert models.RESULT_SCHEMA is _results_io.RESULT_SCHEMA is _results_io.result_schema()
    assert _month_format.schema().names[:7] == _month_format.LOOKUP_COLUMNS
    assert _month_format.SCHEMA is _month_format.schema()
    assert _schema.SCHEMAS is _schema.schemas()
    for type, schema in _schema.SCHEMAS.items():
        assert set(_schema.KEY_COLUMNS[type]) | set(_schema.SORT_KEYS[type]) <= set(schema.names)


_BATCH = """
import sys
from datetime import datetime, timezone
from web_index import WebIndex
from web_index.models import Page, PageKey, SimplePageQuery, TimeAwarePageQuery
url = "https://example.com/a"
with WebIndex(sys.argv[1], read_only=True) as index:
    latest = index.query([SimplePageQuery(url=url), SimplePageQuery(url=url, type="head")])
    assert all(isinstance(r, Page) for r in latest), latest
    at = datetime(2024, 1, 1, tzinfo=timezone.utc)
    closest = index.query([TimeAwarePageQuery(url=url, timestamp=at)])[0]
    assert isinstance(closest, Page)
    again = index.query([PageKey(url=url, timestamp=closest.timestamp, request_id=closest.request_id)])[0]
    assert isinstance(again, Page) and again.responses[0].data == b"<html>ok</html>"
    assert index.query([SimplePageQuery(url="https://example.com/none")]) == [None]
print(" ".join(sorted(m for m in ("pyarrow", "polars", "pandas", "duckdb") if m in sys.modules)))
"""


def test_a_batch_on_an_indexed_store_reads_without_pyarrow(tmp_path: Path) -> None:
    """The standard's queries on a local store whose every partition is compacted and indexed
    find their winners in the month indexes' keys files and read them by place: no Parquet
    file is opened, and pyarrow's ~45 MiB stay out of the batch's memory (issue 46)."""
    _leaves_pyarrow_out(_BATCH, tmp_path)
