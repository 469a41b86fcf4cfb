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

__all__ = ["BUFFER_DIR", "INDEX_DIR", "LOCK_DIR", "TMP_DIR", "Partition", "StoredFile", "parse_file_name"]

BUFFER_DIR = "_buffer"
LOCK_DIR = "_locks"
INDEX_DIR = "_index"  # month key indexes (storage/_index.py)
TMP_DIR = "_tmp"

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_DOMAIN = r"(?P<domain>[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)"
_PART_FILE = re.compile(rf"^{_DOMAIN}\.(?P<part>{_UUID})\.parquet$")
_COMPACTED_FILE = re.compile(rf"^{_DOMAIN}\.parquet$")


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


def parse_file_name(name: str) -> tuple[str, str | None] | None:
    """``(domain, part)`` of a file name in a month folder, or ``None`` if foreign."""
    match = _PART_FILE.match(name)
    if match is not None:
        part: str | None = match.group("part")
    else:
        match = _COMPACTED_FILE.match(name)
        part = None
    if match is None or ".." in match.group("domain"):
        return None
    return match.group("domain"), part
