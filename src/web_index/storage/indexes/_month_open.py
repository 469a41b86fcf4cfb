"""Month indexes opened once per process: a footer (or keys file) parsed once, the index
reopened when its file's size or version changes (a rebuilt index is a new file under the same
name, and can be as long as the one it replaces), and let go when a build replaces it."""

from __future__ import annotations

import logging
import threading

from web_index.errors import CorruptFileError
from web_index.models import RecordType
from web_index.storage.backends import Backend
from web_index.storage.indexes._month import MonthIndex
from web_index.storage.indexes._month_format import STAMP_KEY, covers_from, index_path, read_covers
from web_index.storage.indexes._month_keys import keys_path, open_keys

__all__ = ["forget_month_index", "open_month_index"]

log = logging.getLogger("web_index.storage")

_OPEN: dict[tuple[str, str], MonthIndex] = {}  # by (store URL, index path)
_OPEN_LOCK = threading.Lock()


def open_month_index(backend: Backend, type: RecordType, year: int, month: int) -> MonthIndex | None:
    """The month's index, or ``None`` if there is none (or it is unreadable)."""
    path = index_path(type, year, month)
    folder, name = path.rsplit("/", 1)
    listed = {i.name: i for i in backend.list_files(folder, f"{month:02d}.")}
    info = listed.get(name)
    key = (backend.url, path)
    if info is None:
        with _OPEN_LOCK:
            _forget(_OPEN.pop(key, None))
        return None
    with _OPEN_LOCK:
        cached = _OPEN.get(key)
    if cached is not None and cached.file == (info.size, info.version):
        return cached
    file = (info.size, info.version)
    opened = None
    if keys_path(type, year, month).rsplit("/", 1)[1] in listed:
        opened = _from_keys(backend, type, year, month, file)
    if opened is None:
        opened = _from_parquet(backend, type, year, month, file)
    if opened is None:
        return None
    with _OPEN_LOCK:
        _forget(_OPEN.get(key))
        _OPEN[key] = opened
    return opened


def forget_month_index(backend: Backend, type: RecordType, year: int, month: int) -> None:
    """Drop this process's opened copy of the month's index (its files mapped, its table
    if kept): what is about to replace it need not be held beside it."""
    with _OPEN_LOCK:
        _forget(_OPEN.pop((backend.url, index_path(type, year, month)), None))


def _from_keys(
    backend: Backend, type: RecordType, year: int, month: int, file: tuple[int, str]
) -> MonthIndex | None:
    """The index opened from its keys file alone, if that file is whole and names this version of it."""
    try:
        keys = open_keys(backend, type, year, month)
        if keys is None or tuple(keys.index) != file:
            return None
        covers = covers_from(keys.covers)
    except CorruptFileError as exc:
        log.warning("%s: %s; reading %s instead", exc.path, exc.problem, index_path(type, year, month))
        return None
    path = index_path(type, year, month)
    return MonthIndex(type, year, month, lambda: backend.open_parquet(path), covers, file, keys.stamp, keys)


def _from_parquet(
    backend: Backend, type: RecordType, year: int, month: int, file: tuple[int, str]
) -> MonthIndex | None:
    import pyarrow as pa

    path = index_path(type, year, month)
    try:
        handle = backend.open_parquet(path)
        covers = read_covers(handle)
    except FileNotFoundError:
        return None
    except (pa.ArrowException, OSError, CorruptFileError):
        return None  # a damaged index only costs speed: read the partitions instead
    raw_stamp = (handle.metadata.metadata or {}).get(STAMP_KEY)
    stamp = raw_stamp.decode(errors="replace") if raw_stamp else None
    return MonthIndex(type, year, month, lambda: handle, covers, file, stamp)


def _forget(index: MonthIndex | None) -> None:
    if index is not None:
        index.forget()
