"""The records and queries of the Web Index Standard, as typed Python objects.

Every model converts to and from the standard's flat serialised form with
``to_dict()`` / ``from_dict()``; lists of queries go to and from Parquet with
:func:`write_queries` / :func:`read_queries`, and answers to Parquet with
:func:`write_results`.
"""

from web_index.models._enums import AttemptState, Calibre, RecordType
from web_index.models._io import RESULT_SCHEMA, iter_queries, read_queries, write_queries, write_results
from web_index.models._queries import (
    DeterministicQuery,
    PageKey,
    Query,
    SimplePageQuery,
    TimeAwarePageQuery,
    TimeBoundedQuery,
    query_from_dict,
)
from web_index.models._records import AttemptMetadata, Page, Response
from web_index.models._rows import GET_COLUMNS, HEAD_COLUMNS, METADATA_COLUMNS, AttemptRows, row_dicts

__all__ = [
    "GET_COLUMNS",
    "HEAD_COLUMNS",
    "METADATA_COLUMNS",
    "RESULT_SCHEMA",
    "AttemptMetadata",
    "AttemptRows",
    "AttemptState",
    "Calibre",
    "DeterministicQuery",
    "Page",
    "PageKey",
    "Query",
    "RecordType",
    "Response",
    "SimplePageQuery",
    "TimeAwarePageQuery",
    "TimeBoundedQuery",
    "iter_queries",
    "query_from_dict",
    "read_queries",
    "row_dicts",
    "write_queries",
    "write_results",
]
