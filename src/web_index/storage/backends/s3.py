"""A store in an S3-compatible bucket (AWS S3, MinIO, R2, SeaweedFS), through ``obstore``.

``s3://bucket/prefix`` holds the same layout as a local store. Endpoint and
credentials come from the usual AWS settings: ``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_SESSION_TOKEN``,
``AWS_REGION``, or a profile of ``~/.aws/credentials`` and ``~/.aws/config``
(``AWS_PROFILE``). Plain ``http://`` endpoints are allowed (a loopback MinIO or
SeaweedFS).

Writes are single PUTs of the whole object, which S3 makes visible atomically
(readers see the old object or the new one). Reads go through
:class:`ObjectFile`, a file-like object that fetches the tail of the object
(footer, and the whole object if it is small) in one request and any other
byte range on demand, each pinned to the ETag of the first read (``If-Match``),
so a reader never mixes the bytes of two versions of an object: a replaced or
deleted object raises ``FileNotFoundError`` and the reader lists again.

Transient errors (5xx, dropped connections, timeouts) are retried with
exponential backoff by obstore; a permanent one (missing bucket, bad
credentials) raises :class:`~web_index.errors.StoreError` naming the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import obstore as obs
import pyarrow as pa
import pyarrow.parquet as pq
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionError,
    UnauthenticatedError,
)

from web_index.errors import ConflictError, StoreError
from web_index.storage._layout import TMP_DIR
from web_index.storage.backends._object_file import ObjectFile, ObjectInfo, RequestCounter, file_info
from web_index.storage.backends._s3_config import new_store, store_config
from web_index.storage.backends.base import (
    FileInfo,
    listed_file,
    new_spool,
    remove_dead_spools,
    sealed_bytes,
    store_path,
    write_sealed,
)
from web_index.storage.pages import check_whole

# ``write_parquet``'s ``written``: the object's bytes as sent (in memory, or a local file), and its info.
_Written = Callable[[bytes | bytearray | Path, FileInfo], None]

__all__ = ["S3Backend"]

# One GET of the last TAIL bytes reads the footer, and the whole object when it
# is smaller: part files are, so opening one costs one request.
TAIL = 1 << 20
# Objects larger than this (only ever written from a stream: a compaction) go
# up in parts of _PART_BYTES, four at a time, instead of one PUT held in memory.
MULTIPART = 64 << 20
_PART_BYTES = 8 << 20


class S3Backend:
    """A store under ``s3://bucket/prefix``."""

    def __init__(
        self,
        url: str,
        *,
        config: Mapping[str, Any] | None = None,
        max_retries: int = 6,
        retry_timeout_s: float = 60.0,
        tail_bytes: int = TAIL,
        multipart_bytes: int = MULTIPART,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("s3", "s3a") or not parts.netloc:
            raise StoreError(f"an S3 store location is s3://bucket/prefix, got {url!r}")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/")
        self._url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        settings = {**store_config(self.bucket), **(config or {})}
        self.endpoint = str(settings.get("endpoint", "aws"))
        self.tail_bytes = tail_bytes
        self.multipart_bytes = multipart_bytes
        self.requests = RequestCounter()
        # Set by the read-through cache: cache-on-write of what this process wrote.
        self.on_written: Callable[[str, int, bytes, str | None], None] | None = None
        try:
            self.store = new_store(self.bucket, self.prefix, settings, max_retries, retry_timeout_s)
        except BaseError as exc:
            raise StoreError(f"cannot configure the S3 store {self._url}: {exc}") from None

    remote = True  # shared by every machine that opens the bucket

    @property
    def url(self) -> str:
        return self._url

    def __repr__(self) -> str:
        return f"S3Backend({self._url!r}, endpoint={self.endpoint!r})"

    # -- errors ----------------------------------------------------------------

    def _fail(self, exc: BaseException, what: str) -> StoreError:
        text = str(exc).split("\n", 1)[0]
        if isinstance(exc, UnauthenticatedError | PermissionDeniedError) or " 403 " in text:
            return StoreError(f"{self._url}: access denied while {what} (check the credentials): {text}")
        if "NoSuchBucket" in str(exc) or (" 404 " in text and "list" in what):
            return StoreError(f"{self._url}: the bucket {self.bucket!r} does not exist ({what})")
        return StoreError(f"{self._url}: object store error while {what}: {text}")

    # -- listing ---------------------------------------------------------------

    def list_objects(self, folder: str) -> tuple[list[ObjectInfo], list[str]]:
        """Objects directly in ``folder`` and its sub-folders' names: one LIST request."""
        folder = folder.strip("/")
        prefix = store_path(folder) + "/" if folder else "/"
        self.requests.add("list")
        try:
            result = obs.list_with_delimiter(self.store, prefix)
        except NotFoundError as exc:
            # Listing a missing prefix is an empty result; a 404 means the bucket is gone.
            raise self._fail(exc, f"listing {prefix}") from None
        except BaseError as exc:
            raise self._fail(exc, f"listing {prefix}") from None
        except OSError as exc:
            raise self._fail(exc, f"listing {prefix}") from None
        files = [
            ObjectInfo(str(m["path"]).rsplit("/", 1)[-1], int(m["size"]), m.get("e_tag"))
            for m in result["objects"]
            # Some servers (SeaweedFS) list the folder itself once its last file is gone.
            if str(m["path"]).rstrip("/") != prefix.rstrip("/")
        ]
        folders = [p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"]]
        return files, folders

    def file_info(self, path: str, *, fresh: bool = False) -> FileInfo:
        return listed_file(self, path)  # a listing of the store's, always fresh

    def list_files(self, folder: str, prefix: str = "") -> list[FileInfo]:
        return [file_info(o) for o in self.list_objects(folder)[0] if o.name.startswith(prefix)]

    def folder_version(self, folder: str) -> object | None:
        return None  # no cheap change token for a prefix: listings are not reused

    def list_folders(self, folder: str) -> list[str]:
        return self.list_objects(folder)[1]

    # -- reading ---------------------------------------------------------------

    def get_tail(self, path: str, length: int) -> tuple[bytes, int, str | None]:
        """The last ``length`` bytes of an object, its size and ETag (one GET)."""
        self.requests.add("get")
        try:
            result = obs.get(self.store, store_path(path), options={"range": {"suffix": length}})
            data = bytes(result.bytes())
        except NotFoundError:
            raise FileNotFoundError(path) from None
        except BaseError as exc:
            raise self._fail(exc, f"reading {path}") from None
        return data, int(result.meta["size"]), result.meta.get("e_tag")

    def get_range(self, path: str, start: int, end: int, etag: str | None) -> bytes:
        """Bytes ``[start, end)`` of the version ``etag`` of an object."""
        self.requests.add("get")
        options: dict[str, Any] = {"range": (start, end)}
        if etag is not None:
            options["if_match"] = etag
        try:
            return bytes(obs.get(self.store, store_path(path), options=options).bytes())  # type: ignore[arg-type]
        except (NotFoundError, PreconditionError):
            # Deleted or replaced (a compaction committed): the caller lists again.
            raise FileNotFoundError(path) from None
        except BaseError as exc:
            raise self._fail(exc, f"reading {path}") from None

    def read_range(
        self, path: str, start: int, length: int, *, fresh: bool = False, once: bool = False
    ) -> bytes:
        return self.get_range(path, start, start + length, None) if length else b""

    def open_parquet(self, path: str, *, once: bool = False) -> pq.ParquetFile:
        return self.open_object(path).parquet()

    def open_object(self, path: str, on_gone: Callable[[str], None] | None = None) -> ObjectFile:
        data, size, etag = self.get_tail(path, self.tail_bytes)
        return ObjectFile(self, path, size, etag, data, on_gone=on_gone)

    def read_object(self, path: str) -> bytes:
        self.requests.add("get")
        try:
            return bytes(obs.get(self.store, store_path(path)).bytes())
        except NotFoundError:
            raise FileNotFoundError(path) from None
        except BaseError as exc:
            raise self._fail(exc, f"reading {path}") from None

    def copy_in(self, src: Path, path: str) -> None:
        self.requests.add("put")
        try:
            obs.put(
                self.store,
                store_path(path),
                src,
                use_multipart=src.stat().st_size > self.multipart_bytes,
                chunk_size=_PART_BYTES,
                max_concurrency=4,
            )
        except BaseError as exc:
            raise self._fail(exc, f"writing {path}") from None

    def copy_out(self, path: str, dest: Path) -> str:
        self.requests.add("get")
        try:
            got = obs.get(self.store, store_path(path))
            with dest.open("wb") as fh:
                for chunk in got.stream(min_chunk_size=8 << 20):
                    fh.write(chunk)
            return got.meta.get("e_tag") or ""
        except NotFoundError:
            raise FileNotFoundError(path) from None
        except BaseError as exc:
            raise self._fail(exc, f"reading {path}") from None

    def head(self, path: str) -> ObjectInfo | None:
        self.requests.add("head")
        try:
            meta = obs.head(self.store, store_path(path))
        except (NotFoundError, FileNotFoundError):  # obstore raises either for a 404
            return None
        except BaseError as exc:
            raise self._fail(exc, f"reading {path}") from None
        return ObjectInfo(path.rsplit("/", 1)[-1], int(meta["size"]), meta.get("e_tag"))

    # -- writing ---------------------------------------------------------------

    def put(
        self, path: str, data: bytes | bytearray, *, if_match: str | None = None, create: bool = False
    ) -> str | None:
        """PUT an object in one request; conditional on ``if_match`` or on absence (``create``).

        Returns the new ETag. A failed condition raises :class:`ConflictError`.
        """
        mode: Any = "overwrite"
        if create:
            mode = "create"
        elif if_match is not None:
            mode = {"e_tag": if_match}
        self.requests.add("put")
        try:
            result = obs.put(self.store, store_path(path), data, mode=mode, use_multipart=False)
        except (AlreadyExistsError, PreconditionError):
            raise ConflictError(f"{self._url}/{path}: conditional write lost") from None
        except BaseError as exc:
            raise self._fail(exc, f"writing {path}") from None
        return result.get("e_tag")

    def write_bytes(self, path: str, data: bytes, *, durable: bool = True) -> None:
        self.put(path, data)  # a PUT is durable whatever is asked

    def write_parquet(self, path: str, table: pa.Table | pa.RecordBatchReader, **options: object) -> int:
        """As :meth:`Backend.write_parquet`; ``written`` gets the bytes as sent (in memory, or
        the local file they were sent from) and the object's info, the version its PUT
        returned, before the bytes are let go; after a multipart upload only if a listing
        names the object by that version."""
        tag = options.pop("if_match", None)
        if_match = tag if isinstance(tag, str) else None
        create = bool(options.pop("create", False))
        hook = options.pop("written", None)
        written: _Written | None = hook if callable(hook) else None
        name = path.rsplit("/", 1)[-1]
        if isinstance(table, pa.Table):
            data = sealed_bytes(table, **options)
            etag = self._put_written(path, data, if_match=if_match, create=create)
            if written is not None:
                written(data, FileInfo(name, len(data), etag or ""))
            return len(data)
        # A stream may be larger than memory: spooled to a local file, then sent (unsynced:
        # the object store keeps what it acknowledged; the syncs were 3.5% of writing a cluster's new
        # partitions, profiled).
        spool = new_spool(self.local_folder(TMP_DIR))
        try:
            size = write_sealed(table, spool, options, sync=False)
            if size <= self.multipart_bytes:
                data = bytearray(spool.read_bytes())
                etag = self._put_written(path, data, if_match=if_match, create=create)
            else:
                etag = self._put_large(path, spool, size, if_match=if_match, create=create)
                # A multipart upload's ETag is of another form, which a listing may spell
                # otherwise (and the object may be another's by then): what it names is read.
                if written is not None and self.file_info(path, fresh=True).version != (etag or ""):
                    written = None
            if written is not None:
                written(spool, FileInfo(name, size, etag or ""))
            return size
        finally:
            with contextlib.suppress(FileNotFoundError):
                spool.unlink()

    def _put_written(self, path: str, data: bytearray, *, if_match: str | None, create: bool) -> str | None:
        etag = self.put(path, data, if_match=if_match, create=create)
        if self.on_written is not None:
            self.on_written(path, len(data), bytes(data[-self.tail_bytes :]), etag)
        return etag

    def _put_large(
        self, path: str, spool: Path, size: int, *, if_match: str | None, create: bool
    ) -> str | None:
        """Send a large object in parts (S3 takes at most 5 GB in one PUT); its ETag.

        S3 cannot make a multipart upload conditional here (obstore sends a
        condition only with a single PUT), so the condition is checked just
        before the upload instead; the compaction lease is what keeps two
        writers of one compacted file apart, the condition only a second guard
        (see docs/format.md, "Object stores").
        """
        if if_match is not None or create:
            current = self.head(path)
            now = None if current is None else current.etag
            if (create and current is not None) or (if_match is not None and now != if_match):
                raise ConflictError(f"{self._url}/{path}: conditional write lost")
        self.requests.add("put")
        try:
            result = obs.put(
                self.store,
                store_path(path),
                spool,
                use_multipart=True,
                chunk_size=_PART_BYTES,
                max_concurrency=4,
            )
        except BaseError as exc:
            raise self._fail(exc, f"writing {path}") from None
        etag = result.get("e_tag")
        if self.on_written is not None:
            with spool.open("rb") as fh:
                fh.seek(max(0, size - self.tail_bytes))
                tail = fh.read()
            self.on_written(path, size, tail, etag)
        return etag

    def delete(self, path: str) -> None:
        """``path``; with a trailing ``/``, an empty folder of a gateway that keeps them."""
        self.requests.add("delete")
        try:
            obs.delete(self.store, store_path(path) + ("/" if path.endswith("/") else ""))
        except NotFoundError:
            return
        except BaseError as exc:
            raise self._fail(exc, f"deleting {path}") from None

    def move(self, path: str, to: str) -> None:
        self.requests.add("copy")
        try:
            obs.copy(self.store, store_path(path), store_path(to), overwrite=True)
        except NotFoundError:
            raise FileNotFoundError(path) from None
        except BaseError as exc:
            raise self._fail(exc, f"copying {path} to {to}") from None
        self.delete(path)

    # -- the rest of the Backend protocol --------------------------------------

    def local_folder(self, name: str, *, create: bool = True) -> Path:
        """A local per-store folder (``$XDG_CACHE_HOME/web-index/<sha of url>/``) for a local buffer."""
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "web-index"
        # Keyed by the store URL alone: the same store through another endpoint
        # (a proxy, a second gateway of one cluster) shares the local buffer.
        key = hashlib.sha256(self._url.encode()).hexdigest()[:24]
        folder = base / key / name
        if create:
            folder.mkdir(parents=True, exist_ok=True)
        return folder

    def exists(self) -> bool:
        """Whether the bucket is there (a store under a prefix needs nothing more)."""
        self.list_objects("")
        return True

    def check_file(self, path: str) -> bool:
        obj = self.open_object(path)
        return check_whole(path, obj.read_at, obj.size())

    def remove_orphans(self) -> int:
        # Objects leave no temporaries behind (an interrupted multipart upload
        # is S3's to expire: a bucket lifecycle rule, docs/deploy.md); local
        # spools of dead writers are.
        return remove_dead_spools(self.local_folder(TMP_DIR, create=False))
