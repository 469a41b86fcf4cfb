"""The ``web-index`` command line."""

from __future__ import annotations

from web_index.cli import _archive, _crawl, _fetch, _insert, _query, _serve, _store  # noqa: F401 - register their commands
from web_index.cli._app import app
from web_index.cli._help import arrange

arrange(app)

__all__ = ["app", "main"]


def main() -> None:
    app()
