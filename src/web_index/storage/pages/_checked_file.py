"""A store file opened for pyarrow to read, its pages checked against their
CRCs as they are read and its errors naming it (``_checksum`` has the checks
that need no pyarrow). A subclass of pyarrow's ``ParquetFile``, so this module
imports pyarrow: it is imported when a store file is first opened (the
backends' ``open_parquet``), never by looking a capture up through its place.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from web_index.errors import CorruptFileError, StoreError

__all__ = ["CheckedFile"]


class CheckedFile(pq.ParquetFile):
    """A store file whose pages are checked against their CRCs as they are read,
    and whose reading errors name the file (:class:`CorruptFileError`).

    A file that went away (``FileNotFoundError``) is not damage: a reader lists
    again; it passes through, as do the store's own errors.
    """

    def __init__(self, source: Any, *, path: str, **options: Any) -> None:
        self.store_path = path
        # Kept for positioned reads of single pages (``_reader``): the very
        # version whose footer was checked (the same descriptor or mapping on a
        # local disk, the same ETag on S3), never the name opened again.
        self.source: pa.NativeFile | None = source if isinstance(source, pa.NativeFile) else None
        with _named(path):
            super().__init__(source, page_checksum_verification=True, **options)

    def read(self, *args: Any, **kwargs: Any) -> pa.Table:
        with _named(self.store_path):
            return super().read(*args, **kwargs)

    def read_at(self, offset: int, length: int) -> bytes:
        """``length`` bytes of the file from ``offset`` (fewer at its end)."""
        if self.source is None:
            raise OSError("no positioned reads: opened from a path")
        with _named(self.store_path):
            return bytes(self.source.read_at(length, offset))  # type: ignore[call-arg]  # the stub lacks its arguments

    def read_row_group(self, *args: Any, **kwargs: Any) -> pa.Table:
        with _named(self.store_path):
            return super().read_row_group(*args, **kwargs)

    def read_row_groups(self, *args: Any, **kwargs: Any) -> pa.Table:
        with _named(self.store_path):
            return super().read_row_groups(*args, **kwargs)

    def iter_batches(self, *args: Any, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        with _named(self.store_path):
            yield from super().iter_batches(*args, **kwargs)


@contextlib.contextmanager
def _named(path: str) -> Iterator[None]:
    try:
        yield
    except (FileNotFoundError, StoreError):
        raise
    except (pa.ArrowException, OSError) as exc:
        raise CorruptFileError(path, f"unreadable ({type(exc).__name__}: {exc})") from None
