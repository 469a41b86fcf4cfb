"""Writing capture indexes: compaction's work, apart from the lookup (``_capture_index``).

An index is made from its compacted file alone, read a row group at a time
without bodies (a file written before payload digests were stored has them
computed from its bodies, as ``conform`` does). Its lines are sorted in memory:
about 300 bytes a capture, 300 MB for a partition of a million.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

import pyarrow.parquet as pq

from web_index.models import RecordType
from web_index.storage._capture_index import (
    CAPTURES_DIR,
    capture_index_path,
    index_domain,
    index_names,
    write_capture_index,
)
from web_index.storage._capture_lines import file_capture_lines
from web_index.storage._files import list_partition_files, read_superseded
from web_index.storage._layout import Partition, StoredFile
from web_index.storage.backends import Backend, handle_version

__all__ = ["build_capture_index", "ensure_capture_indexes", "file_lines"]

log = logging.getLogger("web_index.storage")


def build_capture_index(
    backend: Backend, partition: Partition, files: Iterable[StoredFile], *, prune: bool
) -> bool:
    """Write the capture index of the partition's compacted file (``files`` as
    listed) unless it has one; return whether written. ``prune``: see
    :func:`write_capture_index`. A failure is logged, never raised: the
    compaction it follows has committed, and the index is derived data."""
    try:
        return _build(backend, partition, files, prune)
    except Exception as exc:  # a full disk, a damaged file: read without an index meanwhile
        log.warning("no capture index for %s: %s (compact() tries again)", partition, exc)
        return False


def _build(backend: Backend, partition: Partition, files: Iterable[StoredFile], prune: bool) -> bool:
    covered = next((f for f in files if f.part is None), None)
    if covered is None:
        return False
    path = capture_index_path(partition, covered)
    if path.rsplit("/", 1)[-1] in index_names(backend, path.rsplit("/", 1)[0], partition.domain):
        return False
    name = covered.path.rsplit("/", 1)[-1]
    try:
        handle = backend.open_parquet(covered.path)
    except FileNotFoundError:  # compacted again meanwhile: that compaction writes its own
        return False
    if handle_version(handle) not in (None, covered.version):
        return False
    superseded = read_superseded(handle, covered.path)
    lines = file_lines(partition.type, handle)
    # The file read must be the one listed (a local handle has no version to
    # ask): an index named for one version never describes another.
    now = backend.list_files(partition.folder, f"{partition.domain}.")
    if not any((i.name, i.size, i.version) == (name, covered.size, covered.version) for i in now):
        return False
    write_capture_index(backend, partition, covered, superseded, lines, prune=prune)
    return True


def file_lines(type: RecordType, handle: pq.ParquetFile) -> list[bytes]:
    """A store file's capture lines as its index holds them: sorted, each once."""
    lines = sorted(line for group in file_capture_lines(type, handle) for line in group)
    return [line for n, line in enumerate(lines) if n == 0 or line != lines[n - 1]]


def ensure_capture_indexes(
    backend: Backend, type: RecordType, year: int, month: int, listing: Mapping[str, list[StoredFile]]
) -> int:
    """Write the capture index of every compacted file of a month (``listing``,
    by domain) that has none: stores compacted before indexes were written, a
    compaction killed before its index. Remove the indexes of files rewritten
    since (left by a compaction whose own index failed). Return how many were
    written."""
    folder = f"{CAPTURES_DIR}/{type.value}/{year:04d}/{month:02d}"
    have = index_names(backend, folder)
    written = 0
    for domain, files in sorted(listing.items()):
        partition = Partition(type, year, month, domain)
        covered = next((f for f in files if f.part is None), None)
        if covered is not None and capture_index_path(partition, covered).rsplit("/", 1)[-1] not in have:
            written += build_capture_index(backend, partition, files, prune=False)
    by_domain: dict[str, list[str]] = {}
    for name in have:
        by_domain.setdefault(index_domain(name), []).append(name)
    for domain, names in by_domain.items():
        partition = Partition(type, year, month, domain)
        files = listing.get(domain, [])
        wanted = {capture_index_path(partition, f).rsplit("/", 1)[-1] for f in files if f.part is None}
        if set(names) - wanted:
            _prune(backend, partition, folder)
    return written


def _prune(backend: Backend, partition: Partition, folder: str) -> None:
    """Remove the partition's indexes of files it no longer has, from a listing
    taken now (a compaction that commits in between loses its new index: a
    slower query until the next ``compact()``, never a wrong answer)."""
    p = partition
    files = list_partition_files(backend, p.folder, p.type, p.year, p.month, p.domain).get(p.domain, [])
    current = {capture_index_path(p, f).rsplit("/", 1)[-1] for f in files if f.part is None}
    for name in index_names(backend, folder, p.domain):
        if name not in current:
            backend.delete(f"{folder}/{name}")
