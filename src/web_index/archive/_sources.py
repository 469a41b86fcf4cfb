"""Where WARC files come from: local files and folders, or ``s3://`` prefixes.

An object is copied to a local temporary file while it is read (the strict
reader seeks back to check gzip members) and removed after; messages name it
by its ``s3://`` URL.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from web_index.archive._warc_read import WARC_SUFFIXES, warc_files
from web_index.storage import Backend, open_backend

__all__ = ["ArchiveFile", "archive_files"]


@dataclass(frozen=True)
class ArchiveFile:
    """One WARC or ARC file to read: ``name`` for messages, ``size`` in bytes."""

    name: str
    size: int
    path: Path | None = None  # a local file
    backend: Backend | None = None  # or an object of this backend
    key: str = ""

    @property
    def is_arc(self) -> bool:
        return self.name.endswith((".arc", ".arc.gz"))

    @contextmanager
    def local(self) -> Iterator[Path]:
        """A local path holding the file while the block runs."""
        if self.path is not None:
            yield self.path
            return
        assert self.backend is not None
        handle, spool = tempfile.mkstemp(suffix="-" + self.name.rsplit("/", 1)[-1])
        os.close(handle)
        try:
            self.backend.copy_out(self.key, Path(spool))
            yield Path(spool)
        finally:
            Path(spool).unlink(missing_ok=True)


def archive_files(sources: Sequence[str | os.PathLike[str]]) -> list[ArchiveFile]:
    """The WARC and ARC files of ``sources``: local files as given, local
    folders and ``s3://bucket/prefix`` searched (sorted); a local file that
    does not exist is listed as it is (reading it then fails, naming it)."""
    found: list[ArchiveFile] = []
    for source in sources:
        text = os.fspath(source)
        if text.startswith(("s3://", "s3a://")):
            found += _objects(text)
        else:
            for path in warc_files([Path(text)]):
                found.append(ArchiveFile(str(path), path.stat().st_size if path.is_file() else 0, path=path))
    return found


def _objects(url: str) -> list[ArchiveFile]:
    if url.endswith(WARC_SUFFIXES):  # one object
        folder, name = url.rsplit("/", 1)
        backend = open_backend(folder)
        sizes = {f.name: f.size for f in backend.list_files("", name)}
        if name not in sizes:
            raise FileNotFoundError(url)
        return [ArchiveFile(url, sizes[name], backend=backend, key=name)]
    backend = open_backend(url)
    out: list[ArchiveFile] = []
    pending = [""]
    while pending:
        folder = pending.pop()
        prefix = f"{folder}/" if folder else ""
        for f in backend.list_files(folder):
            if f.name.endswith(WARC_SUFFIXES):
                out.append(
                    ArchiveFile(
                        f"{url.rstrip('/')}/{prefix}{f.name}", f.size, backend=backend, key=prefix + f.name
                    )
                )
        pending += [prefix + sub for sub in backend.list_folders(folder)]
    return sorted(out, key=lambda f: f.name)
