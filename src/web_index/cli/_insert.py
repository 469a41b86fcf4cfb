"""``web-index insert``: insertion requests from JSONL into the store."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Annotated, BinaryIO

import typer

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
    progress_bar,
    say,
    store_location,
)
from web_index.errors import InvalidRecordError
from web_index.index import InsertItem, WebIndex
from web_index.ingest import InsertRequest, iter_insert_lines, validate_attempt

__all__ = ["insert"]

Line = tuple[int, InsertRequest | InvalidRecordError]


class _UnreadableInputError(Exception):
    """The input could not be read on (an I/O error, not an invalid line)."""


def _read(handle: BinaryIO, name: str) -> Iterator[bytes]:
    # Told apart from the store's OSErrors: a broken input is the caller's (exit 2).
    try:
        yield from handle
    except OSError as exc:
        raise _UnreadableInputError(f"cannot read {name}: {exc.strerror or exc}") from None


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
    flush or compact to run after), written when the input ends by --jobs processes.
    """
    started = time.monotonic()
    location = store_location(store)
    name = "<stdin>" if source == "-" else source
    # Bytes, not text: lines split on "\n" only, and one that is not UTF-8 is refused alone.
    handle = open_input(source)  # closed below, after the store
    try:
        with (
            cli_errors(location),
            open_index(location, buffer, create=True, durable=durable) as index,
            progress_bar() as progress,
        ):
            task = progress.add_task("loading" if bulk else "inserting", total=None)
            with contextlib.ExitStack() as stack:
                add = index.insert_many
                if bulk:
                    writing = progress.add_task("writing files", total=None, visible=False)

                    def on_progress(done: int, total: int) -> None:
                        progress.update(writing, completed=done, total=total, visible=True)

                    size = None if source == "-" else os.fstat(handle.fileno()).st_size
                    load = index.bulk_load(on_progress=on_progress, jobs=jobs_of(jobs, size))
                    add = stack.enter_context(load).add
                inserter = _Inserter(index, add, name, skip_invalid)
                lines = iter_insert_lines(_read(handle, name), name)
                try:
                    for chunk in _batches(lines, batch, stop_at_error=not skip_invalid):
                        inserter.store(chunk)
                        progress.update(task, completed=inserter.stored)
                except _UnreadableInputError as exc:
                    raise fail(EXIT_USAGE, f"{exc} ({_stored(inserter.stored)} before it)") from None
    finally:
        if source != "-":
            handle.close()
    if as_json:
        seconds = time.monotonic() - started
        totals = {"stored": inserter.stored, "skipped": inserter.skipped, "seconds": round(seconds, 3)}
        sys.stdout.write(json.dumps(totals) + "\n")
        return
    skipped = f", skipped {inserter.skipped} invalid" if inserter.skipped else ""
    err.print(f"stored {plural(inserter.stored, 'attempt')}{skipped}", highlight=False)


def _stored(count: int) -> str:
    return f"stored {plural(count, 'request')}"


def _batches(lines: Iterable[Line], size: int, *, stop_at_error: bool) -> Iterator[list[Line]]:
    """Lines in batches of ``size`` (invalid ones included, in place); with
    ``stop_at_error`` the batch holding the first invalid line is the last one read."""
    pending: list[Line] = []
    try:
        for line in lines:
            pending.append(line)
            if stop_at_error and isinstance(line[1], InvalidRecordError):
                break
            if len(pending) >= size:
                yield pending
                pending = []
    except _UnreadableInputError:
        if pending:
            yield pending  # what was read before the input broke is stored all the same
        raise
    if pending:
        yield pending


class _Inserter:
    """Stores batches of lines and reports their invalid ones, in line order."""

    def __init__(
        self, index: WebIndex, add: Callable[[list[InsertItem]], object], name: str, skip_invalid: bool
    ) -> None:
        self.index = index
        self.add = add  # insert_many, or a bulk load's add: both take all of a batch or none of it
        self.name = name
        self.skip_invalid = skip_invalid
        self.stored = 0
        self.skipped = 0

    def store(self, lines: list[Line]) -> None:
        """Store the valid requests of ``lines`` and report the invalid ones; without
        --skip-invalid, only those before the first invalid line, then exit 2."""
        requests = [r for _, r in lines if isinstance(r, InsertRequest)]
        if len(requests) == len(lines):
            try:
                self.add([r.item() for r in requests])
            except InvalidRecordError:
                pass  # which lines? validation alone, below, finds them
            else:
                self.stored += len(requests)
                return
        valid: list[InsertRequest] = []
        errors: list[InvalidRecordError] = []
        for number, result in lines:
            if isinstance(result, InvalidRecordError):
                error = result
            else:
                problem = self._problem(number, result)
                if problem is None:
                    valid.append(result)
                    continue
                error = problem
            errors.append(error)
            if not self.skip_invalid:
                break
        if valid:
            # add validates them again; they pass, as they just did.
            self.add([r.item() for r in valid])
            self.stored += len(valid)
        if errors and not self.skip_invalid:
            raise fail(EXIT_USAGE, f"{errors[0]} ({_stored(self.stored)} before it)")
        for error in errors:
            say("[yellow]skipped[/]", str(error))
        self.skipped += len(errors)

    def _problem(self, number: int, request: InsertRequest) -> InvalidRecordError | None:
        try:
            validate_attempt(*request.item(), limits=self.index.limits)
        except InvalidRecordError as exc:
            return InvalidRecordError(f"{self.name}:{number}: {exc.field}", exc.problem)
        return None
