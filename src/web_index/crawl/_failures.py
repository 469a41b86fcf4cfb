"""What a crawl's failed pages were: counts by state and reason, with the first
few URLs of each, so that a crawl ending with errors can say what they were."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FailureGroup", "FailureTally"]

URLS_KEPT = 5  # per group: enough to try one by hand, few enough for a terminal
# A site of 10,000 distinct errors must not grow a crawl's memory or its
# summary without end: past this many groups, the rest share one.
GROUPS_KEPT = 50
OTHER = "other reasons"


@dataclass(frozen=True, slots=True)
class FailureGroup:
    """Pages that gave no text for one reason: the final attempt's ``state``
    (the standard's words, or ``success`` for a page fetched but not indexed),
    the ``reason`` it gave, how many, and the first ``urls``."""

    state: str
    reason: str
    count: int
    urls: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        return {"state": self.state, "reason": self.reason, "count": self.count, "urls": list(self.urls)}


@dataclass(slots=True)
class FailureTally:
    """Failures counted as they happen (one process's roles share one)."""

    _groups: dict[tuple[str, str], tuple[int, list[str]]] = field(default_factory=dict)

    def add(self, state: str, reason: str, url: str) -> None:
        key = (state, reason)
        if key not in self._groups and len(self._groups) >= GROUPS_KEPT:
            key = (state, OTHER)
        count, urls = self._groups.get(key, (0, []))
        if len(urls) < URLS_KEPT:
            urls.append(url)
        self._groups[key] = (count + 1, urls)

    def groups(self) -> tuple[FailureGroup, ...]:
        """The groups, the most frequent first (then by state and reason)."""
        ordered = sorted(self._groups.items(), key=lambda kv: (-kv[1][0], kv[0]))
        return tuple(FailureGroup(s, r, n, tuple(u)) for (s, r), (n, u) in ordered)

    def __len__(self) -> int:
        return sum(n for n, _ in self._groups.values())
