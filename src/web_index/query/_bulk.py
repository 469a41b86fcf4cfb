"""Answering a stream of queries into a Parquet file of results, in bounded memory.

One batch is planned by partition (see ``_engine``), but a stream cut into
batches in input order makes every batch touch the same files again: a million
queries in batches of 20,000 over the S benchmark store read each data file
about seven times. So the stream is taken a *window* at a time; a window's
queries are answered in partition order (type, then domain), so that each batch
covers a narrow run of domains and each file is read about once per window; and
the results, spooled to a temporary Arrow IPC file, are merged back into input
order.

Memory is bounded by the window (its queries as Arrow rows), one batch of
queries and results as objects, and the merge, which holds at most one record batch of each
batch's spool, sized so that all of them together stay under a budget (``_spool``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from web_index.errors import InvalidRecordError, InvalidURLError
from web_index.models import Query, query_table, result_table
from web_index.query._plan import Plan, plans_of
from web_index.query._result_file import ResultFile
from web_index.query._results import Result
from web_index.query._spool import OUTPUT_ROWS, Spool, merge_to_file, spool_file
from web_index.storage import gc_paused
from web_index.urls import key_and_domain

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Workers", "answer_to_file"]


Answer = Callable[[list[Plan]], list[Result]]
# ``(n, fn(*args))`` for the ``n``-th of the tasks, in any order, as they complete.
Run = Callable[[Callable[..., Any], Iterable[tuple[Any, ...]]], Iterator[tuple[int, Any]]]


class Workers(NamedTuple):
    """Who answers a window's batches: ``run`` hands each task to a worker, where ``answer``
    (for workers of other processes pickled: a module-level function, or a partial of one,
    that opens the store itself) answers it; ``start(batches)``, called as a window begins,
    starts the workers (no more than the batches) while the window is put in order;
    ``local`` workers (``jobs`` of them) send their results back as spool files, and
    merge them into pieces of the result file, each encoding its own."""

    run: Run
    answer: Answer
    start: Callable[[int], object] = int
    local: bool = False  # workers that share this machine's disk: results come back as spool files
    jobs: int = 1


def _here(fn: Callable[..., Any], tasks: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, Any]]:
    """This process as the one worker: each task in turn."""
    return ((n, fn(*args)) for n, args in enumerate(tasks))


def answer_to_file(
    answer: Answer,
    source: str | os.PathLike[str] | Iterable[Query],
    destination: str | os.PathLike[str],
    *,
    batch_size: int = 20_000,
    window: int = 1_000_000,
    on_progress: Callable[[int], None] | None = None,
    workers: Workers | None = None,
) -> int:
    """Answer the queries of ``source`` (a Parquet file of queries, or any iterable
    of queries) with ``answer``, a batch at a time, into a Parquet file of
    :data:`~web_index.models.RESULT_SCHEMA` rows in input order; return how many.

    The file appears whole or not at all: it is written under a temporary name
    beside ``destination`` and renamed when complete, so an invalid query met
    half-way leaves no partial file. ``on_progress`` is called with the number
    of queries answered so far after each batch. ``workers``: a window of more
    than one batch is answered by them (worker processes, a cluster), this process
    reading, ordering and writing.
    """

    here = Workers(_here, answer)

    def each(rows: pa.Table, start: int, out: ResultFile) -> None:
        # Workers cost their start: a window of one batch is answered here.
        by = workers if workers is not None and rows.num_rows > batch_size else here
        answer_window(by, rows, source, start, out, batch_size, on_progress)

    return _write_windows(source, destination, batch_size, window, each)


_WindowWriter = Callable[["pa.Table", int, ResultFile], None]


def _write_windows(
    source: str | os.PathLike[str] | Iterable[Query],
    destination: str | os.PathLike[str],
    batch_size: int,
    window: int,
    each: _WindowWriter,
) -> int:
    """The source's windows, each handed with its first row's number to ``each(rows,
    start, out)``, which writes its result rows in input order to ``out``; into a file
    beside ``destination`` renamed onto it when complete, so that it appears whole or
    not at all (``out.work``: a scratch folder beside it for spools, removed after)."""
    if batch_size < 1 or window < 1:
        raise ValueError("batch_size and window must be positive")
    dest = Path(destination)
    work = Path(tempfile.mkdtemp(prefix=".web-index-bulk-", dir=dest.parent))
    out = ResultFile(work)
    try:
        total = 0
        for rows in _windows(source, window):
            each(rows, total, out)
            total += rows.num_rows
        out.finish().replace(dest)
    finally:
        out.close()
        shutil.rmtree(work, ignore_errors=True)
    return total


_READ_ROWS = 65_536


def _windows(source: str | os.PathLike[str] | Iterable[Query], window: int) -> Iterator[pa.Table]:
    """The source's query rows, ``window`` at a time, as tables: a query takes ~150
    bytes as a row and ~750 as a Python object, so a window waits as rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(source, str | os.PathLike):
        batches = pq.ParquetFile(os.fspath(source)).iter_batches(batch_size=min(window, _READ_ROWS))
        pending: list[pa.RecordBatch] = []
        held = 0
        for batch in batches:
            pending.append(batch)
            held += batch.num_rows
            if held >= window:
                table = pa.Table.from_batches(pending)
                yield table.slice(0, window)
                rest = table.slice(window)
                pending, held = rest.to_batches(), rest.num_rows
        if held:
            yield pa.Table.from_batches(pending)
        return
    stream = iter(source)
    while True:
        tables = []
        taken = 0
        while taken < window and (part := list(itertools.islice(stream, min(_READ_ROWS, window - taken)))):
            tables.append(query_table(part))
            taken += len(part)
        if not taken:
            return
        yield pa.concat_tables(tables)


