"""The Arrow/Parquet schemas of the four record types, and how to sort them."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from web_index.models import RecordType

__all__ = [
    "BODY_COLUMN",
    "DIGEST_COLUMNS",
    "FORMAT_VERSION",
    "KEY_COLUMNS",
    "SCHEMAS",
    "SORT_KEYS",
    "TS_COLUMN",
]

# 2: every file carries web_index.checksum; 3: ``get`` files carry payload
# digests (files without them are read with the digests derived; docs/format.md).
FORMAT_VERSION = "3"
BODY_COLUMN = "data"  # the only column of page bodies (``get`` files)
# The SHA-1 and SHA-256 of each body, raw (``get`` files only).
DIGEST_COLUMNS = ("payload_sha1", "payload_sha256")
_TS = pa.timestamp("us", tz="UTC")


def _data_schema(with_body: bool) -> pa.Schema:
    fields: list[pa.Field[Any]] = [
        pa.field("url_key", pa.string(), nullable=False),
        pa.field("url", pa.string(), nullable=False),
        pa.field("attempt_timestamp", _TS, nullable=False),
        pa.field("request_id", pa.string(), nullable=False),
        pa.field("chain_index", pa.uint16(), nullable=False),
        pa.field("request_url", pa.string(), nullable=False),
        pa.field("status_code", pa.int16(), nullable=False),
        pa.field("headers", pa.string(), nullable=False),
        pa.field("timestamp", _TS, nullable=False),
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
    return pa.schema(fields)


_METADATA_FIELDS: list[pa.Field[Any]] = [
    pa.field("url_key", pa.string(), nullable=False),
    pa.field("url", pa.string(), nullable=False),
    pa.field("timestamp", _TS, nullable=False),
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("state", pa.string(), nullable=False),
    pa.field("logs", pa.large_string()),
    pa.field("traceback", pa.large_string()),
    pa.field("run_time", pa.float64()),
    pa.field("fetcher_name", pa.string(), nullable=False),
    pa.field("fetcher_version", pa.string(), nullable=False),
    pa.field("fetcher_calibre", pa.uint8(), nullable=False),
]
_METADATA = pa.schema(_METADATA_FIELDS)

SCHEMAS: dict[RecordType, pa.Schema] = {
    RecordType.GET: _data_schema(with_body=True),
    RecordType.HEAD: _data_schema(with_body=False),
    RecordType.GET_METADATA: _METADATA,
    RecordType.HEAD_METADATA: _METADATA,
}

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
