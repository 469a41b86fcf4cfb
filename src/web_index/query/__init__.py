"""Answering batches of queries against a store.

``__all__`` is the public API; names imported ``as`` themselves are the
internal one, for the other packages of web_index (never from a private module).
"""

from web_index.query._bulk import Workers as Workers
from web_index.query._bulk import answer_to_file as answer_to_file
from web_index.query._cluster import answer_on_cluster as answer_on_cluster
from web_index.query._cluster import map_on_cluster as map_on_cluster
from web_index.query._engine import run_plans as run_plans
from web_index.query._engine import run_queries
from web_index.query._plan import Plan as Plan
from web_index.query._pool import dedicate as dedicate
from web_index.query._processes import Processes as Processes
from web_index.query._results import Result
from web_index.query._scan import scan_records as scan_records
from web_index.query._scan import time_bound as time_bound

__all__ = ["Result", "run_queries"]
