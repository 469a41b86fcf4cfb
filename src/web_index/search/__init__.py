"""Full-text search over crawled pages: one SQLite FTS5 "pack" per site.

A packer builds a site's pack from the pages' main text
(:func:`build_pack`), keeps it current (:func:`update_pack`), and publishes
it compressed (:func:`compress_pack`); searchers fetch it, decompress it
(:func:`decompress_pack`) and query it (:class:`PackReader`,
:func:`search_pack`) with free text (:func:`fts_query`). This package is the
library only: no queues, storage or network.

``__all__`` is the public API.
"""

from web_index.search._compress import compress_pack, decompress_pack
from web_index.search._models import PackInfo, PageText, SearchHit, SearchPage
from web_index.search._pack import build_pack, read_pack_info, update_pack
from web_index.search._query import fts_query
from web_index.search._reader import MAX_LIMIT, MAX_OFFSET, PackReader, check_page, search_pack

__all__ = [
    "MAX_LIMIT",
    "MAX_OFFSET",
    "PackInfo",
    "PackReader",
    "PageText",
    "SearchHit",
    "SearchPage",
    "build_pack",
    "check_page",
    "compress_pack",
    "decompress_pack",
    "fts_query",
    "read_pack_info",
    "search_pack",
    "update_pack",
]
