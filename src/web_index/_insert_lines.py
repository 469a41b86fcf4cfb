"""Insertion requests (the standard's JSONL lines) into the store a batch at a time: what
``web-index insert`` does, here so that a bulk load's workers do it too.

A batch is taken whole when all of its lines are valid; else its valid lines before the
first invalid one (all of them with ``skip_invalid``), each invalid one reported. A file
given to a bulk load with workers is read by them, a range of its lines each
(:func:`insert_on_workers`): each worker parses and checks its lines into a load of its own
that hands its spilled chunks over; this process's load absorbs them in the file's order
and commits once. Without ``skip_invalid`` the first invalid line stops the input (what came
before it is stored, no line after it), as when one process reads the file; so does a read of
the file that fails (the input's error, not the store's). One thing differs: requests get their
ids as a worker takes them, so two lines of one capture moment (the same URL and timestamp, which
the standard's keys then tell apart by request id) in different ranges rank by the order the
workers took them, not by the file's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from web_index._attempts import InsertItem
from web_index._bulk_load import BulkLoad
from web_index._on_cluster import worker_store
from web_index.errors import InvalidRecordError
from web_index.ingest import InsertRequest, Limits, iter_insert_lines, validate_attempt
from web_index.storage import Chunks

__all__ = ["Inserter", "Line", "RefusedLineError", "batches", "insert_on_workers"]

Line = tuple[int, InsertRequest | InvalidRecordError]
_RANGE_BYTES = 64 << 20  # of the file a worker reads at a time (its chunks: a spill file or two)
_MIN_RANGE_BYTES = 1 << 20  # a smaller range costs a worker's load more than its lines


class RefusedLineError(Exception):
    """An invalid line ended the input: the error, and the requests stored before it."""

    def __init__(self, error: str, stored: int) -> None:
        super().__init__(error, stored)
        self.error, self.stored = error, stored


class Inserter:
    """Stores batches of lines and reports their invalid ones, in line order."""

    def __init__(
        self,
        limits: Limits,
        add: Callable[[list[InsertItem]], object],
        name: str,
        skip_invalid: bool,
        on_skipped: Callable[[str], None],
    ) -> None:
        self.limits = limits
        self.add = add  # insert_many, or a bulk load's add: both take all of a batch or none of it
        self.name = name
        self.skip_invalid = skip_invalid
        self.on_skipped = on_skipped
        self.stored = 0
        self.skipped = 0

    def store(self, lines: list[Line]) -> None:
        """Store the valid requests of ``lines`` and report the invalid ones; without
        ``skip_invalid``, only those before the first invalid line, then :class:`RefusedLineError`."""
        requests = [r for _, r in lines if isinstance(r, InsertRequest)]
        if len(requests) == len(lines):
            try:
                self.add([r.item() for r in requests])
            except InvalidRecordError:
                pass  # which lines? validation alone, below, finds them
            else:
                self.stored += len(requests)
                return
        valid: list[InsertRequest] = []
        errors: list[InvalidRecordError] = []
        for number, result in lines:
            if isinstance(result, InvalidRecordError):
                error = result
            else:
                problem = self._problem(number, result)
                if problem is None:
                    valid.append(result)
                    continue
                error = problem
            errors.append(error)
            if not self.skip_invalid:
                break
        if valid:
            # add validates them again; they pass, as they just did.
            self.add([r.item() for r in valid])
            self.stored += len(valid)
        if errors and not self.skip_invalid:
            raise RefusedLineError(str(errors[0]), self.stored)
        for error in errors:
            self.on_skipped(str(error))
        self.skipped += len(errors)

    def _problem(self, number: int, request: InsertRequest) -> InvalidRecordError | None:
        try:
            validate_attempt(*request.item(), limits=self.limits)
        except InvalidRecordError as exc:
            return InvalidRecordError(f"{self.name}:{number}: {exc.field}", exc.problem)
        return None


def batches(
    lines: Iterable[Line], size: int, *, stop_at_error: bool, broken: type[BaseException] = OSError
) -> Iterator[list[Line]]:
    """Lines in batches of ``size`` (invalid ones included, in place); with
    ``stop_at_error`` the batch holding the first invalid line is the last one read.
    ``broken``: the error of an input that cannot be read on, raised after the batch read
    before it (stored all the same)."""
    pending: list[Line] = []
    try:
        for line in lines:
            pending.append(line)
            if stop_at_error and isinstance(line[1], InvalidRecordError):
                break
            if len(pending) >= size:
                yield pending
                pending = []
    except broken:
        if pending:
            yield pending
        raise
    if pending:
        yield pending


@dataclass
class _Range:
    """What a worker made of a range of the file's lines."""

    stored: int = 0
    bytes: int = 0  # of the file the range covers
    skipped: list[str] = field(default_factory=list)
    stopped: str | None = None  # the invalid line, or the read that failed, that ended the input
    chunks: Chunks | None = None
    error: BaseException | None = None


