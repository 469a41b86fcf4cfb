"""Turning insertion requests into validated rows, and reading them from JSONL."""

from web_index.ingest._jsonl import InsertRequest, iter_insert_requests
from web_index.ingest._validate import Attempt, new_request_id, validate_attempt

__all__ = ["Attempt", "InsertRequest", "iter_insert_requests", "new_request_id", "validate_attempt"]
