"""A WACZ package's ZIP, written member by member in bounded memory.

Members are streamed (``ZipFile.open(…, "w")``), one open at a time, each
hashed (SHA-256) and counted as it is written, for ``datapackage.json``.
The WARC files and the ZipNum index are STORED, so that a reader can take a
record out of the package by a range request. ZIP64 is left to zipfile,
which uses it only once an offset passes 4 GiB: ``force_zip64`` on a small
member gives its local header an extra field the central directory lacks, and
ReplayWeb.page then reads every record of that member 20 bytes early.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import IO

__all__ = ["Resource", "ZipOut"]

WACZ_VERSION = "1.1.1"  # what py-wacz and ReplayWeb.page read; 1.2.0's "profile": "wacz" fails both


@dataclass(frozen=True)
class Resource:
    """A member as ``datapackage.json`` lists it."""

    path: str
    hash: str
    bytes: int

    @property
    def name(self) -> str:
        # Frictionless takes names of [-a-z0-9._/] only.
        return re.sub(r"[^-a-z0-9._]", "-", self.path.rsplit("/", 1)[-1].lower())


class ZipOut:
    """The package's ZIP over ``sink`` (a file or any writable binary stream)."""

    def __init__(self, sink: IO[bytes], created: datetime) -> None:
        self.zip = zipfile.ZipFile(sink, "w", allowZip64=True)
        self.created = created
        self.resources: list[Resource] = []
        self._member: IO[bytes] | None = None
        self._path = ""
        self._hash = hashlib.sha256()
        self._size = 0

    def _info(self, path: str, stored: bool) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(path, self.created.timetuple()[:6])
        info.compress_type = zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED
        return info

    def open(self, path: str, *, stored: bool) -> None:
        """Start the member ``path`` (ending the one open)."""
        self.end()
        self._member = self.zip.open(self._info(path, stored), "w")
        self._path, self._hash, self._size = path, hashlib.sha256(), 0

    def write(self, data: bytes) -> None:
        assert self._member is not None
        self._member.write(data)
        self._hash.update(data)
        self._size += len(data)

    def end(self) -> None:
        """End the open member, if any, and list it."""
        if self._member is not None:
            self._member.close()
            self._member = None
            self.resources.append(Resource(self._path, f"sha256:{self._hash.hexdigest()}", self._size))

    def add(self, path: str, chunks: Iterable[bytes], *, stored: bool = False) -> None:
        """The member ``path``, whole, from ``chunks``."""
        self.open(path, stored=stored)
        for chunk in chunks:
            self.write(chunk)
        self.end()

    def finish(self, package: dict[str, object]) -> bytes:
        """Write ``datapackage.json`` (``package`` with ``resources``) and its digest
        file, and close the ZIP. Returns the datapackage.json written."""
        self.end()
        resources = [
            {"name": r.name, "path": r.path, "hash": r.hash, "bytes": r.bytes} for r in self.resources
        ]
        # Serialized once: the digest file hashes exactly the bytes written.
        text = json.dumps({**package, "resources": resources}, indent=2).encode()
        self.zip.writestr(self._info("datapackage.json", stored=False), text)
        digest = {"path": "datapackage.json", "hash": f"sha256:{hashlib.sha256(text).hexdigest()}"}
        self.zip.writestr(self._info("datapackage-digest.json", stored=False), json.dumps(digest, indent=2))
        self.zip.close()
        return text

    def abandon(self) -> None:
        """Close what is open after a failure (the package is then not whole)."""
        if self._member is not None:
            self._member.close()
            self._member = None
        self.zip.close()
