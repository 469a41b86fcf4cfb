"""Where a store's files live: one contract (:class:`Backend`, ``base.py``)
kept by a local folder (``local.py``), an S3 bucket (``s3.py``) and the
read-through cache in front of S3 (``cache.py``); :func:`open_backend` picks
one from a location.

``S3Backend`` needs the ``s3`` extra (obstore) and is imported on first use.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from web_index._extras import import_extra, lazy_names
from web_index.errors import StoreError
from web_index.storage.backends._object_file import (
    ObjectFile,
    ObjectInfo,
    RequestCounter,
    file_info,
    handle_version,
)
from web_index.storage.backends.base import (
    Backend,
    FileInfo,
    new_spool,
    remove_dead_spools,
    sealed_bytes,
    write_sealed,
    write_table,
)
from web_index.storage.backends.cache import CacheConfig, CacheStats, CachingBackend
from web_index.storage.backends.local import LocalBackend, open_files_share

if TYPE_CHECKING:
    from web_index.storage.backends.s3 import S3Backend

__all__ = [
    "Backend",
    "CacheConfig",
    "CacheStats",
    "CachingBackend",
    "FileInfo",
    "LocalBackend",
    "ObjectFile",
    "ObjectInfo",
    "RequestCounter",
    "S3Backend",
    "file_info",
    "handle_version",
    "new_spool",
    "open_backend",
    "open_files_share",
    "remove_dead_spools",
    "sealed_bytes",
    "write_sealed",
    "write_table",
]


def open_backend(location: str | os.PathLike[str]) -> Backend:
    """The backend for a store location: a path, a ``file://`` URL or ``s3://bucket/prefix``."""
    text = os.fspath(location)
    if text.startswith(("s3://", "s3a://")):
        s3 = import_extra("web_index.storage.backends.s3", "s3")
        return s3.S3Backend(text)  # type: ignore[no-any-return]
    if text.startswith("file://"):
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise StoreError(f"file:// URLs must be local, got host {parts.netloc!r}")
        return _local(Path(unquote(parts.path)))
    if "://" in text:
        scheme = text.split("://", 1)[0]
        raise StoreError(f"unsupported store location scheme {scheme!r} in {text!r}")
    return _local(Path(text).expanduser())


def _local(path: Path) -> LocalBackend:
    # Said here, for every opening: a file given as a store would otherwise "not exist".
    if path.exists() and not path.is_dir():
        raise StoreError(f"no store at {path.resolve().as_uri()}: it is a file, not a store folder")
    return LocalBackend(path)


__getattr__ = lazy_names(__name__, {"S3Backend": ("web_index.storage.backends.s3", "s3")})
