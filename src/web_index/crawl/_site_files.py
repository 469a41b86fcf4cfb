"""A site's page texts and published search databases, kept beside the store.

``search/text/<site>/<time>-<id>.parquet``: page texts as indexers extracted
them, one file per batch (many indexers never write the same file; a batch
is one object on S3, not one per page). The name starts with the UTC time it
was written, so that an incremental pack reads only files newer than its
watermark (less a grace period: an indexer's clock may lag, or its write may
land after a later-named one).

``search/packs/<site>/<generation>.sqlite.zst``: the published databases,
each written whole (a rename on disk, one upload on S3, streamed) under a new generation
number, so that a reader sees a complete database or none.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from web_index.crawl._messages import MessageError
from web_index.search import PageText
from web_index.storage import Backend

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["GRACE", "SiteFiles", "check_site"]

TEXT_DIR = "search/text"
PACK_DIR = "search/packs"
GRACE = timedelta(minutes=2)
# A host name (underscores occur in real ones), or an IPv6 address in brackets; then a port.
_SITE = re.compile(r"(?:[a-z0-9_](?:[a-z0-9._-]{0,251}[a-z0-9_])?|\[[0-9a-f:.]{2,45}\])(?::[0-9]{1,5})?")
_PACK = re.compile(r"(\d{8})\.sqlite\.zst")
_STAMP = "%Y%m%dT%H%M%S%f"


@functools.cache
def _text_schema() -> pa.Schema:
    """A text file's columns, built (and pyarrow imported) when a text is first written."""
    import pyarrow as pa

    fields: list[pa.Field[Any]] = [
        pa.field("url", pa.string()),
        pa.field("title", pa.string()),
        pa.field("text", pa.large_string()),
        pa.field("lang", pa.string()),
        pa.field("fetched", pa.timestamp("us", tz="UTC")),
        pa.field("deleted", pa.bool_()),
    ]
    return pa.schema(fields)


def check_site(site: str) -> str:
    """``site`` if it can name a site's folder (a lower-case host name or an
    IPv6 address in brackets, with ``:port`` when not the default); else
    :class:`MessageError`: it comes from a message, and must never reach a path."""
    if not _SITE.fullmatch(site) or ".." in site:
        raise MessageError(f"site {site!r} is not a lower-case host name")
    return site


class SiteFiles:
    """Page texts and packs of every site, in ``backend`` (the store's)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    # --- texts ----------------------------------------------------------------
    def write_texts(self, site: str, texts: Sequence[PageText], *, now: datetime | None = None) -> str:
        """Write one batch of ``site``'s texts; return the file's name."""
        import pyarrow as pa

        stamp = (now or datetime.now(UTC)).strftime(_STAMP)
        name = f"{stamp}-{uuid.uuid4().hex[:12]}.parquet"
        table = pa.table(
            {
                "url": [t.url for t in texts],
                "title": [t.title for t in texts],
                "text": [t.text for t in texts],
                "lang": [t.lang for t in texts],
                "fetched": [t.fetched for t in texts],
                "deleted": [t.deleted for t in texts],
            },
            schema=_text_schema(),
        )
        self.backend.write_parquet(f"{TEXT_DIR}/{check_site(site)}/{name}", table, compression="zstd")
        return name

    def text_files(self, site: str, after: str = "") -> list[str]:
        """Names of ``site``'s text files, oldest first; with ``after`` (a
        watermark), only those written after it less :data:`GRACE`."""
        names = sorted(f.name for f in self.backend.list_files(f"{TEXT_DIR}/{check_site(site)}"))
        names = [n for n in names if n.endswith(".parquet")]
        if after:
            try:
                since = datetime.strptime(after.split("-", 1)[0], _STAMP) - GRACE
            except ValueError:
                return names
            floor = since.strftime(_STAMP)
            names = [n for n in names if n >= floor]
        return names

    def read_texts(self, site: str, names: Sequence[str]) -> Iterator[PageText]:
        """The texts of the files ``names``, in order."""
        for name in names:
            try:
                table = self.backend.open_parquet(f"{TEXT_DIR}/{check_site(site)}/{name}").read()
            except FileNotFoundError:
                continue
            for row in table.to_pylist():
                yield PageText(
                    url=row["url"],
                    title=row["title"] or "",
                    text=row["text"] or "",
                    lang=row["lang"],
                    fetched=row["fetched"],
                    deleted=bool(row["deleted"]),
                )

    # --- packs ----------------------------------------------------------------
    def sites(self) -> list[str]:
        """Every site with at least one published pack."""
        return sorted(s for s in self.backend.list_folders(PACK_DIR) if self.generations(s))

    def generations(self, site: str) -> list[int]:
        files = self.backend.list_files(f"{PACK_DIR}/{check_site(site)}")
        return sorted(int(m.group(1)) for f in files if (m := _PACK.fullmatch(f.name)))

    def latest(self, site: str) -> int | None:
        found = self.generations(site)
        return found[-1] if found else None

    def pack_size(self, site: str, generation: int) -> int:
        for f in self.backend.list_files(f"{PACK_DIR}/{check_site(site)}", f"{generation:08d}."):
            return f.size
        raise FileNotFoundError(f"{site} generation {generation}")

    def publish(self, site: str, generation: int, compressed: Path) -> None:
        """Publish the compressed database ``compressed`` as ``generation``."""
        self.backend.copy_in(compressed, _pack_path(site, generation))

    def download(self, site: str, generation: int, dest: Path) -> None:
        """Copy ``generation``'s compressed database to ``dest``."""
        self.backend.copy_out(_pack_path(site, generation), dest)

    def prune(self, site: str, keep: int = 3) -> list[int]:
        """Delete all but the newest ``keep`` generations (a searcher may still be
        downloading the one before the newest); return those deleted."""
        old = self.generations(site)[:-keep]
        for generation in old:
            self.backend.delete(_pack_path(site, generation))
        return old


def _pack_path(site: str, generation: int) -> str:
    return f"{PACK_DIR}/{check_site(site)}/{generation:08d}.sqlite.zst"
