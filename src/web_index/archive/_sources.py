"""Where WARC files come from: local files and folders, ``s3://`` prefixes, or
the WARC members of local WACZ packages.

An object is copied to a local temporary file while it is read (the strict
reader seeks back to check gzip members) and removed after; messages name it
by its ``s3://`` URL. A WACZ package given by name is checked whole when it is
listed (:func:`check_package`), and its WARC members are read from the ZIP in
place, named ``<package>!<member>``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from web_index.archive._wacz_read import check_package, open_member
from web_index.archive._warc_read import WARC_SUFFIXES, warc_files
from web_index.storage import Backend, open_backend

__all__ = ["ArchiveFile", "archive_files", "wacz_files"]

WACZ_SUFFIX = ".wacz"


@dataclass(frozen=True)
class ArchiveFile:
    """One WARC or ARC file to read: ``name`` for messages, ``size`` in bytes."""

    name: str
    size: int
    path: Path | None = None  # a local file
    backend: Backend | None = None  # or an object of this backend
    key: str = ""
    member: str | None = None  # or the WARC of this name inside the WACZ package at ``path``

    @property
    def is_arc(self) -> bool:
        return self.member is None and self.name.endswith((".arc", ".arc.gz"))

    @contextmanager
    def open(self) -> Iterator[IO[bytes]]:
        """The file's bytes, a seekable stream, while the block runs."""
        if self.member is not None:
            assert self.path is not None
            with open_member(self.path, self.member) as stream:
                yield stream
            return
        with self.local() as path, path.open("rb") as fh:
            yield fh

    @contextmanager
    def local(self) -> Iterator[Path]:
        """A local path holding the file while the block runs (not for a WACZ member)."""
        assert self.member is None, "a WACZ member is read in place: open()"
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
    folders and ``s3://bucket/prefix`` searched (sorted), the WARC members of a
    local ``.wacz`` file (:func:`wacz_files`); a local file that does not exist
    is listed as it is (reading it then fails, naming it)."""
    found: list[ArchiveFile] = []
    for source in sources:
        text = os.fspath(source)
        if text.startswith(("s3://", "s3a://")):
            found += _objects(text)
        elif text.endswith(WACZ_SUFFIX) and Path(text).is_file():
            found += wacz_files(text)
        else:
            for path in warc_files([Path(text)]):
                found.append(ArchiveFile(str(path), path.stat().st_size if path.is_file() else 0, path=path))
    return found


def wacz_files(package: str | os.PathLike[str]) -> list[ArchiveFile]:
    """The WARC members of the local WACZ package ``package`` (whatever its
    name), in ZIP order, once the whole package has passed its checks; else
    :class:`~web_index.errors.WaczError`. An unreadable file raises ``OSError``."""
    path = Path(package)
    members = check_package(path)
    return [ArchiveFile(f"{path}!{member}", size, path=path, member=member) for member, size in members]


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
