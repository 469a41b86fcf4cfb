"""Where things live in a store: partitions, file names, reserved folders.

A store is a folder (or bucket prefix) holding the standard's layout
``<type>/<yyyy>/<mm>/<domain>.<part>.parquet`` plus reserved ``_``-prefixed
folders for the insert buffer, locks and temporary files.
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

from web_index.models import RecordType

__all__ = [
    "BUFFER_DIR",
    "CAPTURES_DIR",
    "INDEX_DIR",
    "LOCK_DIR",
    "STORE_ENTRIES",
    "STORE_MARKER",
    "TMP_DIR",
    "Partition",
    "StoredFile",
    "compacted_file",
    "parse_file_name",
]

BUFFER_DIR = "_buffer"
LOCK_DIR = "_locks"
INDEX_DIR = "_index"  # month key indexes (storage/indexes/_month.py)
CAPTURES_DIR = "_captures"  # capture indexes (storage/indexes/_captures.py)
TMP_DIR = "_tmp"
# Says "this location is a web-index store": written when a store is created,
# so that a reader given a wrong location fails instead of answering nothing.
STORE_MARKER = "_web-index.json"
# What a store made before the marker holds at its top (docs/format.md).
STORE_ENTRIES = frozenset({*(t.value for t in RecordType), BUFFER_DIR, INDEX_DIR})

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DOMAIN = re.compile(r"[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?")
_SUFFIX = ".parquet"
_PART_LEN = 37  # "." + a UUID


class Partition(NamedTuple):
    """One (type, year, month, domain): the unit of files and of locking."""

    type: RecordType
    year: int
    month: int
    domain: str

    @property
    def folder(self) -> str:
        return f"{self.type.value}/{self.year:04d}/{self.month:02d}"

    @property
    def compacted_path(self) -> str:
        return f"{self.folder}/{self.domain}.parquet"

    def part_path(self, part: str) -> str:
        str(uuid.UUID(part))  # a part id is always a UUID: nothing else reaches a path
        return f"{self.folder}/{self.domain}.{part}.parquet"

    def __str__(self) -> str:
        return f"{self.folder}/{self.domain}"


class StoredFile(NamedTuple):
    partition: Partition
    part: str | None  # None for the compacted file
    path: str
    size: int
    version: str  # changes with every write of the file (Backend.FileInfo.version)

    @property
    def name(self) -> str:
        """The file's name in its month folder."""
        return self.path.rsplit("/", 1)[-1]


def compacted_stored(partition: Partition, size: int, version: str) -> StoredFile:
    """The partition's compacted file, of that size and version."""
    return StoredFile(partition, None, partition.compacted_path, size, version)


def compacted_file(files: list[StoredFile]) -> StoredFile | None:
    """The compacted file among a partition's files, if it has one."""
    return next((f for f in files if f.part is None), None)


def parse_file_name(name: str) -> tuple[str, str | None] | None:
    """``(domain, part)`` of a file name in a month folder, or ``None`` if foreign.

    ``<domain>.<uuid>.parquet`` is a part, ``<domain>.parquet`` a compacted file.
    """
    # Slicing, not one regex for both forms: a listing parses every file of a
    # month, and the regex's backtracking over the domain cost 18 us a name.
    if not name.endswith(_SUFFIX):
        return None
    stem = name[: -len(_SUFFIX)]
    n = len(stem) - _PART_LEN
    if n > 0 and stem[n] == "." and _UUID.fullmatch(stem, n + 1) is not None:
        domain = stem[:n]
        if _DOMAIN.fullmatch(domain) is not None:
            return (domain, stem[n + 1 :]) if ".." not in domain else None
    if _DOMAIN.fullmatch(stem) is None or ".." in stem:
        return None
    return stem, None
