"""The records and queries of the Web Index Standard, as typed Python objects.

Every model converts to and from the standard's flat serialised form with
``to_dict()`` / ``from_dict()``; lists of queries go to and from Parquet with
:func:`write_queries` / :func:`read_queries`, and answers to Parquet with
:func:`write_results`.

``__all__`` is the public API; names imported ``as`` themselves are the
internal one, for the other packages of web_index (never from a private module).
``RESULT_SCHEMA`` is built on first use: it needs pyarrow, which looking a
capture up never imports.
"""

from typing import TYPE_CHECKING, Any

from web_index.models._digest import Digest, DigestHit
from web_index.models._digest import base32_sha1 as base32_sha1
from web_index.models._digest import payload_digests as payload_digests
from web_index.models._digest import payload_sha1 as payload_sha1
from web_index.models._digest import sha1_base32 as sha1_base32
from web_index.models._digest import sha1_text as sha1_text
from web_index.models._digest import sha256_text as sha256_text
from web_index.models._enums import AttemptState, Calibre, RecordType
from web_index.models._io import iter_queries, read_queries, write_queries
from web_index.models._io import queries_of as queries_of
from web_index.models._io import query_table as query_table
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
from web_index.models._records import last_reason as last_reason
from web_index.models._records import restored_response as restored_response
from web_index.models._records import result_json as result_json
from web_index.models._results_io import result_table as result_table
from web_index.models._results_io import write_results
from web_index.models._rows import GET_COLUMNS as GET_COLUMNS
from web_index.models._rows import HEAD_COLUMNS as HEAD_COLUMNS
from web_index.models._rows import METADATA_COLUMNS as METADATA_COLUMNS
from web_index.models._rows import AttemptRows as AttemptRows
from web_index.models._rows import row_dicts as row_dicts
from web_index.models._time import STORED_END as STORED_END
from web_index.models._time import STORED_END_US as STORED_END_US
from web_index.models._time import STORED_START as STORED_START
from web_index.models._time import check_stored_us as check_stored_us
from web_index.models._time import clamp_us as clamp_us
from web_index.models._time import from_us as from_us
from web_index.models._time import month_bounds as month_bounds
from web_index.models._time import parse_ts as parse_ts
from web_index.models._time import parse_when as parse_when
from web_index.models._time import to_us as to_us

if TYPE_CHECKING:
    from web_index.models._results_io import RESULT_SCHEMA

__all__ = [
    "RESULT_SCHEMA",
    "AttemptMetadata",
    "AttemptState",
    "Calibre",
    "DeterministicQuery",
    "Digest",
    "DigestHit",
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
    "write_queries",
    "write_results",
]


def __getattr__(name: str) -> Any:
    if name == "RESULT_SCHEMA":
        from web_index.models._results_io import result_schema

        return result_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
