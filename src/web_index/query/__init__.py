"""Answering batches of queries against a store."""

# The internal API: what other packages of web_index use (not public, not in __all__).
from web_index.query._bulk import answer_to_file as answer_to_file
from web_index.query._engine import Result, run_queries

__all__ = ["Result", "run_queries"]
