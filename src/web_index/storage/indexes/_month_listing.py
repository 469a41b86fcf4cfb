"""A month index's covers list by domain: the runs of each domain's files, and the
month folder's listing rebuilt from it (see ``MonthIndex.current_listing``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from web_index.storage._layout import Partition, StoredFile, parse_file_name
from web_index.storage.indexes._month_format import Covered

if TYPE_CHECKING:
    from web_index.storage.indexes._month import MonthIndex

__all__ = ["CoveredListing", "spans"]


def spans(covers: list[Covered]) -> dict[str, Sequence[int]]:
    """Each domain's file numbers: one run of the covers list, which a build
    writes sorted by domain (a hand-made index may not: then lists)."""
    spans: dict[str, Sequence[int]] = {}
    start, current = 0, None
    for n, c in enumerate(covers):
        if c.domain != current:
            if current is not None:
                spans[current] = range(start, n)
            if c.domain in spans:  # not sorted by domain
                lists: dict[str, list[int]] = {}
                for m, d in enumerate(covers):
                    lists.setdefault(d.domain, []).append(m)
                return dict(lists)
            start, current = n, c.domain
    if current is not None:
        spans[current] = range(start, len(covers))
    return spans


class CoveredListing(Mapping[str, list[StoredFile]]):
    """A month folder's files by domain, as the index covers them, each
    domain's list built when first asked for: a batch asks for a few thousand
    of a month's domains, and building all of them cost more than its lookups."""

    def __init__(self, index: MonthIndex) -> None:
        self._index = index
        self._built: dict[str, list[StoredFile]] = {}

    def __getitem__(self, domain: str) -> list[StoredFile]:
        files = self._built.get(domain)
        if files is None:
            ix = self._index
            partition = Partition(ix.type, ix.year, ix.month, domain)
            files = []
            for n in ix.spans[domain]:  # KeyError: not a domain of this month
                c = ix.covers[n]
                parsed = parse_file_name(c.name)
                # A name that is not a store file's (only a hand-made index has
                # one) is left out, as a listing of the folder leaves it out.
                if parsed is not None:
                    path = f"{ix.folder}/{c.name}"
                    files.append(StoredFile(partition, parsed[1], path, c.size, c.version))
            self._built[domain] = files
        return files

    def __contains__(self, domain: object) -> bool:
        return domain in self._index.spans

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.spans)

    def __len__(self) -> int:
        return len(self._index.spans)
