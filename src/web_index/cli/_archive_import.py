"""``import-warc`` and ``import-wacz``: the import run they share, its progress and its totals."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING

from web_index.cli._app import (
    EXIT_USAGE,
    cli_errors,
    fail,
    jobs_of,
    open_index,
    plural,
    say,
    store_location,
)
from web_index.cli._pace import pace, paced_progress

if TYPE_CHECKING:
    from web_index.archive import ArchiveFile, ImportReport

__all__ = ["run_import"]


def run_import(
    files: list[ArchiveFile],
    store: str,
    buffer: str | None,
    durable: bool,
    calibre: int,
    skip_invalid: bool,
    jobs: int | None,
    as_json: bool,
    scheduler: str | None = None,
) -> None:
    """Import ``files`` into the store with a progress bar (files, MB, MB/s, records, time
    left) on a terminal, then the totals: a line, or one JSON object with ``as_json``;
    with ``scheduler``, on that Dask cluster."""
    from web_index.archive import import_warcs
    from web_index.errors import InvalidRecordError

    total = sum(f.size for f in files)
    location = store_location(store)
    started = time.monotonic()
    with (
        cli_errors(location),
        open_index(location, buffer, create=True, durable=durable) as index,
        paced_progress(
            "importing",
            "{task.fields[files]} files, {task.fields[records]:,} records",
            started,
        ) as progress,
    ):
        task = progress.add_task(
            "import", total=total, files=f"0/{len(files)}", records=0, pace=pace(0, 0, 0.0, total)
        )

        def advance(report: ImportReport) -> None:
            progress.update(
                task,
                completed=report.bytes,
                files=f"{report.files}/{len(files)}",
                records=report.records,
                pace=pace(report.bytes, report.records, time.monotonic() - started, total),
            )

        try:
            report = import_warcs(
                index,
                files,
                calibre=calibre,
                skip_invalid=skip_invalid,
                on_progress=advance,
                jobs=jobs_of(jobs, total),
                scheduler=scheduler,
            )
        except InvalidRecordError as exc:
            raise fail(EXIT_USAGE, str(exc)) from None
        done = pace(report.bytes, report.records, time.monotonic() - started, total)
        progress.update(task, completed=report.bytes, pace=done._replace(left="stored"))
    for problem in report.problems:
        say("[yellow]skipped[/]", problem)
    elapsed = time.monotonic() - started
    if as_json:
        totals = {
            "files": report.files,
            "bytes": report.bytes,
            "records": report.records,
            "stored": report.stored,
            "already_stored": report.already_stored,
            "skipped": dict(sorted(report.skipped.items())),
            "problems": [str(p) for p in report.problems],
            "seconds": round(elapsed, 3),
            "mb_per_s": round(report.bytes / max(elapsed, 1e-9) / 1e6, 2),
        }
        sys.stdout.write(json.dumps(totals) + "\n")
        return
    skipped = ", ".join(f"{n:,} {why}" for why, n in sorted(report.skipped.items()))
    say(
        "",
        f"{plural(report.files, 'file')}, {plural(report.records, 'record')} in {elapsed:.1f} s "
        f"({report.bytes / max(elapsed, 1e-9) / 1e6:.1f} MB/s): stored {report.stored:,}, "
        f"already stored {report.already_stored:,}"
        + (f", not stored: {skipped}" if skipped else "")
        + (f", {len(report.problems)} broken" if report.problems else ""),
    )
