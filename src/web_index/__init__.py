"""web-index: keep everything a crawler fetches, and answer questions about it fast."""

from web_index._bulk_load import BulkLoad
from web_index._version import __version__
from web_index.index import WebIndex
from web_index.ingest import Limits
from web_index.storage import CacheConfig, FlushPolicy, WriteOptions

__all__ = ["BulkLoad", "CacheConfig", "FlushPolicy", "Limits", "WebIndex", "WriteOptions", "__version__"]
