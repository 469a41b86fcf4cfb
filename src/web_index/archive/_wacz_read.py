"""WACZ packages: the checks a package passes before anything in it is stored,
and its WARC members as seekable streams read from the ZIP in place.

A package is checked whole before its first record is stored, so that a bad
one leaves the store as it was: the ZIP's directory (every name safe, no
member reaching past the end of the file), ``datapackage.json`` (and
``datapackage-digest.json`` against it), then every listed member read
against its ``bytes`` and ``hash``, and each WARC member's first bytes. Reads
are bounded by the sizes declared, so a member claiming 4 GiB in a small file,
or inflating past what it declared, fails its check without filling memory.
Nothing is ever extracted: a name is only compared, never joined to a path.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from web_index.archive._warc_read import HEAD_BYTES, head_problem
from web_index.errors import WaczError

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = ["check_package", "open_member"]

_DATAPACKAGE = "datapackage.json"
_DIGEST = "datapackage-digest.json"
_WARCS = "archive/"  # the folder of WARC files, per the WACZ spec
_MAX_JSON = 64 << 20  # a line per member: far past any real package, still readable at once
_CHUNK = 1 << 20
_PROFILES = (None, "data-package", "wacz-package", "wacz")  # 1.1.1's, older and 1.2.0's
_HASHES: dict[str, Callable[..., Any]] = {"sha256": hashlib.sha256, "md5": hashlib.md5}
_LOCAL_HEADER = struct.Struct("<4s22xHH")  # signature, then the lengths of name and extra field
# What a damaged or forged ZIP raises from zipfile besides BadZipFile (ValueError: a name not UTF-8, too).
_ZIP_ERRORS = (zipfile.BadZipFile, EOFError, zlib.error, ValueError, struct.error, OverflowError)


def check_package(path: Path) -> list[tuple[str, int]]:
    """The WARC members of the WACZ package ``path``, each as its name in the
    ZIP and its size, in ZIP order, once the whole package has passed its
    checks; else the first problem, as a :class:`WaczError`. An unreadable
    file raises ``OSError``."""
    name = str(path)
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        try:
            zf = zipfile.ZipFile(fh)
        except _ZIP_ERRORS as exc:
            raise WaczError(name, f"not a ZIP file, or cut short ({exc})") from None
        with zf:
            return _Checker(name, zf, size).check()


@contextmanager
def open_member(path: Path, member: str) -> Iterator[IO[bytes]]:
    """The bytes of ``member`` of the ZIP file ``path`` while the block runs:
    a stored member read in place (seeking costs nothing), a deflated one
    inflated as it is read (a seek back starts it over)."""
    with path.open("rb") as fh, zipfile.ZipFile(fh) as zf:
        info = zf.getinfo(member)
        if info.compress_type != zipfile.ZIP_STORED:
            with zf.open(info) as stream:
                yield stream
            return
        fh.seek(info.header_offset)
        magic, name_len, extra_len = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
        if magic != b"PK\x03\x04":
            raise WaczError(str(path), "no local header where the ZIP's directory puts it", member)
        start = info.header_offset + _LOCAL_HEADER.size + name_len + extra_len
        with io.BufferedReader(_Window(fh.fileno(), start, info.file_size), _CHUNK) as stream:
            yield stream


class _Window(io.RawIOBase):
    """A span of an open file read with pread: a stored member's bytes, with
    no CRC to compute (its hash was checked already) and seeks for free."""

    def __init__(self, fd: int, start: int, size: int) -> None:
        super().__init__()
        self._fd, self._start, self._size, self._pos = fd, start, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._size - self._pos)
        if n <= 0:
            return 0
        got = os.preadv(self._fd, [view[:n]], self._start + self._pos)
        self._pos += got
        return got


def _unsafe(member: str) -> bool:
    """A name no reader should follow: absolute, a drive letter, a ``..`` or
    empty segment, a backslash or a control character (names only ever use
    ``/``)."""
    parts = member.rstrip("/").split("/")
    return (
        member.startswith("/")
        or (len(member) > 1 and member[1] == ":")
        or "\\" in member
        or any(ord(c) < 32 or ord(c) == 127 for c in member)
        or any(p in ("", ".", "..") for p in parts)
    )


class _Checker:
    def __init__(self, name: str, zf: zipfile.ZipFile, size: int) -> None:
        self.name, self.zf, self.size = name, zf, size
        self.members: dict[str, zipfile.ZipInfo] = {}

    def fail(self, problem: str, member: str | None = None) -> WaczError:
        return WaczError(self.name, problem, member)

    def check(self) -> list[tuple[str, int]]:
        for info in self.zf.infolist():
            self._entry(info)
        package = self._datapackage()
        resources = self._resources(package)
        for member in self.members:
            if member.startswith(_WARCS) and not member.endswith("/") and member not in resources:
                raise self.fail("not listed in datapackage.json, so its hash cannot be checked", member)
        warcs = []
        for member, (algorithm, digest, declared) in resources.items():
            head = self._hashed(member, algorithm, digest, declared)
            if member.startswith(_WARCS):
                if (wrong := head_problem(head, member, "WARC")) is not None:
                    raise self.fail(wrong.problem, member)
                warcs.append(member)
        order = {m: i for i, m in enumerate(self.members)}
        return [(m, self.members[m].file_size) for m in sorted(warcs, key=order.__getitem__)]

    def _entry(self, info: zipfile.ZipInfo) -> None:
        member = info.filename
        if _unsafe(member):
            # repr: the name may hold a line break, and the message is one line.
            raise self.fail(
                f"unsafe member name {member!r} (absolute, a drive letter, a .. or empty segment,"
                " a backslash or a control character): nothing is read from this package"
            )
        if member in self.members:
            raise self.fail("twice in the ZIP's directory", member)
        if info.flag_bits & 0x1:
            raise self.fail("encrypted: it cannot be read", member)
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            method = info.compress_type
            raise self.fail(f"compression method {method}: only stored and deflated are read", member)
        if info.header_offset + _LOCAL_HEADER.size + info.compress_size > self.size:
            raise self.fail(
                f"the ZIP's directory says {info.compress_size} bytes from offset {info.header_offset},"
                f" past the end of the file ({self.size} bytes): a damaged or forged ZIP",
                member,
            )
        self.members[member] = info

    def _read_json(self, member: str) -> tuple[bytes, Any]:
        info = self.members[member]
        if info.file_size > _MAX_JSON:
            raise self.fail(f"{info.file_size} bytes: more than the {_MAX_JSON >> 20} MiB read", member)
        try:
            with self.zf.open(info) as fh:
                data = fh.read(_MAX_JSON + 1)
        except _ZIP_ERRORS as exc:
            raise self.fail(f"cannot be read: {exc}", member) from None
        try:
            return data, json.loads(data)
        except ValueError as exc:  # UnicodeDecodeError too
            raise self.fail(f"not JSON: {exc}", member) from None

    def _datapackage(self) -> dict[str, Any]:
        if _DATAPACKAGE not in self.members:
            raise self.fail(f"no {_DATAPACKAGE}: not a WACZ package")
        data, package = self._read_json(_DATAPACKAGE)
        if not isinstance(package, dict):
            raise self.fail("not a JSON object", _DATAPACKAGE)
        if package.get("profile") not in _PROFILES:
            raise self.fail(f"profile {package.get('profile')!r}: not a WACZ package", _DATAPACKAGE)
        if _DIGEST in self.members:
            _, digest = self._read_json(_DIGEST)
            given = digest.get("hash") if isinstance(digest, dict) else None
            if not isinstance(given, str):
                raise self.fail("no hash", _DIGEST)
            if not self._matches(given, data, _DIGEST):
                raise self.fail(f"the hash of {_DATAPACKAGE} is not the one it gives", _DIGEST)
        return package

    def _matches(self, given: str, data: bytes, member: str) -> bool:
        algorithm, _, hex_digest = given.partition(":")
        if algorithm not in _HASHES:
            raise self.fail(f"hash {given[:80]!r}: only sha256: and md5: are checked", member)
        return bool(_HASHES[algorithm](data).hexdigest() == hex_digest.lower())

    def _resources(self, package: dict[str, Any]) -> dict[str, tuple[str, str, int]]:
        """Each listed member's hash algorithm, hex digest and size, by name."""
        listed = package.get("resources")
        if not isinstance(listed, list):
            raise self.fail("no resources list", _DATAPACKAGE)
        out: dict[str, tuple[str, str, int]] = {}
        for i, item in enumerate(listed):
            where = f"{_DATAPACKAGE} resources[{i}]"
            member = item.get("path") if isinstance(item, dict) else None
            if not isinstance(member, str):
                raise self.fail(f"{where}: no path")
            if _unsafe(member):
                raise self.fail(f"{where}: unsafe path {member!r}")
            if member not in self.members:
                raise self.fail(f"listed in {_DATAPACKAGE}, missing from the ZIP", member)
            given, declared = item.get("hash"), item.get("bytes")
            if not isinstance(given, str) or given.partition(":")[0] not in _HASHES:
                raise self.fail(f"{where}: hash {given!r}: only sha256: and md5: are checked", member)
            if not isinstance(declared, int) or isinstance(declared, bool) or declared < 0:
                raise self.fail(f"{where}: bytes {declared!r}: not a size", member)
            if member in out:
                raise self.fail(f"listed twice in {_DATAPACKAGE}", member)
            if self.members[member].file_size != declared:
                raise self.fail(
                    f"{_DATAPACKAGE} says {declared} bytes, the ZIP's directory"
                    f" {self.members[member].file_size}",
                    member,
                )
            algorithm, _, hex_digest = given.partition(":")
            out[member] = (algorithm, hex_digest.lower(), declared)
        return out

    def _hashed(self, member: str, algorithm: str, digest: str, declared: int) -> bytes:
        """Check a member's bytes against its size and hash; its first bytes."""
        hasher = _HASHES[algorithm]()
        head = b""
        seen = 0
        try:
            with self.zf.open(self.members[member]) as fh:
                while seen <= declared:  # one byte past the declared size is enough to tell
                    chunk = fh.read(min(_CHUNK, declared + 1 - seen))
                    if not chunk:
                        break
                    if len(head) < HEAD_BYTES:
                        head += chunk[: HEAD_BYTES - len(head)]
                    hasher.update(chunk)
                    seen += len(chunk)
        except _ZIP_ERRORS as exc:
            raise self.fail(f"cannot be read: {exc}", member) from None
        if seen != declared:
            raise self.fail(f"{seen} bytes, {_DATAPACKAGE} says {declared}", member)
        if hasher.hexdigest() != digest:
            raise self.fail(f"its {algorithm} hash is not the one {_DATAPACKAGE} gives", member)
        return head
