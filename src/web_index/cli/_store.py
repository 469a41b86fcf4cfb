"""Keeping the store: flush, compact, verify, stats (asking it: ``_query``; filling it: ``_insert``)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.markup import escape

from web_index.cli._app import (
    EXIT_PROBLEMS,
    EXIT_USAGE,
    BufferOption,
    SchedulerOption,
    StoreOption,
    app,
    cli_errors,
    err,
    fail,
    new_table,
    open_index,
    out,
    plural,
    progress_bar,
    say,
    store_location,
)


@app.command()
def init(
    ctx: typer.Context,
    location: Annotated[
        str | None,
        typer.Argument(help="Folder or s3:// URL (default: --store, WEB_INDEX_STORE, per-user folder)."),
    ] = None,
    store: StoreOption = "",
) -> None:
    """Create an empty store (a store that exists already is left as it is)."""
    # Typer carries its own click: its ParameterSource is known by name. WEB_INDEX_STORE may stand.
    given = getattr(ctx.get_parameter_source("store"), "name", None) == "COMMANDLINE"
    if location and store and given:
        raise fail(
            EXIT_USAGE, f"init {location} --store {store}: give the store once, as LOCATION or --store"
        )
    where = location or store_location(store)
    with cli_errors(where), open_index(where, None, create=True) as index:
        say("", f"a web-index store at {index.location}")


@app.command()
def flush(store: StoreOption = "", buffer: BufferOption = None) -> None:
    """Write every buffered insert into Parquet part files."""
    location = store_location(store)
    with cli_errors(location), open_index(location, buffer) as index:
        moved = index.flush()
    err.print(f"flushed {plural(moved, 'attempt')}")


@app.command()
def compact(
    store: StoreOption = "",
    buffer: BufferOption = None,
    min_parts: Annotated[
        int,
        typer.Option(
            help="Only partitions with at least this many part files; 0 also rewrites files written"
            " by an older version (older format, big bodies without pages)."
        ),
    ] = 1,
    scheduler: SchedulerOption = None,
) -> None:
    """Roll each partition's part files into one <domain>.parquet (safe while others write).

    Then bring the month key indexes up to date and write the capture index of every compacted
    file that has none. With --scheduler, one task a partition on that Dask cluster."""
    location = store_location(store)
    with cli_errors(location), open_index(location, buffer) as index:
        index.flush()
        with progress_bar() as progress:
            task = progress.add_task("compacting", total=None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            done = index.compact(min_parts=min_parts, scheduler=scheduler, on_progress=advance)
    err.print(f"compacted {plural(done, 'partition')}")


@app.command()
def verify(store: StoreOption = "", buffer: BufferOption = None) -> None:
    """Check every file and invariant of the store; report, change nothing.

    Exit 0 if clean, 3 if problems were found.
    """
    from web_index.storage import verify as run_verify

    location = store_location(store)
    with (
        cli_errors(location),
        open_index(location, buffer, read_only=True) as index,
        progress_bar() as progress,
    ):
        task = progress.add_task("verifying", total=None)

        def step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = run_verify(index._store, step)
    for note in report.notes:
        say("[cyan]note[/]", note)
    for problem in report.problems:
        say("[red]problem[/]", problem)
    err.print(
        f"checked {plural(report.files, 'file')}, {plural(report.records, 'record')}, "
        f"{plural(report.buffered_attempts, 'buffered attempt')}: "
        + ("[green]clean[/]" if report.ok else f"[red]{plural(len(report.problems), 'problem')}[/]")
    )
    if not report.ok:
        raise typer.Exit(EXIT_PROBLEMS)


@app.command()
def stats(
    store: StoreOption = "",
    buffer: BufferOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Records, bytes and files per type, month and domain."""
    location = store_location(store)
    with cli_errors(location), open_index(location, buffer, read_only=True) as index:
        result = index.stats()
    if as_json:
        from dataclasses import asdict

        payload = {
            "partitions": [asdict(p) for p in result.partitions],
            "records": result.records,
            "bytes": result.bytes,
            "files": result.files,
            "buffered_attempts": result.buffered_attempts,
            "buffered_bytes": result.buffered_bytes,
        }
        sys.stdout.write(json.dumps(payload) + "\n")
        return
    out.print(f"web-index store {escape(index.location)}", soft_wrap=True)  # not a title: never wrapped
    numbers = ("records", "bytes", "part files")
    table = new_table("type", "month", "domain", *numbers, "compacted", right=numbers)
    for p in result.partitions:
        table.add_row(
            p.type,
            f"{p.year}-{p.month:02d}",
            p.domain,
            f"{p.records:,}",
            f"{p.bytes:,}",
            str(p.part_files),
            "yes" if p.compacted else "",
        )
    out.print(table)
    out.print(
        f"{plural(result.records, 'record')} in {plural(result.files, 'file')} "
        f"({plural(result.bytes, 'byte')}); {plural(result.buffered_attempts, 'attempt')} buffered"
    )
