"""Published packs, downloaded and decompressed into a local folder, ready to query.

A pack is immutable once published, so a local copy named after its
generation never goes stale: a newer generation is a new file, swapped in
for the next query while queries on the old one finish (an unlinked file
stays readable to the connections that have it open).
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from pathlib import Path

from web_index.crawl._site_files import SiteFiles, check_site
from web_index.errors import SearchError, SiteNotFoundError
from web_index.search import PackInfo, PackReader, SearchPage, decompress_pack

__all__ = ["LocalPacks"]


class LocalPacks:
    """Local copies of sites' packs in ``folder``, each with a reader."""

    def __init__(self, files: SiteFiles, folder: Path) -> None:
        self.files = files
        self.folder = folder
        self._lock = threading.Lock()
        self._readers: dict[str, tuple[int, PackReader]] = {}
        self._retired: list[tuple[float, PackReader]] = []
        self._checked: dict[str, float] = {}
        self._loading: dict[str, threading.Lock] = {}

    def held(self) -> dict[str, int]:
        """Each site held and its generation."""
        with self._lock:
            return {site: gen for site, (gen, _) in self._readers.items()}

    def info(self, site: str) -> PackInfo | None:
        """What the pack held for ``site`` says about itself (pages, when it was
        built), or ``None`` if none is held."""
        with self._lock:
            held = self._readers.get(site)
        return None if held is None else held[1].info

    def used_bytes(self) -> int:
        """Bytes of the copies held."""
        with self._lock:
            paths = [reader.path for _, reader in self._readers.values()]
        return sum(p.stat().st_size for p in paths if p.exists())

    def load(self, site: str, generation: int | None = None) -> int:
        """Hold ``generation`` (default: the newest published) of ``site``'s pack;
        return the generation held. ``SearchError`` if the site has none."""
        site = check_site(site)
        if generation is None:
            generation = self.files.latest(site)
            if generation is None:
                raise SiteNotFoundError(f"no search database is published for {site!r}: crawl it first")
        with self._lock:
            current = self._readers.get(site)
        if current is not None and current[0] >= generation:
            return current[0]
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / f"{site}.{generation:08d}.sqlite"
        if not target.exists():
            # Named for this download alone: processes sharing the folder may load it at once.
            packed = self.folder / f"{site}.{generation:08d}.{uuid.uuid4().hex}.zst.part"
            try:
                self.files.download(site, generation, packed)
                decompress_pack(packed, target)
            except FileNotFoundError:
                raise SiteNotFoundError(f"{site} generation {generation} is no longer published") from None
            finally:
                packed.unlink(missing_ok=True)
        reader = PackReader(target)
        with self._lock:
            old = self._readers.get(site)
            self._readers[site] = (generation, reader)
        if old is not None:
            self._retire(old[1])
        self._forget_older(site, generation)
        return generation

    def _forget_older(self, site: str, generation: int) -> None:
        # Copies of older generations left by earlier processes (or by another
        # one sharing the folder: its open connections keep reading the unlinked file).
        prefix = f"{site}."
        for path in self.folder.iterdir():
            rest = path.name.removeprefix(prefix).removesuffix(".sqlite")
            ours = path.name.startswith(prefix) and path.name.endswith(".sqlite") and rest.isdigit()
            if ours and int(rest) < generation:
                path.unlink(missing_ok=True)

    def ensure(self, site: str, *, max_age: float = 5.0) -> int:
        """Hold the newest published generation of ``site``, asking the store at
        most every ``max_age`` seconds; return the generation held."""
        site = check_site(site)
        with self._lock:
            held, checked = self._readers.get(site), self._checked.get(site, float("-inf"))
            gate = self._loading.setdefault(site, threading.Lock())
        if held is not None and time.monotonic() - checked < max_age:
            return held[0]
        with gate:  # one download of a site at a time; the others then find it held
            with self._lock:
                held, checked = self._readers.get(site), self._checked.get(site, float("-inf"))
            if held is not None and time.monotonic() - checked < max_age:
                return held[0]
            generation = self.load(site)
            with self._lock:
                self._checked[site] = time.monotonic()
            return generation

    def drop(self, site: str) -> None:
        with self._lock:
            old = self._readers.pop(site, None)
        if old is not None:
            self._retire(old[1])

    def search(self, site: str, query: str, *, limit: int = 10, offset: int = 0) -> SearchPage:
        with self._lock:
            held = self._readers.get(site)
        if held is None:
            raise SearchError(f"{site!r} is not loaded here")
        return held[1].search(query, limit=limit, offset=offset)

    def _retire(self, reader: PackReader, grace: float = 60.0) -> None:
        # Queries in flight keep their connection to the unlinked file; the
        # reader is closed only once no query can still be using it.
        with contextlib.suppress(OSError):
            reader.path.unlink()
        now = time.monotonic()
        with self._lock:
            self._retired.append((now, reader))
            done = [r for t, r in self._retired if now - t > grace]
            self._retired = [(t, r) for t, r in self._retired if now - t <= grace]
        for old in done:
            old.close()

    def close(self) -> None:
        with self._lock:
            readers = [r for _, r in self._readers.values()] + [r for _, r in self._retired]
            self._readers, self._retired = {}, []
        for reader in readers:
            reader.close()