def _partition_order(rows: pa.Table) -> pa.Array[Any]:
    """Row numbers in the order a window is answered: by (type, domain), stably.

    Sorted by Arrow, on each row's rank among the window's types and domains: a
    million URLs as Python strings, or a million sort-key tuples, would cost more
    memory than the window, and a sort on the strings themselves compares them
    again and again (0.47 s for a million, against 0.05 on their ranks).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    n = rows.num_rows
    names = rows.column_names
    domains: Any = _domains(rows.column("url")) if "url" in names else pa.nulls(n, pa.string())
    types: Any = rows.column("type").cast(pa.string()) if "type" in names else pa.nulls(n, pa.string())
    keys = pa.table({"type": _ranks(types, "get"), "domain": _ranks(domains, "")})
    order: pa.Array[Any] = pc.sort_indices(keys, [("type", "ascending"), ("domain", "ascending")])
    return order


def _ranks(values: Any, missing: str) -> pa.Array[Any]:
    """Each value's rank among the distinct values (a null counted as ``missing``): found
    once a distinct value, which a window's types, domains and hosts are few of."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    coded = values if pa.types.is_dictionary(values.type) else values.dictionary_encode()
    # Nulls are the extra last value: pointed at, they sort with the value they stand for.
    distinct = pa.concat_arrays([pc.fill_null(coded.dictionary, missing), pa.array([missing])])
    ranks = pc.rank(distinct, sort_keys="ascending", tiebreaker="dense")
    at = pc.fill_null(coded.indices.cast(pa.int64()), len(distinct) - 1)
    taken: pa.Array[Any] = ranks.take(at)
    return taken


# A URL's host, lowercased, as most URLs spell it (no IDN, no IPv6 literal): what orders a
# window needs, not a URL's validation, which building its query does. Searched in what comes
# before a URL's third "/" (all of a URL that has none), which holds everything the pattern
# reads: none of its parts before the host's end takes a "/".
_HOST = r"^https?://(?:[^/?#@]*@)?(?P<host>[a-z0-9-]+(?:\.[a-z0-9-]+)*)\.?(?::[0-9]*)?(?:[/?#]|$)"


