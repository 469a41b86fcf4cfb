"""What the page reader (``_reader``) has learnt of the files it read: each version's
footer, where its body chunks' metadata start, and the body pages of the row groups read,
kept for recently read files within a byte budget, so that reading a file again parses
neither its footer nor its offset indexes again."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple

__all__ = ["KNOWN", "Known", "KnownFiles", "Page"]


class Page(NamedTuple):
    offset: int
    size: int  # header included
    first_row: int


class Known:
    """What one version of a file has taught: its footer, where the body
    chunks' metadata start in it, and the body pages of the groups read."""

    def __init__(self) -> None:
        self.footer: bytes | None = None
        self.spots: list[int] | None = None
        self.pages: dict[int, list[Page]] = {}

    def weight(self) -> int:
        return len(self.footer or b"") + 8 * len(self.spots or ()) + 64 * sum(map(len, self.pages.values()))


class KnownFiles:
    """The :class:`Known` of recently read files, within a byte budget."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[str, bytes], tuple[Known, int]] = OrderedDict()
        self._total = 0

    def get(self, key: tuple[str, bytes]) -> Known | None:
        with self._lock:
            hit = self._entries.get(key)
            if hit is None:
                return None
            self._entries.move_to_end(key)
            return hit[0]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._total = 0

    def put(self, key: tuple[str, bytes], known: Known) -> None:
        weight = known.weight()
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._total -= old[1]
            if weight > self.budget:
                return
            self._entries[key] = (known, weight)
            self._total += weight
            while self._total > self.budget:
                _key, (_known, dropped) = self._entries.popitem(last=False)
                self._total -= dropped


# 32 MiB: the footers of a few big files (a 5 GB file's is ~5 MB) and the page
# locations of thousands of row groups.
KNOWN = KnownFiles(32 << 20)
