"""Every name a public module exports is documented (docs/api.md; docs/fetch.md
for the fetchers, docs/archive.md for archives, docs/pipeline.md for the crawl
and site search), and every name the docs give as one of a module's exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = {
    "web_index": "api.md",
    "web_index.models": "api.md",
    "web_index.errors": "api.md",
    "web_index.read_only": "api.md",
    "web_index.storage": "api.md",
    "web_index.ingest": "api.md",
    "web_index.query": "api.md",
    "web_index.fetch": "fetch.md",
    "web_index.archive": "archive.md",
    "web_index.crawl": "pipeline.md",
    "web_index.search": "pipeline.md",
    "web_index.server": "server.md",
    "web_index.ui": "ui.md",
}


@pytest.mark.parametrize("module", sorted(PAGES))
def test_every_export_is_documented(module: str) -> None:
    text = (DOCS / PAGES[module]).read_text()
    names = importlib.import_module(module).__all__
    missing = [n for n in names if not re.search(r"`[^`\n]*\b" + re.escape(n) + r"\b[^`\n]*`", text)]
    assert missing == [], f"{module} exports {missing}, which {PAGES[module]} does not mention"


def test_every_documented_layer_name_exists() -> None:
    # Names the docs give as `storage.X`, `ingest.X`, `query.X`, `web_index.X`.
    text = (DOCS / "api.md").read_text()
    for package, name in re.findall(
        r"`(?:web_index\.)?(storage|ingest|query|models|errors)\.([A-Za-z_]+)", text
    ):
        module = importlib.import_module(f"web_index.{package}")
        assert name in module.__all__, (
            f"docs/api.md names {package}.{name}, which web_index.{package} does not export"
        )


def test_the_fetch_settings_table_matches_the_dataclasses() -> None:
    import ast
    import dataclasses

    import web_index.fetch as fetch

    page = (DOCS / "api.md").read_text()
    section = page.split("## Fetching settings", 1)[1].split("\n## ", 1)[0]
    checked = 0
    for name in ("AddressPolicy", "FetchLimits", "EscalationPolicy", "FetchConfig"):
        row = next(line for line in section.splitlines() if line.startswith(f"| `{name}` |"))
        defaults = {f.name: f for f in dataclasses.fields(getattr(fetch, name))}
        instance = getattr(fetch, name)()
        for field, value in re.findall(r"`(\w+)(?:=([^`]*))?`", row.split("|")[2]):
            assert field in defaults or field in dir(instance), (
                f"{name}.{field} is documented but does not exist"
            )
            if value:
                try:
                    documented = ast.literal_eval(value)
                except (ValueError, SyntaxError):
                    continue  # prose such as 16 MiB
                assert getattr(instance, field) == documented, f"{name}.{field}"
                checked += 1
    assert checked >= 20
