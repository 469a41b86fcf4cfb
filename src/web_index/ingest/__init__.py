"""Turning insertion requests into validated rows, and reading them from JSONL."""

from web_index.ingest._jsonl import InsertRequest, iter_insert_lines, iter_insert_requests
from web_index.ingest._validate import Limits, new_request_id, validate_attempt

__all__ = [
    "InsertRequest",
    "Limits",
    "iter_insert_lines",
    "iter_insert_requests",
    "new_request_id",
    "validate_attempt",
]
