"""The Arrow/Parquet schemas of the four record types, and how to sort them.

The schemas are built on first use (``schemas()``; ``SCHEMAS`` is the same
dict): the column names and sort keys need no pyarrow, which a store opened
only to look captures up never imports (~45 MiB of a server worker).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from web_index.models import RecordType

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BODY_COLUMN",
    "DIGEST_COLUMNS",
    "FORMAT_VERSION",
    "KEY_COLUMNS",
    "REF_COLUMN",
    "SCHEMAS",
    "SORT_KEYS",
    "TS_COLUMN",
    "schemas",
]

# 2: every file carries web_index.checksum; 3: ``get`` files carry payload
# digests (files without them are read with the digests derived; docs/format.md);
# 4: ``get`` files carry payload references (files without them hold every body).
FORMAT_VERSION = "4"
BODY_COLUMN = "data"  # the only column of page bodies (``get`` files)
# The SHA-1 and SHA-256 of each body, raw (``get`` files only).
DIGEST_COLUMNS = ("payload_sha1", "payload_sha256")
# Null where the row holds its body; else the row's ``data`` is empty and this
# names the row that holds the payload (``storage.payloads``).
REF_COLUMN = "payload_ref"


def _data_schema(with_body: bool) -> pa.Schema:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    fields: list[pa.Field[Any]] = [
        pa.field("url_key", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("attempt_timestamp", ts, nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("chain_index", pa.uint16(), nullable=False),
        pa.field("request_url", pa.string(), nullable=False),
        pa.field("status_code", pa.int16(), nullable=False),
        pa.field("headers", pa.string(), nullable=False),
        pa.field("timestamp", ts, nullable=False),
        pa.field("retry_attempt", pa.uint8(), nullable=False),
        pa.field("is_final", pa.bool_(), nullable=False),
        pa.field("fetcher_name", pa.string(), nullable=False),
        pa.field("fetcher_version", pa.string(), nullable=False),
        pa.field("fetcher_calibre", pa.uint8(), nullable=False),
    ]
    if with_body:
        fields.insert(8, pa.field(BODY_COLUMN, pa.large_binary(), nullable=False))
        fields.append(pa.field(DIGEST_COLUMNS[0], pa.binary(20), nullable=False))
        fields.append(pa.field(DIGEST_COLUMNS[1], pa.binary(32), nullable=False))
        fields.append(pa.field(REF_COLUMN, pa.string()))
    return pa.schema(fields)


def _metadata_schema() -> pa.Schema:
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    fields: list[pa.Field[Any]] = [
        pa.field("url_key", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("timestamp", ts, nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("logs", pa.large_string()),
        pa.field("traceback", pa.large_string()),
        pa.field("run_time", pa.float64()),
        pa.field("fetcher_name", pa.string(), nullable=False),
        pa.field("fetcher_version", pa.string(), nullable=False),
        pa.field("fetcher_calibre", pa.uint8(), nullable=False),
    ]
    return pa.schema(fields)


@functools.cache
def schemas() -> dict[RecordType, pa.Schema]:
    """Each record type's Arrow schema (built, and pyarrow imported, on the first call)."""
    metadata = _metadata_schema()
    return {
        RecordType.GET: _data_schema(with_body=True),
        RecordType.HEAD: _data_schema(with_body=False),
        RecordType.GET_METADATA: metadata,
        RecordType.HEAD_METADATA: metadata,
    }


if TYPE_CHECKING:
    SCHEMAS: dict[RecordType, pa.Schema]


def __getattr__(name: str) -> Any:
    if name == "SCHEMAS":
        return schemas()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The column holding the attempt's start time, which every query matches on.
TS_COLUMN: dict[RecordType, str] = {
    RecordType.GET: "attempt_timestamp",
    RecordType.HEAD: "attempt_timestamp",
    RecordType.GET_METADATA: "timestamp",
    RecordType.HEAD_METADATA: "timestamp",
}

SORT_KEYS: dict[RecordType, list[str]] = {
    t: ["url_key", TS_COLUMN[t], "request_id"] + ([] if t.is_metadata else ["chain_index"])
    for t in RecordType
}

# What a query reads before it knows which rows it returns: never a body.
KEY_COLUMNS: dict[RecordType, list[str]] = {
    t: ["url_key", TS_COLUMN[t], "request_id", "fetcher_calibre"] for t in RecordType
}
