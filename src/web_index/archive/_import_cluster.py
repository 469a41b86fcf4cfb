"""``import_warcs(..., scheduler=)``: the files imported on the workers of a Dask cluster,
then committed once.

Each file is a task. A worker opens the store itself (its location: an ``s3://`` URL, or a
folder every worker sees at the same path), reads the file as a local import does (records
the store holds already skipped, requests giving their responses' method) and writes what
it takes under a staging folder of the store, where no reader looks: on an object store one
pack a record type, each partition a file at a byte range of it; on a folder one file a
partition
(``storage/_staged.py``). It answers with those files, its report and its revisits, which
may refer to captures of any file and so wait for the commit. A worker that dies mid-file
takes only that task with it: the scheduler runs it again, and it stages the same names.

Once every file is done, each partition's staged rows become visible whole, a partition
at a time (each gets all of the import's records or none, whenever the process dies;
``storage/_staged.py``): on an object store, a partition without files is written by a
task as its compacted file, with its index, where it stays (its pages' data first, then
their metadata; a task writes neighbouring partitions, ~``_TASK_BYTES`` of their staged
rows, reading each pack once for them); any other partition's rows are merged by a task,
and this process names the one file a part file of it. Then this process stores the
revisits, resolved against what is now stored (in rounds of their own, as a local import
does: a revisit is stored once what it refers to is), has the partitions that got part
files compacted on the cluster, and indexes every month written. Without
``skip_invalid``, a problem in a file stops that file (what came before it there is
committed) and is raised once the rest is. The staging folder is the store's
(``Store.staging``): removed however the import ends (on an object store, its files a
request each: a few a WARC file), and that of an import whose process died is removed by
the store's next flush or compaction (on an object store, once the lease this process held
on it is stale).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Sequence

from web_index._bulk_load import BulkLoad
from web_index._on_cluster import compactor, shared_location
from web_index.archive._import_file import FileRead, ReadSettings, portable, read_files, worker_index
from web_index.archive._import_report import ImportReport
from web_index.archive._import_run import Run, _Capture
from web_index.archive._revisits import Waiting
from web_index.archive._sources import ArchiveFile
from web_index.index import WebIndex
from web_index.query import map_on_cluster
from web_index.storage import MethodPartition, Partition, Piece, method_partition

__all__ = ["import_on_cluster"]

# Staged bytes a task of new partitions writes (each staged file's share read in one request):
# ~20 tasks a GiB of WARCs, enough to spread over the workers, where a task a partition was
# ~730, each a task and a request for the scheduler and the object store.
_TASK_BYTES = 48 << 20


def import_on_cluster(
    index: WebIndex,
    files: Sequence[ArchiveFile],
    scheduler: str,
    *,
    calibre: int,
    skip_invalid: bool,
    batch: int,
    on_progress: Callable[[ImportReport], None] | None,
) -> ImportReport:
    """``import_warcs`` of ``files`` into ``index``, each file a task on the cluster at
    ``scheduler`` (``tcp://host:port``)."""
    location = shared_location(index.location)
    report = ImportReport()
    staged: dict[Partition, list[Piece]] = {}
    with index._store.staging() as folder, Waiting[tuple[_Capture, str]]() as waiting:
        work = functools.partial(
            _import_one,
            location,
            index._buffer_location,
            folder,
            ReadSettings(calibre, skip_invalid, batch, index.limits),
        )
        items = [(n, portable(f)) for n, f in enumerate(files)]
        for done, written in map_on_cluster(scheduler, work, items):
            report.include(done.report)
            for partition, piece in written:
                staged.setdefault(partition, []).append(piece)
            waiting.add(done.revisits)
            if on_progress is not None:
                on_progress(report)
        named, created = _commit(index, location, scheduler, folder, staged)
        run = Run(index, calibre, batch, report, 1, skip_invalid)
        run.deferred = waiting
        rounds = _Rounds(index, f"{folder}/revisits", named)
        run.revisit_load = rounds.load
        run.store_deferred()  # the revisits, now that what they refer to is stored
        # Once, on the cluster: the partitions that got part files; every month written indexed here.
        compact = compactor(index.location, index._buffer_location, scheduler, 1)
        index._store.compact(named, index_also=created, run=compact)
    if report.problems and not skip_invalid:
        first = report.problems[0]
        report.problems = []
        raise first
    return report


class _Rounds:
    """The revisits' loads, a round each (a revisit may refer to one of the round before):
    each staged, then named as parts when it ends, so that the next round reads it and the
    cluster compacts them with the rest, not this process."""

    def __init__(self, index: WebIndex, folder: str, named: set[MethodPartition]) -> None:
        self.index, self.folder, self.named, self.count = index, folder, named, 0

    @contextlib.contextmanager
    def load(self) -> Iterator[BulkLoad]:
        self.count += 1
        staging = BulkLoad(self.index._store, self.index.limits, stage=f"{self.folder}/{self.count}")
        with staging:
            yield staging
        self.named |= self.index._store.name_staged(staging.staged)


def _import_one(
    location: str,
    buffer: str | None,
    folder: str,
    settings: ReadSettings,
    item: tuple[int, ArchiveFile],
) -> tuple[FileRead, list[tuple[Partition, Piece]]]:
    """On a worker: one file read and staged under ``folder``/``n`` (a retry stages the same
    names; what it read before an error is staged too)."""
    n, file = item

    def new_load(index: WebIndex) -> BulkLoad:
        packed = index._store.backend.remote
        return BulkLoad(index._store, index.limits, stage=f"{folder}/{n}", packed=packed)

    def staged(load: BulkLoad, _: bool) -> list[tuple[Partition, Piece]]:
        load.finish()
        return load.staged

    # The request ids stay here: a staged load's records are told apart by the commit.
    read, written, _ = read_files(location, buffer, settings, [file], new_load, staged)
    return read, written


def _commit(
    index: WebIndex, location: str, scheduler: str, folder: str, staged: dict[Partition, list[Piece]]
) -> tuple[set[MethodPartition], set[MethodPartition]]:
    """Each partition's staged rows made visible (see the module's docstring); return the
    partitions that may have got a part file (to compact) and those written compacted."""
    store = index._store
    parted: set[MethodPartition] = set()
    created: set[MethodPartition] = set()
    if store.backend.remote:
        had_files = store.had_files()
        fresh = {p: pieces for p, pieces in staged.items() if not had_files(p)}
        staged = {p: pieces for p, pieces in staged.items() if p not in fresh}
        months = store.sharing_months()
        create = functools.partial(_create_some, location, index._buffer_location, months)
        for metadata in (False, True):  # a page's data before its metadata, as a flush
            wave = sorted((p, pieces) for p, pieces in fresh.items() if p.type.is_metadata is metadata)
            for done in map_on_cluster(scheduler, create, _tasks(wave)):
                for p, maybe_parted in done:
                    (parted if maybe_parted else created).add(method_partition(p))
        store.forget_listings(parted | created)  # written by the workers, not through this cache
    merge = functools.partial(_merge_one, location, index._buffer_location)
    several = [(p, pieces, _merged(folder, p)) for p, pieces in staged.items() if not _own_file(pieces)]
    one = {p: pieces[0] for p, pieces in staged.items() if _own_file(pieces)}
    for p, to in map_on_cluster(scheduler, merge, several):
        one[p] = Piece(to)
    return parted | store.name_staged(one.items()), created


def _own_file(pieces: list[Piece]) -> bool:
    """Whether a partition's rows are one staged file of its own, to be named as it is."""
    return len(pieces) == 1 and pieces[0].whole


def _tasks(wave: list[tuple[Partition, list[Piece]]]) -> list[list[tuple[Partition, list[Piece]]]]:
    """Neighbouring partitions (in the staged files' order), ~``_TASK_BYTES`` of rows a task."""
    tasks: list[list[tuple[Partition, list[Piece]]]] = []
    held = _TASK_BYTES
    for item in wave:
        size = sum(piece.size for piece in item[1])
        if held + size > _TASK_BYTES:
            tasks.append([])
            held = 0
        tasks[-1].append(item)
        held += size
    return tasks


def _merged(folder: str, partition: Partition) -> str:
    """Where the merge of a partition's staged files goes."""
    return f"{folder}/merged/{partition.compacted_path}"


def _merge_one(
    location: str, buffer: str | None, item: tuple[Partition, list[Piece], str]
) -> tuple[Partition, str]:
    partition, pieces, to = item
    worker_index(location, buffer)._store.merge_staged(partition, pieces, to)
    return partition, to


def _create_some(
    location: str,
    buffer: str | None,
    months: tuple[tuple[int, int], ...],
    items: list[tuple[Partition, list[Piece]]],
) -> list[tuple[Partition, bool]]:
    said = worker_index(location, buffer)._store.create_staged(items, months)
    return [(partition, maybe) for (partition, _), maybe in zip(items, said, strict=True)]
