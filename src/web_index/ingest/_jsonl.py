from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from web_index.errors import InvalidRecordError

__all__ = ["InsertRequest", "iter_insert_lines", "iter_insert_requests"]


class InsertRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One line of an insertion JSONL file: the standard's insertion request.

    ``data`` bodies are base64 strings (JSON has no bytes).
    """

    type: str
    url: str
    timestamp: str
    metadata: dict[str, Any]
    data: list[dict[str, Any]] = []

    def item(self) -> tuple[str, str, str, dict[str, Any], list[dict[str, Any]]]:
        """The arguments of ``WebIndex.insert`` / one item of ``insert_many``."""
        return (self.type, self.url, self.timestamp, self.metadata, self.data)


_decoder = msgspec.json.Decoder(InsertRequest)
# msgspec's "... - at `$.metadata.url`" and "Object missing required field `url`".
_AT = re.compile(r"^(?P<problem>.*) - at `\$\.?(?P<field>[^`]*)`$")
_MISSING = re.compile(
    r"^Object missing required field `(?P<field>[^`]*)`(?: - at `\$\.?(?P<parent>[^`]*)`)?$"
)


def _decode_error(where: str, exc: msgspec.ValidationError) -> InvalidRecordError:
    # Name the field the way validation does ("metadata.url"), not as a JSON path.
    message = str(exc)
    missing = _MISSING.match(message)
    if missing is not None:
        parent = missing.group("parent")
        field = f"{parent}.{missing.group('field')}" if parent else missing.group("field")
        return InvalidRecordError(f"{where}: {field}", "required field missing")
    at = _AT.match(message)
    if at is not None and at.group("field"):
        return InvalidRecordError(f"{where}: {at.group('field')}", at.group("problem"))
    return InvalidRecordError(where, message)


def _utf8_problem(line: str | bytes, exc: UnicodeDecodeError) -> str:
    # msgspec's error counts from the start of the string value it was reading;
    # decoding the line again finds the byte's place in the line.
    try:
        if isinstance(line, bytes | bytearray | memoryview):
            bytes(line).decode()
    except UnicodeDecodeError as again:
        return f"{again.reason} at byte {again.start}"
    return exc.reason


def iter_insert_lines(
    lines: Iterable[str | bytes], source: str = "<input>", *, first: int = 1
) -> Iterator[tuple[int, InsertRequest | InvalidRecordError]]:
    """Parse JSONL insertion requests, one result per non-blank line: its line
    number and the request, or the error that refuses it (named ``source:line``
    and, where there is one, the field). Never stops early: the caller decides
    whether an invalid line ends the input.

    Line numbers count blank lines too (the number an editor shows); lines are
    split on ``\\n`` only, so give bytes (a file opened ``"rb"``): a text file
    object would also split on a lone ``\\r`` and fail outright on a byte that
    is not UTF-8. ``first``: the number of the first line given (a range of a file's).
    """
    for number, line in enumerate(lines, start=first):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            yield number, _decoder.decode(line)
        except msgspec.ValidationError as exc:
            yield number, _decode_error(where, exc)
        except msgspec.DecodeError as exc:
            yield number, InvalidRecordError(where, f"not valid JSON: {exc}")
        except UnicodeDecodeError as exc:
            yield number, InvalidRecordError(where, f"not valid UTF-8: {_utf8_problem(line, exc)}")
        except RecursionError:
            yield number, InvalidRecordError(where, "not valid JSON: nested too deeply")


def iter_insert_requests(lines: Iterable[str | bytes], source: str = "<input>") -> Iterator[InsertRequest]:
    """Parse JSONL insertion requests; errors name the line and field.

    Blank lines are skipped. Raises :class:`InvalidRecordError` at the first
    invalid line (:func:`iter_insert_lines` goes on past it).
    """
    for _number, result in iter_insert_lines(lines, source):
        if isinstance(result, InvalidRecordError):
            raise result
        yield result
