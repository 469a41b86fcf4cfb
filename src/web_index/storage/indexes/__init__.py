"""Where a record is found: the month key index (one file per type and month,
sorted by key hash: ``_month`` opens and looks up, ``_month_format`` is its file,
``_month_build`` builds it, from the files or from the rows a bulk load made of them as it
wrote them, ``_month_rows``; ``_month_verify`` checks it against the files) and the
capture indexes (SURT-sorted CDXJ beside each compacted ``get``/``head`` file: its
lines in ``_capture_lines``, a response loaded from its line and its body's place
in ``_capture_records``, opened and bisected in ``_captures``, written in
``_captures_build``, checked in ``_captures_verify``, read by SURT prefix with the
parts and the buffer in ``_capture_scan``). Nothing here is public (``__all__`` is
empty): the names imported ``as`` themselves are the internal API of the rest of
storage. ``build_month_index`` (``build_month_indexes_apart``: in a process of their own),
``index_disagreement`` and ``index_note`` are imported on first use: they need
polars, which a store opened to be read never does (27 MiB and ~120 ms of import).
"""

import importlib
from typing import TYPE_CHECKING, Any

from web_index.storage.indexes._capture_lines import CaptureFields as CaptureFields
from web_index.storage.indexes._capture_lines import StoredCapture as StoredCapture
from web_index.storage.indexes._capture_lines import capture_mime as capture_mime
from web_index.storage.indexes._capture_lines import parse_capture_line as parse_capture_line
from web_index.storage.indexes._capture_lines import response_capture_line as response_capture_line
from web_index.storage.indexes._capture_records import bodies_by_place as bodies_by_place
from web_index.storage.indexes._capture_records import capture_response as capture_response
from web_index.storage.indexes._capture_records import row_captures as row_captures
from web_index.storage.indexes._capture_records import stored_response as stored_response
from web_index.storage.indexes._capture_scan import find_capture_lines as find_capture_lines
from web_index.storage.indexes._captures import CaptureIndexes as CaptureIndexes
from web_index.storage.indexes._captures import capture_index_bytes as capture_index_bytes
from web_index.storage.indexes._captures import capture_index_path as capture_index_path
from web_index.storage.indexes._captures_build import build_capture_index as build_capture_index
from web_index.storage.indexes._captures_build import ensure_capture_indexes as ensure_capture_indexes
from web_index.storage.indexes._captures_build import file_lines as file_lines
from web_index.storage.indexes._captures_build import holders_moved as holders_moved
from web_index.storage.indexes._captures_build import index_on_write as index_on_write
from web_index.storage.indexes._captures_build import mark_checking as mark_checking
from web_index.storage.indexes._captures_build import measured as measured
from web_index.storage.indexes._captures_build import refresh_held_places as refresh_held_places
from web_index.storage.indexes._captures_build import table_lines as table_lines
from web_index.storage.indexes._captures_build import written_lines as written_lines
from web_index.storage.indexes._captures_verify import capture_index_findings as capture_index_findings
from web_index.storage.indexes._month import IndexHit as IndexHit
from web_index.storage.indexes._month import MonthIndex as MonthIndex
from web_index.storage.indexes._month_format import index_path as index_path
from web_index.storage.indexes._month_format import key_hash as key_hash
from web_index.storage.indexes._month_format import rid_text as rid_text
from web_index.storage.indexes._month_open import open_month_index as open_month_index
from web_index.storage.indexes._month_rows import FileRows as FileRows
from web_index.storage.indexes._month_rows import MonthRows as MonthRows
from web_index.storage.indexes._month_rows import MonthRowsSpool as MonthRowsSpool
from web_index.storage.indexes._month_rows import file_rows as file_rows

if TYPE_CHECKING:
    from web_index.storage.indexes._month_build import build_month_index as build_month_index
    from web_index.storage.indexes._month_build import build_month_indexes_apart as build_month_indexes_apart
    from web_index.storage.indexes._month_verify import index_disagreement as index_disagreement
    from web_index.storage.indexes._month_verify import index_note as index_note

__all__: list[str] = []

_ON_FIRST_USE = {
    "build_month_index": "web_index.storage.indexes._month_build",
    "build_month_indexes_apart": "web_index.storage.indexes._month_build",
    "index_disagreement": "web_index.storage.indexes._month_verify",
    "index_note": "web_index.storage.indexes._month_verify",
}


def __getattr__(name: str) -> Any:
    if name not in _ON_FIRST_USE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_ON_FIRST_USE[name]), name)
