"""Asking the store: query, presence."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from web_index.cli._app import (
    EXIT_FOUND_NOTHING,
    EXIT_USAGE,
    TIMES,
    BufferOption,
    SchedulerOption,
    StoreOption,
    app,
    cannot_read,
    cli_errors,
    fail,
    jobs_of,
    jobs_option,
    open_index,
    plural,
    progress_bar,
    say,
    store_location,
    time_option,
)
from web_index.errors import InvalidRecordError
from web_index.models import (
    PageKey,
    Query,
    RecordType,
    SimplePageQuery,
    TimeAwarePageQuery,
    iter_queries,
    query_from_dict,
    result_json,
)


def _collect_queries(
    urls: list[str],
    source: Path | None,
    type: str,
    calibre: int | None,
    strict: bool,
    at: str | None,
    not_before: str | None,
    not_after: str | None,
    request_id: str | None,
) -> Iterator[Query]:
    record_type = RecordType.parse(type)
    when = time_option(at, "--at")
    start, stop = time_option(not_before, "--not-before"), time_option(not_after, "--not-after", end=True)
    if request_id is not None and when is None:
        raise InvalidRecordError("--at", "a --request-id query needs --at (the attempt's timestamp)")

    def for_url(url: str) -> Query:
        if request_id is not None:
            return PageKey(url=url, timestamp=when, request_id=request_id, type=record_type)  # type: ignore[arg-type]
        if when is not None or start is not None or stop is not None:
            return TimeAwarePageQuery(
                url=url,
                timestamp=when,
                not_before=start,
                not_after=stop,
                calibre=calibre,
                calibre_strict=strict,
                type=record_type,
            )
        return SimplePageQuery(url=url, calibre=calibre, calibre_strict=strict, type=record_type)

    for url in urls:
        yield for_url(url)
    if source is not None:
        yield from _file_queries(source, for_url)


def _file_queries(source: Path, for_url: Callable[[str], Query]) -> Iterator[Query]:
    """The queries of a --from file: Parquet, or lines that are each a URL (asked
    as the command-line URLs are) or a query object (JSON). Anything wrong with
    it is invalid input (exit 2), named by file and line, never a store failure."""
    try:
        if source.suffix == ".parquet":
            yield from iter_queries(source)
            return
        with source.open("rb") as fh:  # bytes: a line that is not UTF-8 is refused alone, by number
            for number, raw in enumerate(fh, start=1):
                line = raw.strip()
                if not line or line.startswith(b"#"):
                    continue
                try:
                    if line.startswith(b"{"):
                        yield query_from_dict(json.loads(line))
                    else:
                        yield for_url(line.decode("utf-8"))
                except (ValueError, RecursionError) as exc:  # RecursionError: nested too deeply
                    raise InvalidRecordError(f"{source}:{number}", str(exc)) from None
    except InvalidRecordError:
        raise
    except OSError as exc:
        raise fail(EXIT_USAGE, cannot_read(exc, "--from")) from None
    except ValueError as exc:  # pyarrow's ArrowInvalid: not a Parquet file of queries
        raise InvalidRecordError(f"--from {source}", str(exc)) from None


QueryType = Annotated[str, typer.Option("--type", "-t", help="get, head, get-metadata or head-metadata.")]
Calibre = Annotated[int | None, typer.Option(help="Only records of this calibre or higher.")]
Strict = Annotated[bool, typer.Option("--strict", help="Only records of exactly --calibre.")]
At = Annotated[str | None, typer.Option(help=f"Nearest to this time (time-aware query). {TIMES}.")]
NotBefore = Annotated[str | None, typer.Option(help=f"Window start, inclusive. {TIMES}.")]
NotAfter = Annotated[
    str | None, typer.Option(help="Window end, inclusive: a date or short timestamp counts whole.")
]
RequestId = Annotated[str | None, typer.Option(help="Exact attempt (with --at): a page key query.")]
FromFile = Annotated[
    Path | None,
    typer.Option(
        "--from", help="A file of URLs or JSON query objects (one a line), or a .parquet of queries."
    ),
]
QueryJobs = Annotated[
    int | None,
    jobs_option(
        "Processes that answer --output's batches (default: this machine's cores; none are started for "
        "a single batch)."
    ),
]
FailMissing = Annotated[bool, typer.Option(help="Exit 1 if any query matched nothing.")]


def _run(
    kind: str,
    urls: list[str],
    store: str,
    buffer: str | None,
    source: Path | None,
    type: str,
    calibre: int | None,
    strict: bool,
    at: str | None,
    not_before: str | None,
    not_after: str | None,
    request_id: str | None,
    bodies: bool,
    fail_missing: bool,
    output: Path | None = None,
    scheduler: str | None = None,
    jobs: int | None = None,
) -> None:
    stream = _collect_queries(urls, source, type, calibre, strict, at, not_before, not_after, request_id)
    if output is not None:
        _run_to_parquet(stream, store, buffer, output, scheduler, jobs_of(jobs, None))
        return
    if scheduler is not None:
        raise fail(EXIT_USAGE, "--scheduler answers into a file: give --output FILE.parquet")
    try:
        queries = list(stream)
    except InvalidRecordError as exc:
        raise fail(EXIT_USAGE, str(exc)) from None
    if not queries:
        raise fail(EXIT_USAGE, "no queries: give URLs or --from FILE")
    location = store_location(store)
    with cli_errors(location), open_index(location, buffer, read_only=True) as index:
        if kind == "query":
            results: list[Any] = index.query(queries)
        else:
            results = index.presence(queries)
    out = sys.stdout
    missing = 0
    for q, r in zip(queries, results, strict=True):
        if kind == "query":
            missing += r is None
            line = {"query": q.to_dict(), "result": result_json(r, bodies=bodies)}
        else:
            missing += not r
            line = {"query": q.to_dict(), "present": r}
        out.write(json.dumps(line, ensure_ascii=False) + "\n")
    if fail_missing and missing:
        what = "matched nothing" if kind == "query" else "is absent"
        say("[bold red]error:[/]", f"{missing} of {plural(len(queries), 'query')} {what} (--fail-missing)")
        raise typer.Exit(EXIT_FOUND_NOTHING)


def _run_to_parquet(
    queries: Iterator[Query], store: str, buffer: str | None, output: Path, scheduler: str | None, jobs: int
) -> None:
    # Bounded memory however many queries: see WebIndex.query_file.
    if not output.parent.is_dir():
        raise fail(EXIT_USAGE, f"cannot write {output}: no folder {output.parent}")
    location = store_location(store)
    with (
        cli_errors(location),
        open_index(location, buffer, read_only=True) as index,
        progress_bar() as progress,
    ):
        task = progress.add_task("answering", total=None)
        count = index.query_file(
            queries,
            output,
            batch_size=_BULK_BATCH,
            on_progress=lambda n: progress.update(task, completed=n),
            scheduler=scheduler,
            jobs=jobs,
        )
    say("", f"{plural(count, 'result')} written to {output}")


_BULK_BATCH = 20_000


@app.command()
def query(
    urls: Annotated[list[str] | None, typer.Argument(help="URLs to look up.")] = None,
    store: StoreOption = "",
    buffer: BufferOption = None,
    source: FromFile = None,
    type: QueryType = "get",
    calibre: Calibre = None,
    strict: Strict = False,
    at: At = None,
    not_before: NotBefore = None,
    not_after: NotAfter = None,
    request_id: RequestId = None,
    bodies: Annotated[bool, typer.Option(help="Include bodies (base64) in the output.")] = False,
    fail_missing: FailMissing = False,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write results to this Parquet file (streamed, bodies included)."
        ),
    ] = None,
    scheduler: SchedulerOption = None,
    jobs: QueryJobs = None,
) -> None:
    """Look up pages or metadata; print one JSON line per query, in input order.

    Without time options a query is a simple (latest) query; --at / --not-before /
    --not-after make it time-aware; --request-id with --at makes it a page key.
    With --output, results go to a Parquet file instead, a batch at a time, so
    millions of queries from --from FILE.parquet run in bounded memory, their batches
    answered by --jobs worker processes; with --scheduler, on that Dask cluster.
    """
    _run(
        "query",
        urls or [],
        store,
        buffer,
        source,
        type,
        calibre,
        strict,
        at,
        not_before,
        not_after,
        request_id,
        bodies,
        fail_missing,
        output,
        scheduler,
        jobs,
    )


@app.command()
def presence(
    urls: Annotated[list[str] | None, typer.Argument(help="URLs to look up.")] = None,
    store: StoreOption = "",
    buffer: BufferOption = None,
    source: FromFile = None,
    type: QueryType = "get",
    calibre: Calibre = None,
    strict: Strict = False,
    at: At = None,
    not_before: NotBefore = None,
    not_after: NotAfter = None,
    request_id: RequestId = None,
    fail_missing: FailMissing = False,
) -> None:
    """Whether each query matches anything (no bodies read); JSON lines out."""
    _run(
        "presence",
        urls or [],
        store,
        buffer,
        source,
        type,
        calibre,
        strict,
        at,
        not_before,
        not_after,
        request_id,
        False,
        fail_missing,
    )


@app.command()
def lookup(
    digests: Annotated[
        list[str],
        typer.Option("--digest", "-d", help="sha1:<base32> (as WARC writes it) or sha256:<hex or base32>."),
    ],
    store: StoreOption = "",
    buffer: BufferOption = None,
    fail_missing: Annotated[bool, typer.Option(help="Exit 1 if a digest matched nothing.")] = False,
) -> None:
    """Find every capture whose body has a payload digest, oldest first.

    One JSON line per response found: URL, attempt time, request id, status, the file holding it."""
    from web_index.models import Digest

    try:
        wanted = [Digest.parse(d) for d in digests]
    except InvalidRecordError as exc:
        raise fail(EXIT_USAGE, f"--digest {exc.problem}") from None
    location = store_location(store)
    with cli_errors(location), open_index(location, buffer, read_only=True) as index:
        hits = index.lookup_digest(*wanted)
    for hit in hits:
        sys.stdout.write(json.dumps(hit.to_dict(), ensure_ascii=False) + "\n")
    found = {h.sha1 for h in hits} | {h.sha256 for h in hits}
    absent = [str(d) for d in wanted if str(d) not in found]
    if fail_missing and absent:
        say("[bold red]error:[/]", f"no capture has the digest {', '.join(absent)} (--fail-missing)")
        raise typer.Exit(EXIT_FOUND_NOTHING)
