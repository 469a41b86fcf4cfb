"""One validated fetch attempt as the store's rows: the layout that ingest
produces and the buffer and the files keep."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from web_index.models._enums import RecordType

__all__ = ["GET_COLUMNS", "HEAD_COLUMNS", "METADATA_COLUMNS", "AttemptRows", "row_dicts"]

# The order of the values in an attempt's rows. The insert buffer stores rows
# so (its blob layout: fixed here, not taken from the file schemas, so that a
# reordering there cannot misread a buffer written before).
METADATA_COLUMNS = (
    "url_key", "url", "timestamp", "request_id", "state", "logs", "traceback", "run_time",
    "fetcher_name", "fetcher_version", "fetcher_calibre",
)  # fmt: skip
HEAD_COLUMNS = (
    "url_key", "url", "attempt_timestamp", "request_id", "chain_index", "request_url", "status_code",
    "headers", "timestamp", "retry_attempt", "is_final", "fetcher_name", "fetcher_version",
    "fetcher_calibre",
)  # fmt: skip
GET_COLUMNS = (*HEAD_COLUMNS, "data")


class AttemptRows(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One validated fetch attempt, ready to be stored (never in a reference cycle: ``gc=False``).

    ``metadata`` and ``responses`` are flat rows in the store's column layout,
    as tuples of values in the order of :data:`METADATA_COLUMNS` and
    :data:`GET_COLUMNS` (or :data:`HEAD_COLUMNS`), timestamps as microseconds
    since the epoch: tuples, not dicts, because building a dict a row was a
    third of validating an attempt. ``timestamp`` is the attempt's start in
    UTC (``ts_us`` as a datetime).
    """

    method: RecordType
    url: str
    url_key: str
    domain: str
    year: int
    month: int
    ts_us: int
    timestamp: datetime
    request_id: str
    calibre: int
    success: bool
    metadata: tuple[Any, ...]
    responses: list[tuple[Any, ...]]

    def rows(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The metadata row and the response rows as dicts by column name."""
        return row_dicts(self.metadata, self.responses)


# A GET row has one value more than a HEAD row (its body): the length tells them apart.
_RESPONSE_COLUMNS = {len(GET_COLUMNS): GET_COLUMNS, len(HEAD_COLUMNS): HEAD_COLUMNS}


def row_dicts(
    metadata: Sequence[Any], responses: Sequence[Sequence[Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Rows of values in the order of the ``*_COLUMNS`` above as dicts by column
    name; ``ValueError`` naming a row whose length fits none of them."""
    if len(metadata) != len(METADATA_COLUMNS):
        raise ValueError(f"a metadata row of {len(metadata)} values")
    out: list[dict[str, Any]] = []
    for r in responses:
        names = _RESPONSE_COLUMNS.get(len(r))
        if names is None:
            raise ValueError(f"a response row of {len(r)} values")
        out.append(dict(zip(names, r, strict=True)))
    return dict(zip(METADATA_COLUMNS, metadata, strict=True)), out