class _UnreadableError(Exception):
    """The input could not be read on (an I/O error of the file, not of the store)."""


def insert_on_workers(
    load: BulkLoad,
    location: str,
    buffer: str | None,
    path: str,
    name: str,
    *,
    limits: Limits,
    batch: int,
    skip_invalid: bool,
    on_skipped: Callable[[str], None],
    on_progress: Callable[[int, int], object],
) -> tuple[int, int]:
    """The requests of the JSONL file at ``path`` (named ``name`` in messages) into ``load``
    (a bulk load with workers, of the store at ``location``), a range of lines each; return
    how many were stored and skipped; ``on_progress``: told the requests stored and the
    file's bytes read so far. Raises :class:`RefusedLineError` as :class:`Inserter` does."""
    work = functools.partial(_insert_range, location, buffer, limits, path, name, batch, skip_invalid)
    stored = skipped = read = 0
    unreadable: str | None = None  # the file could not be cut into ranges past this one

    def ranges() -> Generator[tuple[int, int, int]]:
        nonlocal unreadable
        try:
            with open(path, "rb") as f:
                size = load.task_bytes(os.fstat(f.fileno()).st_size, _RANGE_BYTES, _MIN_RANGE_BYTES)
                yield from _ranges(f, size)
        except OSError as exc:
            unreadable = _unreadable(name, exc)  # said once the ranges before it are stored

    def take(done: _Range) -> BaseException | None:
        nonlocal stored, skipped, read
        for message in done.skipped:
            on_skipped(message)
        skipped += len(done.skipped)
        stored += done.stored
        read += done.bytes
        on_progress(stored, read)
        return None if done.stopped is None else RefusedLineError(done.stopped, stored)

    given = ranges()
    try:
        load.absorb_each(work, given, take)  # no line after an invalid one is read
    finally:
        given.close()  # the input closed now, not when the error raised here is dropped
    if unreadable is not None:
        raise RefusedLineError(unreadable, stored)
    return stored, skipped


def _ranges(f: BinaryIO, size: int) -> Iterator[tuple[int, int, int]]:
    """The lines of the file ``f`` in ranges of about ``size`` bytes, each ending at a
    line's end: its first byte, its end, and the number of its first line."""
    end = os.fstat(f.fileno()).st_size
    start, line = 0, 1
    while start < end:
        f.seek(min(end, start + size))
        f.readline()  # to the end of the line the cut falls in
        stop = max(f.tell(), min(end, start + size))
        yield start, stop, line
        line += _newlines(f, start, stop)
        start = stop


def _unreadable(name: str, exc: OSError) -> str:
    return f"cannot read {name}: {exc.strerror or exc}"


def _newlines(f: BinaryIO, start: int, stop: int) -> int:
    f.seek(start)
    count = 0
    while start < stop:
        block = f.read(min(16 << 20, stop - start))
        if not block:
            break
        count += block.count(b"\n")
        start += len(block)
    return count


def _range_lines(f: BinaryIO, size: int, name: str) -> Iterator[bytes]:
    """The next ``size`` bytes of ``f``, line by line (lines split on ``\\n`` only)."""
    while size > 0:
        try:
            line = f.readline(size)
        except OSError as exc:
            raise _UnreadableError(_unreadable(name, exc)) from None
        if not line:
            return
        size -= len(line)
        yield line


def _insert_range(
    location: str,
    buffer: str | None,
    limits: Limits,
    path: str,
    name: str,
    batch: int,
    skip_invalid: bool,
    where: tuple[int, int, int],
) -> _Range:
    """In a worker: a range of the file's lines into a load that hands its chunks over."""
    start, stop, first = where
    done = _Range(bytes=stop - start)
    try:
        store = worker_store(location, buffer, read_only=False)
        load = BulkLoad.handing_over(store, limits)
    except Exception as exc:  # said in order (see insert_on_workers)
        return _Range(error=exc)
    inserter = Inserter(limits, load.add, name, skip_invalid, done.skipped.append)
    try:
        try:
            f = open(path, "rb")  # noqa: SIM115  # closed below; its errors are the input's
            f.seek(start)
        except OSError as exc:
            raise _UnreadableError(_unreadable(name, exc)) from None
        with f:
            lines = iter_insert_lines(_range_lines(f, stop - start, name), name, first=first)
            for chunk in batches(lines, batch, stop_at_error=not skip_invalid, broken=_UnreadableError):
                inserter.store(chunk)
    except RefusedLineError as exc:
        done.stopped = exc.error
    except _UnreadableError as exc:  # what was read before it is stored, as by one process
        done.stopped = str(exc)
    except Exception as exc:
        load.hand_over().discard()
        return _Range(error=exc)
    done.stored = inserter.stored
    done.chunks = load.hand_over()
    return done