def _domains(urls: pa.ChunkedArray[Any]) -> pa.DictionaryArray[Any, Any]:
    """Each URL's partition domain, null for one that has none (its query raises when
    built, naming it), as a dictionary array. Found once a distinct scheme and authority
    (what comes before a URL's third "/"; a million URLs of 100,000 hosts: 1.3-1.5 s on a
    VM where the pattern run on every URL took 2.4), and one URL at a time for the few
    whose host the pattern does not find. The pattern checks a URL loosely (a port's range,
    for one): a URL it passes that building its query refuses gets a domain here, which
    only orders it."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(urls.type):
        urls = urls.cast(urls.type.value_type)
    if not pa.types.is_string(urls.type) and not pa.types.is_large_string(urls.type):
        nothing: pa.DictionaryArray[Any, Any] = pa.DictionaryArray.from_arrays(
            pa.nulls(len(urls), pa.int32()), pa.array([], pa.string())
        )
        return nothing  # building the queries raises, naming the column
    whole: Any = urls.combine_chunks()
    parts = pc.list_slice(pc.split_pattern(whole, "/", max_splits=3), 0, 3)
    heads: Any = pc.binary_join(parts, pa.scalar("/", whole.type))  # of the URLs' own string type
    coded: Any = heads.dictionary_encode()
    hosts: Any = pc.struct_field(pc.extract_regex(pc.utf8_lower(coded.dictionary), _HOST), [0])
    host_of_head: list[str | None] = hosts.to_pylist()
    of_host = {h: _domain_or_none(f"http://{h}/") for h in set(host_of_head) if h is not None}
    by_head = [None if h is None else of_host[h] for h in host_of_head]
    indices = pc.fill_null(coded.indices, 0).to_numpy(zero_copy_only=False).astype(np.int32)
    # The URLs whose heads the pattern does not find a host in: one at a time, each its own value.
    unfound: Any = pc.fill_null(pc.is_null(hosts).take(coded.indices), False)
    if pc.any(unfound).as_py():
        rows = np.flatnonzero(unfound.to_numpy(zero_copy_only=False))
        for at, url in zip(rows, whole.take(pa.array(rows)).to_pylist(), strict=True):
            indices[at] = len(by_head)
            by_head.append(_domain_or_none(url))
    domains: pa.DictionaryArray[Any, Any] = pa.DictionaryArray.from_arrays(
        pa.array(indices, mask=pc.is_null(coded.indices).to_numpy(zero_copy_only=False)),
        pa.array(by_head, pa.string()),
    )
    return domains


def _domain_or_none(url: str) -> str | None:
    try:
        return key_and_domain(url)[1]
    except InvalidURLError:
        return None


def _batches(rows: pa.Table, batch_size: int) -> list[pa.Array[Any]]:
    """A window's row numbers cut into batches of ``batch_size`` in partition order,
    each batch's numbers ascending (so that its results come out in input order)."""
    import pyarrow.compute as pc

    order = _partition_order(rows)
    slices = [order.slice(i, batch_size) for i in range(0, len(order), batch_size)]
    return [part.take(pc.array_sort_indices(part)) for part in slices]


def _source_name(source: object) -> str:
    """What errors call the source: its path, or "queries" for an iterable."""
    return os.fspath(source) if isinstance(source, str | os.PathLike) else "queries"


def _answered(answer: Answer, rows: pa.Table, numbers: Sequence[int], name: str) -> pa.Table:
    """The result rows of query ``rows`` (numbered ``numbers`` in the output), in their order."""
    # The collector stays off until the answers are rows and freed: back on between, the
    # allocations of making them set off collections that walked every object the process tracks
    # (pyarrow's, polars', numpy's): 3-7% of a batch, alternated in process on the same batches.
    with gc_paused():
        plans = plans_of(rows, name, numbers)
        got = answer(plans)
        urls = cast(list[str], rows.column("url").to_pylist())
        table = result_table(zip(numbers, (p.type for p in plans), urls, got, strict=True))
        del plans, got, urls  # what the batch allocated is no collection's business once it is on
    return table


