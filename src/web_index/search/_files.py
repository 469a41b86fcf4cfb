"""Writing a file so that its name never shows a half-written file.

Packs and their compressed copies are published and fetched by other
processes: a crash mid-write must leave either the old file or none, never a
torn one. So every output is written under a hidden temporary name in the
same folder (same filesystem, so the rename is atomic), fsynced, renamed
over the destination, and the folder fsynced so the rename survives a crash.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_output", "fsync_file", "publish", "sibling"]


def sibling(path: Path, suffix: str) -> Path:
    """A fresh hidden name next to ``path``; ``suffix`` says what it is for."""
    return path.with_name(f".{path.name}.{secrets.token_hex(6)}.{suffix}")


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    if os.name != "posix":
        return  # Windows cannot open a folder as a file; its renames are durable
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: Path, dst: Path) -> None:
    """Rename the finished, fsynced file ``tmp`` over ``dst``, durably."""
    tmp.replace(dst)
    _fsync_dir(dst.parent)


@contextmanager
def atomic_output(dst: Path) -> Iterator[BinaryIO]:
    """A binary file to write ``dst``'s new content to; on a clean exit it
    becomes ``dst``, on an error it is removed and ``dst`` is untouched."""
    tmp = sibling(dst, "tmp")
    try:
        with tmp.open("xb") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        publish(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)  # gone already after a successful publish
