"""Answering a batch of queries: plan by partition, read keys, then bodies.

1. Every distinct query becomes a :class:`Plan` (type, URL key, domain,
   window, calibre rule).
2. The insert buffer is consulted first, then the files (this order is what
   makes a concurrent flush safe: rows leave the buffer only after their part
   file is in place).
3. Files are read month by month, newest first; a query stops asking for
   older months once nothing older can beat what it has. Within a partition,
   row-group statistics on the sorted ``url_key`` skip row groups, and only
   key columns are read.
4. Winners are chosen; only their rows are read in full (never a body that
   will not be returned, and none at all for presence).

This module drives the batch and its retries. The steps live apart: 1 in
:mod:`web_index.query._plan`, 2 and 3 (finding each query's winner) in
:mod:`web_index.query._find`, 4 (reading it in full) in :mod:`web_index.query._results`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from web_index._retry import retrying
from web_index.models import Query, RecordType
from web_index.query._find import Found, find_in_buffer, find_in_files
from web_index.query._find_many import find_many
from web_index.query._plan import Plan, plan
from web_index.query._pool import answering
from web_index.query._results import Result, load_results
from web_index.storage import Store

__all__ = ["run_plans", "run_queries"]

_TRIES = 8


def run_queries(store: Store, queries: Sequence[Query], *, bodies: bool) -> list[Result | bool]:
    """Answer ``queries`` in input order: results, or presence booleans if not ``bodies``."""
    unique: dict[Query, int] = {}
    for q in queries:
        unique.setdefault(q, len(unique))
    answers = run_plans(store, [plan(q) for q in unique], bodies=bodies)
    return [answers[unique[q]] for q in queries]


def run_plans(store: Store, plans: Sequence[Plan], *, bodies: bool) -> list[Result | bool]:
    """Answer what ``plans`` ask, in their order: results, or presence booleans if not ``bodies``."""
    unique: dict[Plan, int] = {}
    for p in plans:
        unique.setdefault(p, len(unique))
    distinct = list(unique)
    answers: list[Result | bool] = [None] * len(distinct)
    no_index: set[int] = set()  # plans the month index misled: read their partitions
    pending = list(range(len(distinct)))

    # A query that raced a flush or a compaction (a file replaced between
    # listing and reading, a buffered row flushed meanwhile) is answered again;
    # the ones settled stay settled.
    def again() -> list[int]:
        nonlocal pending
        pending = _attempt(store, distinct, pending, answers, bodies, no_index)
        return pending

    with answering(len(distinct)):
        retrying(
            again,
            tries=_TRIES,
            on=(FileNotFoundError,),
            done=lambda left: not left,
            gave_up="the store kept changing under this query batch; try again",
        )
    if len(distinct) == len(plans):
        return answers
    return [answers[unique[p]] for p in plans]


def _attempt(
    store: Store,
    plans: list[Plan],
    todo: list[int],
    answers: list[Result | bool],
    bodies: bool,
    no_index: set[int],
) -> list[int]:
    found: dict[int, Found] = {}  # plan index -> best so far
    by_type: dict[RecordType, list[int]] = defaultdict(list)
    for i in todo:
        by_type[plans[i].type].append(i)

    for type, idxs in by_type.items():
        find_in_buffer(store, type, [plans[i] for i in idxs], idxs, found)
        if not find_many(store, type, plans, idxs, found, no_index):
            find_in_files(store, type, plans, idxs, found, no_index)

    retry: list[int] = []
    if not bodies:
        for i in todo:
            answers[i] = i in found
        return retry
    for i in todo:
        if i not in found:
            answers[i] = None
    load_results(store, plans, found, answers, retry, no_index)
    return retry
