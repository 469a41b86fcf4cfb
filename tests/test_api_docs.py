"""Every name a public module exports is documented (docs/api.md, docs/fetch.md
for the fetchers), and every name the docs give as one of a module's exists."""

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
