"""Turning insertion requests into validated rows, and reading them from JSONL.

``__all__`` is the public API; names imported ``as`` themselves are the
internal one, for the other packages of web_index (never from a private module).
"""

from web_index.ingest._jsonl import InsertRequest, iter_insert_lines, iter_insert_requests
from web_index.ingest._validate import Limits, new_request_id, validate_attempt
from web_index.ingest._validate import new_request_ids as new_request_ids

__all__ = [
    "InsertRequest",
    "Limits",
    "iter_insert_lines",
    "iter_insert_requests",
    "new_request_id",
    "validate_attempt",
]
