"""``web-index insert``: insertion requests from JSONL into the store."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import Annotated, BinaryIO, NamedTuple

import typer
from rich.progress import Progress, TaskID

from web_index._bulk_load import BulkLoad
from web_index._insert_lines import Inserter, RefusedLineError, batches, insert_on_workers
from web_index._on_cluster import shared_location
from web_index.cli._app import (
    EXIT_USAGE,
    BufferOption,
    DurableOption,
    JobsOption,
    StoreOption,
    app,
    cli_errors,
    err,
    fail,
    jobs_of,
    open_index,
    open_input,
    plural,
    say,
    store_location,
)
from web_index.cli._pace import pace, paced_progress
from web_index.index import InsertItem, WebIndex
from web_index.ingest import iter_insert_lines

__all__ = ["insert"]


class _UnreadableInputError(Exception):
    """The input could not be read on (an I/O error, not an invalid line)."""


class _Input:
    """The input's lines, and how many of its bytes were read so far."""

    def __init__(self, handle: BinaryIO, name: str) -> None:
        self.handle = handle
        self.name = name
        self.read = 0

    def __iter__(self) -> Iterator[bytes]:
        # Told apart from the store's OSErrors: a broken input is the caller's (exit 2).
        try:
            for line in self.handle:
                self.read += len(line)
                yield line
        except OSError as exc:
            raise _UnreadableInputError(f"cannot read {self.name}: {exc.strerror or exc}") from None


@app.command()
def insert(
    source: Annotated[str, typer.Argument(help="JSONL file of insertion requests, or - for stdin.")] = "-",
    store: StoreOption = "",
    buffer: BufferOption = None,
    durable: DurableOption = True,
    batch: Annotated[int, typer.Option(min=1, help="Requests per durable transaction.")] = 1000,
    skip_invalid: Annotated[bool, typer.Option(help="Report invalid lines and go on.")] = False,
    bulk: Annotated[
        bool,
        typer.Option(
            help="Load straight into compacted Parquet, past the insert buffer: for large files "
            "(visible when the load ends; see docs/performance.md)."
        ),
    ] = False,
    jobs: JobsOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the totals as one JSON object.")] = False,
) -> None:
    """Insert fetch attempts from JSONL (the standard's insertion requests).

    One request per line: {"type", "url", "timestamp", "metadata", "data"}, with
    bodies base64-encoded. Lines are stored in batches; on an invalid line the
    command stops (exit 2) after storing every valid line before it, and says so.
    With --skip-invalid every valid line is stored and every invalid one reported.
    With --bulk the lines go straight into compacted, indexed Parquet files (no
    flush or compact to run after), written when the input ends by --jobs processes,
    which also read a file's lines (not stdin's), a range each.
    """
    started = time.monotonic()
    location = store_location(store)
    name = "<stdin>" if source == "-" else source
    # Bytes, not text: lines split on "\n" only, and one that is not UTF-8 is refused alone.
    handle = open_input(source)  # closed below, after the store
    size = _size(handle) if source != "-" else None
    try:
        with (
            cli_errors(location),
            open_index(location, buffer, create=True, durable=durable) as index,
            paced_progress(
                "loading" if bulk else "inserting", "{task.fields[requests]:,} requests", started
            ) as progress,
        ):
            task = progress.add_task("insert", total=size, requests=0, pace=pace(0, 0, 0.0, size))

            def on_stored(stored: int, read: int) -> None:
                now = pace(read, stored, time.monotonic() - started, size)
                progress.update(task, completed=read, requests=stored, pace=now)

            with contextlib.ExitStack() as stack:
                add = index.insert_many
                workers = False
                if bulk:

                    def on_written(done: int, total: int) -> None:
                        # The input read whole: what is left is the files, told as they are written.
                        _say_left(progress, task, f"writing files {done:,}/{total:,}")

                    load = index.bulk_load(on_progress=on_written, jobs=jobs_of(jobs, size))
                    add = stack.enter_context(load).add
                    # A file (not a pipe: it cannot be read again) is read by the load's workers,
                    # a range of its lines each.
                    workers = size is not None and load.has_workers and index._reopenable
                how = _How(name, batch, skip_invalid, on_stored)
                if workers:
                    totals = _on_workers(index, load, source, how)
                else:
                    totals = _insert_lines(index, add, _Input(handle, name), how)
            _say_left(progress, task, "stored")
    finally:
        if source != "-":
            handle.close()
    stored, skipped = totals
    if as_json:
        seconds = time.monotonic() - started
        sys.stdout.write(
            json.dumps({"stored": stored, "skipped": skipped, "seconds": round(seconds, 3)}) + "\n"
        )
        return
    more = f", skipped {skipped} invalid" if skipped else ""
    err.print(f"stored {plural(stored, 'attempt')}{more}", highlight=False)


class _How(NamedTuple):
    """How the input's lines are stored: its name in messages, the batch, whether an
    invalid line is skipped, and what is told the requests stored so far."""

    name: str
    batch: int
    skip_invalid: bool
    on_stored: Callable[[int, int], object]  # told the requests stored, the input's bytes read


def _insert_lines(
    index: WebIndex, add: Callable[[list[InsertItem]], object], source: _Input, how: _How
) -> tuple[int, int]:
    """The input's lines read here, a batch at a time."""
    inserter = Inserter(index.limits, add, how.name, how.skip_invalid, _skipped)
    lines = iter_insert_lines(source, how.name)
    try:
        for chunk in batches(
            lines, how.batch, stop_at_error=not how.skip_invalid, broken=_UnreadableInputError
        ):
            inserter.store(chunk)
            how.on_stored(inserter.stored, source.read)
    except _UnreadableInputError as exc:
        raise fail(EXIT_USAGE, f"{exc} ({_stored(inserter.stored)} before it)") from None
    except RefusedLineError as exc:
        raise fail(EXIT_USAGE, f"{exc.error} ({_stored(exc.stored)} before it)") from None
    return inserter.stored, inserter.skipped


def _on_workers(index: WebIndex, load: BulkLoad, source: str, how: _How) -> tuple[int, int]:
    """The file's lines read by the load's workers (see ``web_index._insert_lines``)."""
    try:
        return insert_on_workers(
            load,
            shared_location(index.location),
            index._buffer_location,
            source,
            how.name,
            limits=index.limits,
            batch=how.batch,
            skip_invalid=how.skip_invalid,
            on_skipped=_skipped,
            on_progress=how.on_stored,
        )
    except RefusedLineError as exc:
        raise fail(EXIT_USAGE, f"{exc.error} ({_stored(exc.stored)} before it)") from None


def _size(handle: BinaryIO) -> int | None:
    """The input file's size; ``None`` for a pipe or a device, whose size is not known."""
    info = os.fstat(handle.fileno())
    return info.st_size if stat.S_ISREG(info.st_mode) else None


def _say_left(progress: Progress, task: TaskID, left: str) -> None:
    """The bar's last column says ``left`` (the pace's other figures as they were)."""
    shown = next(t for t in progress.tasks if t.id == task).fields["pace"]
    progress.update(task, pace=shown._replace(left=left))


def _skipped(message: str) -> None:
    say("[yellow]skipped[/]", message)


def _stored(count: int) -> str:
    return f"stored {plural(count, 'request')}"
