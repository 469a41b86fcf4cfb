"""The typer application every command module registers itself on."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, BinaryIO

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from web_index.errors import ClusterError, InvalidRecordError, WebIndexError
from web_index.index import WebIndex
from web_index.read_only import default_store

app = typer.Typer(
    name="web-index",
    help="Keep everything a crawler fetches, and answer questions about it fast.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from web_index import __version__

        sys.stdout.write(f"web-index {__version__}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Keep everything a crawler fetches, and answer questions about it fast."""


# Exit codes scripts can rely on.
EXIT_OK = 0
EXIT_FOUND_NOTHING = 1  # query/presence: at least one query matched nothing (with --fail-missing)
EXIT_USAGE = 2  # bad arguments or invalid input
EXIT_PROBLEMS = 3  # verify found problems
EXIT_STORE_ERROR = 4  # the store could not be read or written
EXIT_UNAVAILABLE = 5  # timed out waiting: a routed search no searcher answered, a crawl that did not settle


def _console(*, stderr: bool) -> Console:
    console = Console(stderr=stderr)
    if not console.is_terminal:  # a file or a pipe: a line is never wrapped, a cell never cut
        console = Console(stderr=stderr, width=1 << 16)
    return console


# Messages and progress go to stderr; data and tables go to stdout.
err = _console(stderr=True)
out = _console(stderr=False)


def new_table(*columns: str, title: str | None = None, right: tuple[str, ...] = ()) -> Table:
    """A table for ``out`` whose cells are folded onto more lines, never cut short
    (off a terminal the console is wide enough that nothing folds); the columns
    in ``right`` are right-aligned (numbers)."""
    made = Table(title=title)
    for column in columns:
        made.add_column(column, justify="right" if column in right else "left", overflow="fold")
    return made


StoreOption = Annotated[
    str,
    typer.Option(
        "--store",
        "-s",
        envvar="WEB_INDEX_STORE",
        help="Store folder or s3:// URL (default: the per-user store, ~/.local/share/web-index/store).",
        show_default=False,
    ),
]


BufferOption = Annotated[
    str | None,
    typer.Option(
        "--buffer",
        envvar="WEB_INDEX_BUFFER",
        help="A shared PostgreSQL insert buffer (postgresql://...) (default: SQLite beside the store).",
        show_default=False,
    ),
]


SchedulerOption = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        envvar="WEB_INDEX_SCHEDULER",
        help="Run on this Dask cluster (tcp://host:port; the dask extra); its workers open --store "
        "themselves (docs/scale.md).",
        show_default=False,
    ),
]


def jobs_option(help: str) -> Any:
    """``--jobs N`` (``WEB_INDEX_JOBS``), for a command whose work ``help`` says."""
    return typer.Option("--jobs", "-j", min=1, envvar="WEB_INDEX_JOBS", help=help, show_default=False)


JobsOption = Annotated[
    int | None,
    jobs_option(
        "Processes that write the store's files (default: this machine's cores; 1 for an input under 32 MB)."
    ),
]


def jobs_of(jobs: int | None, input_bytes: int | None) -> int:
    """``--jobs`` as given; else every core, or one for an input known to be small (starting
    worker processes costs about a second, more than such a load takes)."""
    if jobs is not None:
        return jobs
    if input_bytes is not None and input_bytes < _SMALL_INPUT:
        return 1
    return os.cpu_count() or 1


_SMALL_INPUT = 32_000_000


DurableOption = Annotated[
    bool,
    typer.Option(
        envvar="WEB_INDEX_DURABLE",
        help="fsync every batch (--no-durable: faster; a killed process loses nothing, a power cut may).",
    ),
]


def store_location(store: str | None) -> str:
    """The store a command works on: ``--store``, else the default store."""
    return store or default_store()


def open_index(
    location: str, buffer: str | None, *, read_only: bool = False, create: bool = False, durable: bool = True
) -> WebIndex:
    """The store at ``location``. Only the commands that fill a store (init,
    insert, fetch, import-warc, crawl, worker, demo) create one, and only where
    there is nothing; the others fail (exit 4) on a location that is not a
    store, instead of answering from nothing (docs/cli.md)."""
    return WebIndex(location, read_only=read_only, buffer=buffer or None, create=create, durable=durable)


