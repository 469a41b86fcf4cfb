"""The typer application every command module registers itself on."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console

app = typer.Typer(
    name="web-index",
    help="Keep everything a crawler fetches, and answer questions about it fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Exit codes scripts can rely on.
EXIT_OK = 0
EXIT_FOUND_NOTHING = 1  # query/presence: at least one query matched nothing (with --fail-missing)
EXIT_USAGE = 2  # bad arguments or invalid input
EXIT_PROBLEMS = 3  # verify found problems
EXIT_STORE_ERROR = 4  # the store could not be read or written

# Messages and progress go to stderr; data goes to stdout.
err = Console(stderr=True)

StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        "-s",
        envvar="WEB_INDEX_STORE",
        help="Store folder or URL [env: WEB_INDEX_STORE; default: per-user folder].",
        show_default=False,
    ),
]


def fail(code: int, message: str) -> typer.Exit:
    """Print an error and return the ``typer.Exit`` to raise with ``code``."""
    err.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)
