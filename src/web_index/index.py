"""``WebIndex``: the read/append handle of a store."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Self

from web_index._attempts import InsertItem, key_of, validate_items
from web_index._bulk_load import BulkLoad
from web_index._reading import Reading
from web_index.ingest import Limits
from web_index.models import AttemptMetadata, PageKey, RecordType, Response
from web_index.storage import (
    SYSTEM_CLOCK,
    Buffer,
    CacheConfig,
    Clock,
    FlushPolicy,
    MethodPartition,
    WriteOptions,
    gc_paused,
    open_store,
)

__all__ = ["InsertItem", "WebIndex"]


class WebIndex(Reading):
    """A web index store at ``location`` (a folder or ``file://`` URL).

    Inserts are durable when they return and visible at once to queries from
    any process. Use as a context manager, or call :meth:`close`.

    ``read_only=True`` opens without creating anything and refuses writes.
    A location that is not a store yet becomes one (its marker written), unless
    ``create=False`` or ``read_only``: then it is a
    :class:`~web_index.errors.StoreError`, so that a mistyped location fails
    instead of answering nothing.
    ``buffer``: the insert buffer; by default SQLite (in the store folder, or
    in a local per-store folder for an ``s3://`` store: one writer machine);
    ``"postgresql://..."`` shares one buffer between writers on many machines.
    ``cache``: the read-through cache of listings, footers and row groups
    (``CacheConfig``); on by default for ``s3://`` stores.
    ``durable=False`` trades power-loss durability for speed (a killed process
    still loses nothing acknowledged). ``clock`` decides the age of buffered
    inserts and cache expiry (a :class:`~web_index.storage.Clock`; tests and
    simulations pass one they advance by hand). ``policy`` decides when buffered inserts
    become Parquet part files and when partitions compact themselves.
    ``limits`` (:class:`~web_index.Limits`) caps body, header, URL and log sizes:
    a larger value is refused, naming the field.
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        *,
        read_only: bool = False,
        durable: bool = True,
        policy: FlushPolicy | None = None,
        write_options: WriteOptions | None = None,
        buffer: str | Buffer | None = None,
        cache: bool | CacheConfig | None = None,
        clock: Clock = SYSTEM_CLOCK,
        limits: Limits | None = None,
        create: bool = True,
    ) -> None:
        self.location = os.fspath(location)
        self._store = open_store(
            location,
            read_only=read_only,
            durable=durable,
            policy=policy,
            write_options=write_options,
            buffer=buffer,
            cache=cache,
            clock=clock,
            create=create,
        )
        self.read_only = read_only
        self.limits = limits or Limits()
        # Whether reads wait on the network (an object store, a PostgreSQL buffer): the
        # archive server reads a local store on its event loop, a remote one in threads.
        self.remote = self._store.remote
        # What a Dask worker opens to share the buffer (scheduler=): a DSN, not an object.
        self._buffer_location = buffer if isinstance(buffer, str) else None
        self._reopenable = buffer is None or isinstance(buffer, str)  # another process can open it again

    # -- context ---------------------------------------------------------------

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the buffer connection. Buffered inserts stay durable; nothing is lost."""
        self._store.close()

    def __repr__(self) -> str:
        return f"WebIndex({self.location!r}{', read_only=True' if self.read_only else ''})"

    # -- writing ---------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.read_only:
            from web_index.errors import StoreError

            raise StoreError("this WebIndex was opened read_only")

    def insert(
        self,
        type: RecordType | str,
        url: str,
        timestamp: datetime | str,
        metadata: AttemptMetadata | Mapping[str, Any],
        data: Sequence[Response | Mapping[str, Any]] = (),
    ) -> PageKey:
        """Store one fetch attempt; return the :class:`PageKey` that finds it again.

        ``type`` is ``"get"`` or ``"head"``, ``timestamp`` when the attempt
        began (timezone-aware), ``metadata`` the attempt's metadata record and
        ``data`` its response chain (empty for a failed attempt). The store
        assigns the ``request_id``. Anything invalid raises
        :class:`~web_index.errors.InvalidRecordError` naming the field, and
        nothing is stored.

        The returned key is for the data record of a successful attempt and for
        the metadata record of a failed one.
        """
        return self.insert_many([(type, url, timestamp, metadata, data)])[0]

    def insert_many(
        self, items: Iterable[InsertItem], *, request_ids: Sequence[str] | None = None
    ) -> list[PageKey]:
        """Store many attempts in one durable transaction: all or none.

        Every item is validated before anything is written. ``request_ids``
        is for importers whose records carry an identity of their own (a WARC
        record id), one UUID string per item: the same record imported again
        then has the same key, so the importer can see it is stored already.
        """
        self._check_writable()
        with gc_paused():
            return self._insert_many(items, request_ids)

    def _insert_many(self, items: Iterable[InsertItem], given: Sequence[str] | None = None) -> list[PageKey]:
        attempts = validate_items(items, given, self.limits)
        if attempts:
            self._store.append(attempts)
        return [key_of(a) for a in attempts]

    def bulk_load(
        self,
        *,
        chunk: int = 50_000,
        commit_bytes: int | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        jobs: int = 1,
    ) -> BulkLoad:
        """A bulk load: attempts added to it go straight into Parquet partition
        files, past the insert buffer, and leave the store compacted and indexed.

        Use it as a context manager and :meth:`BulkLoad.add` items as to
        :meth:`insert_many`; they are spilled ``chunk`` attempts at a time
        (sooner if their bodies pass 64 MiB), sorted by partition, into files of
        the store's spool folder; once ``commit_bytes`` are spilled (by default
        8 GiB, or half the spool disk's free space if less), and at the end of
        the ``with`` block, every partition spilled is written in one file.
        The end of the block also compacts every partition the load added a
        part file to (one that had files already, an earlier commit's too) and
        brings the month and capture indexes up to date, also when the block
        raised.
        ``on_progress(done, total)`` follows that last step.

        ``jobs`` > 1: worker processes write each commit's files (docs/api.md#bulk-loads).

        Unlike :meth:`insert_many`, a load is not one transaction: each ``add``
        is validated whole (all of it or none of it is taken), what is added is
        durable and visible once committed, and a crash loses what was not yet
        committed and may leave a commit's partitions partly written, each
        partition whole. Run again with the same ``request_ids`` (an importer's),
        a load stores nothing twice. See docs/performance.md for when it pays.
        """
        self._check_writable()
        return BulkLoad(
            self._store,
            self.limits,
            chunk=chunk,
            commit_bytes=commit_bytes,
            on_progress=on_progress,
            jobs=jobs,
            reopen=(self.location, self._buffer_location) if self._reopenable else None,
        )

    def flush(self) -> int:
        """Write every buffered insert to Parquet part files; return how many attempts moved."""
        self._check_writable()
        return self._store.flush()

    def compact(
        self,
        *,
        min_parts: int = 1,
        partitions: Iterable[MethodPartition] | None = None,
        scheduler: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> int:
        """Roll part files into one ``<domain>.parquet`` per partition.

        Only partitions with at least ``min_parts`` part files are compacted;
        ``min_parts=0`` also rewrites every compacted file written as files no
        longer are (an older format, or big bodies without body pages: see
        docs/format.md), the upgrade of a store written by an older version.
        Then the month key indexes are brought up to date and every compacted
        file without a capture index gets one. Safe while other processes
        write and read. Returns how many partitions changed.
        ``scheduler`` (``tcp://host:port``) compacts the partitions on that Dask
        cluster, one task each (docs/scale.md); ``on_progress(done, total)``
        after each partition and month.
        """
        self._check_writable()
        run = None
        if scheduler is not None:
            from web_index._on_cluster import compactor

            run = compactor(self.location, self._buffer_location, scheduler, min_parts)
        return self._store.compact(partitions, min_parts=min_parts, on_progress=on_progress, run=run)

    # -- housekeeping ----------------------------------------------------------

    def verify(self) -> Any:
        """Check every file and invariant; change nothing. Returns a ``VerifyReport``."""
        from web_index.storage import verify

        return verify(self._store)

    def stats(self) -> Any:
        """Per type/month/domain counts, bytes and part files. Returns ``StoreStats``."""
        from web_index.storage import stats

        return stats(self._store)

    def attempt_counts(self) -> list[Any]:
        """Every fetch attempt (the metadata types), buffered ones included,
        counted by type, month, registrable domain, state, calibre and fetcher.
        Returns ``AttemptCount``s; from the month indexes where compaction keeps
        them current, else from the partitions' state columns."""
        from web_index.storage import attempt_counts

        return attempt_counts(self._store)
