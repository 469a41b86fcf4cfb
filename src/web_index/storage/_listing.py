"""What a store's folders hold, listed, and kept while the backend says a folder is unchanged;
a partition's visible files, opened."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from web_index._retry import retrying
from web_index.models import STORED_END, STORED_START, RecordType
from web_index.storage._files import WriteOptions, list_partition_files, visible_files
from web_index.storage._layout import Partition, StoredFile
from web_index.storage.backends import Backend

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["Listing", "had_files_of", "sharing_months"]

# A partition as listed, its visible files opened, its superseded files.
_Visible = tuple[list[StoredFile], list[tuple[StoredFile, "pq.ParquetFile"]], list[StoredFile]]
_OPEN_TRIES = 8


def _accepted(year: int, month: int) -> bool:
    return (STORED_START.year, STORED_START.month) <= (year, month) < (STORED_END.year, STORED_END.month)


class Listing:
    """The month folders of each record type and the files of each month, by domain."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        # Month listings, reused while the backend says the folder is unchanged.
        self._listings: dict[str, tuple[object, dict[str, list[StoredFile]]]] = {}
        # Month folders by type: (each folder's version, the months, those accepted), reused likewise.
        self._months: dict[
            RecordType, tuple[list[tuple[str, object]], list[tuple[int, int]], list[tuple[int, int]]]
        ] = {}

    def months(self, type: RecordType) -> list[tuple[int, int]]:
        """Months holding files of ``type``, newest first: those whose times the
        store accepts (see :meth:`months_out_of_range` for the others; shared: do not modify)."""
        return self._month_folders(type)[1]

    def months_out_of_range(self, type: RecordType) -> list[tuple[int, int]]:
        """Month folders outside the times the store accepts (written by a version
        that let a date like 9999-12-31 in): queries skip them, ``verify`` reports them."""
        return [m for m in self._month_folders(type)[0] if not _accepted(*m)]

    def _month_folders(self, type: RecordType) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """Every month folder of ``type`` and those the store accepts, newest first (shared)."""
        # A CDX query lists the months every time: a stat a folder, not a listing, while unchanged.
        cached = self._months.get(type)
        version = self.backend.folder_version
        if cached is not None and all(v is not None and version(f) == v for f, v in cached[0]):
            return cached[1], cached[2]
        checked = [(type.value, version(type.value))]  # each version taken before its listing
        out: list[tuple[int, int]] = []
        for year in self.backend.list_folders(type.value):
            if not (year.isdigit() and len(year) == 4):
                continue
            folder = f"{type.value}/{year}"
            checked.append((folder, version(folder)))
            for month in self.backend.list_folders(folder):
                if month.isdigit() and len(month) == 2 and 1 <= int(month) <= 12:
                    out.append((int(year), int(month)))
        months = sorted(out, reverse=True)
        accepted = [m for m in months if _accepted(*m)]
        self._months[type] = (checked, months, accepted)
        return months, accepted

    def month_files(self, type: RecordType, year: int, month: int) -> dict[str, list[StoredFile]]:
        """The files of a month folder by domain (shared: do not modify)."""
        folder = f"{type.value}/{year:04d}/{month:02d}"
        # The version is taken before listing: a change during the listing
        # leaves an older version next to it, so the next call lists again.
        version = self.backend.folder_version(folder)
        if version is not None:
            cached = self._listings.get(folder)
            if cached is not None and cached[0] == version:
                return cached[1]
        listing = list_partition_files(self.backend, folder, type, year, month)
        if version is not None:
            self._listings[folder] = (version, listing)
        return listing

    def partition_files(self, partition: Partition) -> list[StoredFile]:
        p = partition
        cached = self._listings.get(p.folder)
        if cached is not None and cached[0] == self.backend.folder_version(p.folder):
            return list(cached[1].get(p.domain, []))
        by_domain = list_partition_files(self.backend, p.folder, p.type, p.year, p.month, p.domain)
        return by_domain.get(p.domain, [])

    def open_visible(
        self, partition: Partition, files: list[StoredFile] | None = None, *, once: bool = False
    ) -> _Visible:
        """Open the visible files of a partition: its files as listed (``files``,
        else listed now), the visible ones opened (``once``: to be read once), and the superseded ones.

        A file gone between listing and opening (a compaction committed) makes
        it list again; a partition that keeps changing is a :class:`StoreError`.
        """
        listed = [self.partition_files(partition) if files is None else files]

        def open_listed() -> _Visible:
            try:
                return (listed[0], *visible_files(self.backend, listed[0], once=once))
            except FileNotFoundError:
                listed[0] = self.partition_files(partition)
                raise

        return retrying(
            open_listed,
            tries=_OPEN_TRIES,
            on=(FileNotFoundError,),
            gave_up=f"partition {partition} kept changing while it was read; try again",
        )


def had_files_of(listing: Listing) -> Callable[[Partition], bool]:
    """Whether a partition has files, from one listing a month taken when first asked."""
    listed: dict[tuple[RecordType, int, int], set[str]] = {}

    def had_files(p: Partition) -> bool:
        # One listing a month, taken before the commit names anything in it.
        month = (p.type, p.year, p.month)
        if month not in listed:
            listed[month] = {d for d, files in listing.month_files(*month).items() if files}
        return p.domain in listed[month]

    return had_files


def sharing_months(listing: Listing, options: WriteOptions) -> tuple[tuple[int, int], ...]:
    """The months whose ``get`` files a new compacted file's payloads may be shared with."""
    return tuple(listing.months(RecordType.GET)) if options.share_payloads else ()
