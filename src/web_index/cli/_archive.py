"""Web archives: ``import-warc``, ``import-wacz``, ``export-warc``, ``export-wacz``."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.progress import (
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from web_index.cli._app import (
    EXIT_FOUND_NOTHING,
    EXIT_USAGE,
    TIMES,
    BufferOption,
    DurableOption,
    JobsOption,
    SchedulerOption,
    StoreOption,
    app,
    cannot_read,
    cli_errors,
    err,
    fail,
    open_index,
    plural,
    say,
    store_location,
    time_option,
)
from web_index.cli._archive_import import run_import
from web_index.errors import MissingExtraError

if TYPE_CHECKING:
    from web_index.archive import ArchiveFile, CdxQuery, Tally, WaczReport
    from web_index.index import WebIndex

_R = TypeVar("_R", bound="Tally")

__all__ = ["export_wacz", "export_warc", "import_wacz", "import_warc"]

CalibreOption = Annotated[int, typer.Option(min=0, max=100, help="Calibre recorded for the captures.")]
JsonTotalsOption = Annotated[
    bool, typer.Option("--json", help="Print the totals as one JSON object (stdout) at the end.")
]
SkipInvalidOption = Annotated[
    bool, typer.Option(help="Report a broken record or file and go on, instead of stopping at it.")
]


@app.command("import-warc")
def import_warc(
    paths: Annotated[
        list[str],
        typer.Argument(
            help="WARC or ARC files (.warc, .warc.gz, .arc, .arc.gz), folders or s3:// prefixes of them;"
            " WACZ packages (.wacz) as import-wacz reads them."
        ),
    ],
    store: StoreOption = "",
    buffer: BufferOption = None,
    durable: DurableOption = True,
    calibre: CalibreOption = 10,
    skip_invalid: SkipInvalidOption = False,
    jobs: JobsOption = None,
    as_json: JsonTotalsOption = False,
    scheduler: SchedulerOption = None,
) -> None:
    """Import WARC or ARC captures into the store (idempotent: a record stored already is not stored again).

    Responses become GET (or HEAD) attempts with status and headers as sent and
    the body as fetchers store it (de-chunked, gzip/deflate decoded); revisits
    take the body they refer to; resources become 200 pages.
    A record cut short or a truncated file stops the import with exit 2,
    naming the file and byte offset, after storing every record before it.
    The import is one bulk load: the store ends compacted and indexed, with
    nothing to flush (a revisit is stored with the load that took the capture
    it refers to, else resolved once the rest is written).
    With --scheduler, each file is read by a worker of that Dask cluster, which
    writes to the store itself (the store and the files where every worker reads
    them: s3:// or one shared path), committed once here and compacted there.
    On a terminal a progress bar shows the bytes and files read, MB/s and records
    a second since the start, the time left at that pace, then "writing" while
    what was read is written.
    """
    from web_index.archive import archive_files
    from web_index.errors import InvalidRecordError, StoreError

    try:
        files = archive_files(paths)
    except FileNotFoundError as exc:
        raise fail(EXIT_USAGE, f"cannot read {exc.args[0]}: no such object") from None
    except (StoreError, MissingExtraError, InvalidRecordError) as exc:  # a bad .wacz: InvalidRecordError
        raise fail(EXIT_USAGE, str(exc)) from None
    except OSError as exc:  # a .wacz that cannot be read
        raise fail(EXIT_USAGE, cannot_read(exc)) from None
    missing = [f.name for f in files if f.path is not None and not f.path.is_file()]
    if missing:
        raise fail(EXIT_USAGE, f"cannot read {missing[0]}: no such file")
    if not files:
        raise fail(EXIT_USAGE, "no WARC or ARC files (.warc, .warc.gz, .arc, .arc.gz) in " + ", ".join(paths))
    run_import(files, store, buffer, durable, calibre, skip_invalid, jobs, as_json, scheduler)


@app.command("import-wacz")
def import_wacz(
    paths: Annotated[list[Path], typer.Argument(help="WACZ packages (.wacz files).")],
    store: StoreOption = "",
    buffer: BufferOption = None,
    durable: DurableOption = True,
    calibre: CalibreOption = 10,
    skip_invalid: SkipInvalidOption = False,
    jobs: JobsOption = None,
    as_json: JsonTotalsOption = False,
    scheduler: SchedulerOption = None,
) -> None:
    """Import the WARC files inside WACZ packages, each record as import-warc imports it (idempotent too).

    Every package is checked whole before anything is stored: a file that is not
    a ZIP or is cut short, no datapackage.json, a member it lists missing, a member
    whose size or sha256 differs from datapackage.json (or datapackage.json from
    datapackage-digest.json), an unsafe member name (absolute, ..), or a WARC member
    that is not a WARC is exit 2 in one line naming the package and member, with
    the store as it was. The WARCs are read from the ZIP in place, never
    extracted. Page titles (pages/pages.jsonl) are not kept: the store has no place for them.
    With --scheduler, as import-warc: the packages where every worker reads them.
    """
    from web_index.archive import wacz_files
    from web_index.errors import InvalidRecordError

    files: list[ArchiveFile] = []
    for path in paths:
        try:
            files += wacz_files(path)
        except InvalidRecordError as exc:
            raise fail(EXIT_USAGE, str(exc)) from None
        except OSError as exc:
            raise fail(EXIT_USAGE, cannot_read(exc)) from None
    if not files:
        raise fail(EXIT_USAGE, "no WARC files in " + ", ".join(map(str, paths)))
    run_import(files, store, buffer, durable, calibre, skip_invalid, jobs, as_json, scheduler)


# The selectors export-warc and export-wacz share.
_TypeOption = Annotated[str, typer.Option("--type", "-t", help="get or head.")]
_DomainOption = Annotated[str | None, typer.Option(help="Only this registrable domain (all its hosts).")]
_UrlPrefixOption = Annotated[str | None, typer.Option(help="Only URLs starting with this (normalised).")]
_UrlOption = Annotated[
    list[str] | None,
    typer.Option(
        "--url",
        help="Only the captures of this URL (repeat for more), matched as the CDX API matches"
        " (SURT: scheme and a leading www. do not count).",
        show_default=False,
    ),
]
_MatchTypeOption = Annotated[
    str,
    typer.Option(help="How --url matches: exact, prefix (URLs under it), host, or domain (and subdomains)."),
]
_FromOption = Annotated[
    str | None, typer.Option("--from", help=f"Attempts begun at or after this time. {TIMES}.")
]
_ToOption = Annotated[
    str | None,
    typer.Option(
        "--to", help="Attempts begun at or before this time: a date or short timestamp counts whole."
    ),
]


def _selectors(
    type: str,
    domain: str | None,
    url_prefix: str | None,
    urls: list[str] | None,
    match_type: str,
    start: str | None,
    end: str | None,
) -> dict[str, Any]:
    """The export functions' selector arguments from the options both commands share."""
    return {
        "type": type,
        "domain": domain,
        "url_prefix": url_prefix,
        "start": time_option(start, "--from"),
        "end": time_option(end, "--to", end=True),
        "matching": _queries(urls, match_type, type),
    }


def _queries(urls: list[str] | None, match_type: str, type: str) -> list[CdxQuery]:
    """The CDX queries ``--url`` and ``--match-type`` ask for (a bad one: exit 2, naming it)."""
    from web_index.archive import parse_cdx_query
    from web_index.errors import InvalidRecordError

    try:
        return [
            parse_cdx_query({"url": [url], "matchType": [match_type], "type": [type]}) for url in urls or ()
        ]
    except InvalidRecordError as exc:
        option = {"url": "--url", "matchType": "--match-type", "type": "--type"}.get(exc.field, exc.field)
        raise fail(EXIT_USAGE, f"{option}: {exc.problem}") from None


def _exporting(
    store: str, buffer: str | None, export: Callable[[WebIndex, Callable[[_R], None]], _R]
) -> tuple[_R, float]:
    """Run ``export`` on the store opened read-only, its progress (attempts read,
    MB of WARC written) on a terminal; its report and the seconds it took."""
    location = store_location(store)
    started = time.monotonic()
    with (
        cli_errors(location),
        open_index(location, buffer, read_only=True) as index,
        Progress(
            TextColumn("[bold]exporting"),
            TextColumn("{task.fields[attempts]:,} attempts, {task.fields[mb]:,.1f} MB of WARC"),
            TimeElapsedColumn(),
            console=err,
            disable=not err.is_terminal,
        ) as progress,
    ):
        task = progress.add_task("export", total=None, attempts=0, mb=0.0)
        try:
            report = export(index, lambda r: progress.update(task, attempts=r.attempts, mb=r.bytes / 1e6))
        except FileExistsError as exc:
            raise fail(EXIT_USAGE, str(exc)) from None
    return report, time.monotonic() - started


@app.command("export-warc")
def export_warc(
    out: Annotated[Path, typer.Argument(help="Folder to write the .warc.gz files and the .cdxj index into.")],
    store: StoreOption = "",
    buffer: BufferOption = None,
    type: _TypeOption = "get",
    domain: _DomainOption = None,
    url_prefix: _UrlPrefixOption = None,
    url: _UrlOption = None,
    match_type: _MatchTypeOption = "exact",
    start: _FromOption = None,
    end: _ToOption = None,
    name: Annotated[str, typer.Option(help="File name stem: NAME-00000.warc.gz, NAME.cdxj.")] = "web-index",
    max_file_mb: Annotated[int, typer.Option(min=1, help="Start a new WARC file past this size.")] = 1024,
) -> None:
    """Write stored captures as WARC/1.1 files (.warc.gz, a gzip member per record) and a sorted CDXJ index.

    Each response of a chain becomes a request and a response record; a payload
    written already becomes a revisit. Exit 1 if nothing matched.
    """
    from web_index.archive import export_warcs

    chosen = _selectors(type, domain, url_prefix, url, match_type, start, end)
    if not name or "/" in name or name.startswith("."):
        raise fail(EXIT_USAGE, f"--name {name!r}: a plain file name stem")
    report, elapsed = _exporting(
        store,
        buffer,
        lambda index, on_progress: export_warcs(
            index, out, name=name, max_file_bytes=max_file_mb << 20, on_progress=on_progress, **chosen
        ),
    )
    say(
        "",
        f"{plural(report.attempts, 'attempt')}: {plural(report.responses, 'response')}, "
        f"{plural(report.revisits, 'revisit')} in {plural(len(report.files), 'file')} "
        f"({report.bytes / 1e6:.1f} MB, {elapsed:.1f} s); index {report.cdxj}",
    )
    if not report.attempts:
        raise typer.Exit(EXIT_FOUND_NOTHING)


@app.command("export-wacz")
def export_wacz(
    out: Annotated[Path, typer.Argument(help="The .wacz file to write (it must not exist).")],
    store: StoreOption = "",
    buffer: BufferOption = None,
    type: _TypeOption = "get",
    domain: _DomainOption = None,
    url_prefix: _UrlPrefixOption = None,
    url: _UrlOption = None,
    match_type: _MatchTypeOption = "exact",
    start: _FromOption = None,
    end: _ToOption = None,
    title: Annotated[str | None, typer.Option(help="The package's title (datapackage.json).")] = None,
    description: Annotated[
        str | None, typer.Option(help="The package's description, Markdown (datapackage.json).")
    ] = None,
    text: Annotated[
        bool, typer.Option(help="Give each page's text in the page lists (full-text search in a replayer).")
    ] = True,
    max_file_mb: Annotated[
        int, typer.Option(min=1, max=1536, help="Start a new WARC file in the package past this size.")
    ] = 1024,
) -> None:
    """Write stored captures as a WACZ package: WARC files, their CDXJ index and page lists in one ZIP.

    The records are export-warc's. The index is plain CDXJ up to 1,024 captures,
    ZipNum past that; pages are the HTML captures answered 200. The file is
    written under a temporary name beside OUT and renamed when whole. Exit 1 if
    nothing matched (no file is written), 2 if OUT exists or cannot be written.
    """
    from web_index.archive import export_wacz as export

    chosen = _selectors(type, domain, url_prefix, url, match_type, start, end)
    if out.exists():
        raise fail(EXIT_USAGE, f"{out} exists: choose another name")

    def write(index: WebIndex, on_progress: Callable[[WaczReport], None]) -> WaczReport:
        try:
            return export(
                index,
                out,
                title=title,
                description=description,
                text=text,
                max_file_bytes=max_file_mb << 20,
                on_progress=on_progress,
                **chosen,
            )
        except OSError as exc:
            # The package's own file (its temporary name beside OUT), not the store.
            if exc.filename is None or Path(str(exc.filename)).parent != out.parent:
                raise
            raise fail(EXIT_USAGE, f"cannot write {out}: {exc.strerror or exc}") from None

    report, elapsed = _exporting(store, buffer, write)
    if report.path is None:
        raise fail(
            EXIT_FOUND_NOTHING,
            f"nothing to export ({plural(report.attempts, 'attempt')} matched): {out} not written",
        )
    index_form = "ZipNum" if report.zipnum else "plain"
    say(
        "",
        f"{plural(report.attempts, 'attempt')}: {plural(report.responses, 'response')}, "
        f"{plural(report.revisits, 'revisit')}, {plural(report.pages, 'page')}; {index_form} index of "
        f"{plural(report.index_lines, 'line')}; {out} ({report.size / 1e6:.1f} MB, {elapsed:.1f} s)",
    )
