"""Answering batches of queries against a store."""

from web_index.query._engine import Result, run_queries

__all__ = ["Result", "run_queries"]
