"""What an import did, record by record: the counts and problems an import returns
(``import_warcs``, ``import_wacz``) and each of its processes adds to."""

from __future__ import annotations

from dataclasses import dataclass, field

from web_index.errors import WarcError

__all__ = ["ImportReport"]


@dataclass
class ImportReport:
    """What an import did, record by record."""

    files: int = 0
    bytes: int = 0
    records: int = 0
    stored: int = 0
    already_stored: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # record type or reason -> count
    problems: list[WarcError] = field(default_factory=list)

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def include(self, other: ImportReport) -> None:
        """Add what ``other`` (another process's part of the import) counted."""
        self.files += other.files
        self.bytes += other.bytes
        self.records += other.records
        self.stored += other.stored
        self.already_stored += other.already_stored
        for why, count in other.skipped.items():
            self.skipped[why] = self.skipped.get(why, 0) + count
        self.problems += other.problems