def answer_window(
    workers: Workers,
    rows: pa.Table,
    source: object,
    start: int,
    out: ResultFile,
    batch_size: int,
    on_progress: Callable[[int], None] | None,
) -> None:
    """One window: its batches answered by ``workers``, spooled as they come, merged in input
    order: by this process, or by the local workers, each a piece of the result file."""
    import pyarrow.compute as pc

    workers.start(-(-rows.num_rows // batch_size))
    batches = _batches(rows, batch_size)
    name = _source_name(source)
    done = 0
    work = out.work
    with Spool(work / f"spool-{start}.arrow", len(batches)) as spooled:
        # A batch travels as its query rows and output row numbers, taken when submitted. A worker
        # of this machine writes its results to a spool file and sends back its row count: a result
        # sent through a pipe is cut short when its worker is killed mid-send, and the executor
        # then waits for the rest of it forever.
        files = [work / f"batch-{start}-{n}.arrow" for n in range(len(batches))] if workers.local else None
        fn: Callable[..., Any] = _answer_batch
        tasks: Iterator[tuple[Any, ...]] = (
            (workers.answer, rows.take(p), pc.add(p, start), name) for p in batches
        )
        if files is not None:
            fn = _answer_batch_to_file
            tasks = ((*task, files[n], spooled.budget) for n, task in enumerate(tasks))
        for n, got in workers.run(fn, tasks):
            if isinstance(got, InvalidRecordError):
                raise got  # the input is wrong: no retry would help
            rows_got = got[0] if isinstance(got, tuple) else got.num_rows
            if rows_got != len(batches[n]):
                raise AssertionError(f"bulk: {rows_got} results for a batch of {len(batches[n])}")
            if files is not None:
                spooled.add_file(files[n], got[1])  # in completion order: the merge takes any order
            elif len(batches) == 1:
                out.writer.write_table(got, row_group_size=OUTPUT_ROWS)
            else:
                spooled.add(got)
            done += rows_got
            if on_progress is not None:
                on_progress(start + done)
        if files is not None:
            # pyarrow encodes a file's columns on one thread: each worker encodes a piece.
            pieces = spooled.pieces(start, rows.num_rows, workers.jobs)
            paths = [out.piece_path() for _ in pieces]
            for _ in workers.run(merge_to_file, ((*p, paths[n]) for n, p in enumerate(pieces))):
                pass  # a piece that is not its rows each once raised in its worker
            out.add(paths)
        elif len(batches) > 1:
            spooled.merge(start, rows.num_rows, out.writer)
    for path in files or ():
        path.unlink(missing_ok=True)


def _answer_batch(
    answer: Answer, rows: pa.Table, numbers: pa.Array[Any], name: str
) -> pa.Table | InvalidRecordError:
    """In a worker: one batch's result rows, or the invalid query's error as a value
    (raised, a cluster would retry what can only fail again)."""
    try:
        return _answered(answer, rows, cast(list[int], numbers.to_pylist()), name)
    except InvalidRecordError as exc:
        return exc


def _answer_batch_to_file(
    answer: Answer, rows: pa.Table, numbers: pa.Array[Any], name: str, path: Path, budget: int
) -> tuple[int, list[int]] | InvalidRecordError:
    """In a worker of this machine: :func:`_answer_batch`, its rows written to the spool file
    ``path`` (a retry writes it again whole); their count and what the spool needs to know
    of the file (``spool_file``), or the error."""
    got = _answer_batch(answer, rows, numbers, name)
    if isinstance(got, InvalidRecordError):
        return got
    return got.num_rows, spool_file(got, path, budget)