def progress_bar() -> Progress:
    """A progress bar on stderr, shown only when stderr is a terminal."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
        disable=not err.is_terminal,
    )


def plural(n: int, noun: str) -> str:
    """``n`` and its noun agreeing, the one way the CLI counts: "1 attempt",
    "2 attempts", "3 queries", "1,000 files"."""
    if n == 1:
        return f"{n:,} {noun}"
    if noun.endswith("y") and noun[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{n:,} {noun[:-1]}ies"
    return f"{n:,} {noun}{'es' if noun.endswith(('s', 'x', 'ch', 'sh')) else 's'}"


def say(label: str, message: object) -> None:
    """One line on stderr: ``label`` (markup, may be empty) then ``message`` (plain text).

    Messages quote the user's input, so they are escaped (a URL such as
    ``http://[fe80::1]/`` or a ``[/x]`` is not markup) and never wrapped
    (a script reads one problem a line).
    """
    text = escape(" ".join(str(message).splitlines()))
    err.print(f"{label} {text}" if label else text, highlight=False, soft_wrap=True)


def fail(code: int, message: str) -> typer.Exit:
    """Print an error and return the ``typer.Exit`` to raise with ``code``."""
    say("[bold red]error:[/]", message)
    return typer.Exit(code)


def os_problem(exc: OSError) -> str:
    """An ``OSError`` as "path: reason" (``str()`` adds ``[Errno n]`` noise)."""
    if exc.strerror and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc) or type(exc).__name__


def cannot_read(exc: OSError, option: str | None = None) -> str:
    """The one message for an input file that cannot be read: ``--from: cannot
    read x.txt: No such file or directory``, named by the option that gave it
    (an argument's file by itself)."""
    return (f"{option}: " if option else "") + f"cannot read {os_problem(exc)}"


def open_input(source: str | Path, option: str | None = None) -> BinaryIO:
    """An input file open to read (``-``: stdin); one that cannot be opened is
    exit 2 with :func:`cannot_read`'s message."""
    if str(source) == "-":
        return sys.stdin.buffer
    try:
        return open(source, "rb")
    except OSError as exc:
        raise fail(EXIT_USAGE, cannot_read(exc, option)) from None


def read_text_input(source: str | Path, option: str | None = None) -> str:
    """The whole text of an input file (``-``: stdin), UTF-8; else exit 2, saying
    it cannot be read or is not UTF-8 text."""
    handle = open_input(source, option)
    try:
        data = handle.read()
    except OSError as exc:
        raise fail(EXIT_USAGE, cannot_read(exc, option)) from None
    finally:
        if handle is not sys.stdin.buffer:
            handle.close()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise fail(EXIT_USAGE, f"{option + ' ' if option else ''}{source}: not UTF-8 text") from None


# What every time option's help says it takes: the forms of models.parse_when.
TIMES = "UTC: 2024-08-01, 20240801120000 (4-14 digits), 7d/12h ago, or ISO 8601 (a zone optional)"


def time_option(value: str | None, option: str, *, end: bool = False) -> datetime | None:
    """The time a time option (``--at``, ``--from``, ...) names, by the one parser
    of times (ages counted back from now); one it cannot read is a usage error
    naming ``option``. With ``end``, a date or short timestamp reaches its last moment."""
    if value is None:
        return None
    from web_index.models import parse_when

    try:
        return parse_when(value, option, end=end, now=datetime.now(UTC))
    except InvalidRecordError as exc:
        raise fail(EXIT_USAGE, str(exc)) from None


AllowLoopback = Annotated[bool, typer.Option(help="Allow 127.0.0.0/8 and ::1.")]
AllowPrivate = Annotated[
    bool, typer.Option(help="Allow private ranges (10/8, 172.16/12, 192.168/16, fc00::/7).")
]


@contextmanager
def cli_errors(location: str) -> Iterator[None]:
    """The documented exit codes for what escapes a command's work on the store
    at ``location``, each in one line: invalid input 2, and 4 for a store that
    could not be read or written, however it failed (a ``StoreError``, or an
    ``OSError`` or SQLite error from below: a full disk surfaces as either);
    5 for a Dask scheduler that could not be reached (``--scheduler``)."""
    try:
        yield
    except InvalidRecordError as exc:
        raise fail(EXIT_USAGE, str(exc)) from None
    except ClusterError as exc:
        raise fail(EXIT_UNAVAILABLE, str(exc)) from None
    except WebIndexError as exc:
        raise fail(EXIT_STORE_ERROR, str(exc)) from None
    except OSError as exc:
        raise fail(EXIT_STORE_ERROR, f"store {location}: {os_problem(exc)}") from None
    except sqlite3.Error as exc:
        raise fail(EXIT_STORE_ERROR, f"store {location}: insert buffer: {exc}") from None
