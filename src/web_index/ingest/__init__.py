"""Turning insertion requests into validated rows, and reading them from JSONL."""

from web_index.ingest._jsonl import InsertRequest, iter_insert_lines, iter_insert_requests
from web_index.ingest._validate import Limits, new_request_id, validate_attempt

# The internal API: what other packages of web_index use (not public, not in __all__).
from web_index.ingest._validate import new_request_ids as new_request_ids

__all__ = [
    "InsertRequest",
    "Limits",
    "iter_insert_lines",
    "iter_insert_requests",
    "new_request_id",
    "validate_attempt",
]
