"""A store opened by its location: what :class:`~web_index.WebIndex` opens, and
what a Dask worker opens for it (``web_index._on_cluster``) without the handle."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, cast

from web_index.errors import StoreError
from web_index.storage._clock import SYSTEM_CLOCK, Clock
from web_index.storage._files import WriteOptions
from web_index.storage._store import FlushPolicy, Store
from web_index.storage.backends import CacheConfig, CachingBackend, open_backend
from web_index.storage.buffer import Buffer

if TYPE_CHECKING:
    from web_index.storage.backends import S3Backend

__all__ = ["open_store"]


def open_store(
    location: str | os.PathLike[str],
    *,
    read_only: bool = False,
    durable: bool = True,
    policy: FlushPolicy | None = None,
    write_options: WriteOptions | None = None,
    buffer: str | Buffer | None = None,
    cache: bool | CacheConfig | None = None,
    clock: Clock = SYSTEM_CLOCK,
    create: bool = True,
) -> Store:
    """The store at ``location`` (a folder or ``s3://`` URL), with the read-through
    cache in front of an object store unless ``cache`` is ``False`` (the arguments
    are :class:`~web_index.WebIndex`'s)."""
    backend = open_backend(location)
    if cache is None:
        cache = backend.remote  # on by default for object stores
    if cache is not False:
        if not backend.remote:
            raise StoreError("the read-through cache is for object stores (s3://...)")
        backend = CachingBackend(
            cast("S3Backend", backend), cache if isinstance(cache, CacheConfig) else None, clock=clock
        )
    return Store(
        backend,
        readonly=read_only,
        durable=durable,
        policy=policy,
        write_options=write_options,
        buffer=buffer,
        clock=clock,
        create=create,
    )
