from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from web_index.errors import InvalidRecordError

__all__ = ["InsertRequest", "iter_insert_requests"]


class InsertRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One line of an insertion JSONL file: the standard's insertion request.

    ``data`` bodies are base64 strings (JSON has no bytes).
    """

    type: str
    url: str
    timestamp: str
    metadata: dict[str, Any]
    data: list[dict[str, Any]] = []


_decoder = msgspec.json.Decoder(InsertRequest)


def iter_insert_requests(lines: Iterable[str | bytes], source: str = "<input>") -> Iterator[InsertRequest]:
    """Parse JSONL insertion requests; errors name the line and field.

    Blank lines are skipped.
    """
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            yield _decoder.decode(line)
        except msgspec.ValidationError as exc:
            raise InvalidRecordError(f"{source}:{number}", str(exc)) from None
        except msgspec.DecodeError as exc:
            raise InvalidRecordError(f"{source}:{number}", f"not valid JSON: {exc}") from None
