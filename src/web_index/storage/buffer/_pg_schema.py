"""The PostgreSQL insert buffer's tables, made once, and the writes the
buffer shares with them: the capture lines of attempts buffered before their
table existed, and the flush generations a completed flush bumps."""

from __future__ import annotations

from typing import Any

import psycopg

from web_index.storage.buffer.base import _decode, _lines_of, line_key

__all__ = ["INSERT_LINE", "SCHEMA", "add_lines", "bump", "schema_in_place"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS web_index_attempts (
    seq        BIGSERIAL PRIMARY KEY,
    method     TEXT     NOT NULL,
    year       SMALLINT NOT NULL,
    month      SMALLINT NOT NULL,
    domain     TEXT     NOT NULL,
    url_key    TEXT     NOT NULL,
    ts_us      BIGINT   NOT NULL,
    request_id TEXT     NOT NULL UNIQUE,
    calibre    SMALLINT NOT NULL,
    success    BOOLEAN  NOT NULL,
    nbytes     BIGINT   NOT NULL,
    added_us   BIGINT   NOT NULL,
    flush_id   TEXT,
    metadata   BYTEA    NOT NULL,
    responses  BYTEA    NOT NULL
);
CREATE INDEX IF NOT EXISTS web_index_attempts_lookup
    ON web_index_attempts (method, url_key) INCLUDE (ts_us, request_id, calibre, success);
CREATE INDEX IF NOT EXISTS web_index_attempts_partition
    ON web_index_attempts (method, year, month, domain, flush_id);
CREATE INDEX IF NOT EXISTS web_index_attempts_flush ON web_index_attempts (flush_id);
-- Running totals per partition (as in SQLite), so that the size check after
-- every insert is one primary-key read, not a count over the partition's rows.
CREATE TABLE IF NOT EXISTS web_index_totals (
    method TEXT NOT NULL, year SMALLINT NOT NULL, month SMALLINT NOT NULL, domain TEXT NOT NULL,
    rows BIGINT NOT NULL, nbytes BIGINT NOT NULL,
    PRIMARY KEY (method, year, month, domain)
);
CREATE OR REPLACE FUNCTION web_index_totals_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO web_index_totals VALUES (NEW.method, NEW.year, NEW.month, NEW.domain, 1, NEW.nbytes)
    ON CONFLICT (method, year, month, domain) DO UPDATE
    SET rows = web_index_totals.rows + 1, nbytes = web_index_totals.nbytes + EXCLUDED.nbytes;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION web_index_totals_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE web_index_totals SET rows = rows - 1, nbytes = nbytes - OLD.nbytes
    WHERE method = OLD.method AND year = OLD.year AND month = OLD.month AND domain = OLD.domain;
    RETURN NULL;
END $$;
CREATE OR REPLACE TRIGGER web_index_totals_insert AFTER INSERT ON web_index_attempts
    FOR EACH ROW EXECUTE FUNCTION web_index_totals_insert();
CREATE OR REPLACE TRIGGER web_index_totals_delete AFTER DELETE ON web_index_attempts
    FOR EACH ROW EXECUTE FUNCTION web_index_totals_delete();
CREATE TABLE IF NOT EXISTS web_index_generations (
    method TEXT NOT NULL, year SMALLINT NOT NULL, month SMALLINT NOT NULL, gen BIGINT NOT NULL,
    PRIMARY KEY (method, year, month)
);
-- The capture line (web_index.storage.indexes._capture_lines) of each buffered response,
-- made at insert: a CDX lookup reads its key's lines through web_index_lines_key,
-- never a body or another URL's rows. Deleted with their attempt (a flush).
-- Rows inserted by a version before these (lined false) get theirs when a
-- writer opens the buffer, and are made on the spot by lookups until then.
ALTER TABLE web_index_attempts ADD COLUMN IF NOT EXISTS lined BOOLEAN NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS web_index_attempts_unlined
    ON web_index_attempts (method, domain) WHERE NOT lined;
CREATE TABLE IF NOT EXISTS web_index_lines (
    request_id TEXT     NOT NULL REFERENCES web_index_attempts (request_id) ON DELETE CASCADE,
    position   INTEGER  NOT NULL,
    method     TEXT     NOT NULL,
    year       SMALLINT NOT NULL,
    month      SMALLINT NOT NULL,
    domain     TEXT     NOT NULL,
    key        BYTEA    NOT NULL,  -- the line up to its JSON: SURT key, space, 14-digit time
    line       BYTEA    NOT NULL,
    PRIMARY KEY (request_id, position)
);
CREATE INDEX IF NOT EXISTS web_index_lines_key ON web_index_lines (method, domain, key);
"""
INSERT_LINE = (
    "INSERT INTO web_index_lines (request_id, position, method, year, month, domain, key, line)"
    " VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING"
)


def schema_in_place(conn: psycopg.Connection[Any]) -> bool:
    """Whether SCHEMA has run to its end: its last index exists (a change to
    SCHEMA must add an object this checks for)."""
    (found,) = conn.execute("SELECT to_regclass('web_index_lines_key') IS NOT NULL").fetchone() or (False,)
    return bool(found)


def add_lines(conn: psycopg.Connection[Any]) -> None:
    """Make the capture lines of the attempts that have none (buffered by a version
    before web_index_lines): once, by a writer opening the buffer."""
    while True:
        rows = conn.execute(
            "SELECT request_id, method, year, month, domain, responses FROM web_index_attempts"
            " WHERE NOT lined LIMIT 500"
        ).fetchall()
        if not rows:
            return
        lines = [
            (rid, position, m, y, mo, d, line_key(line), line)
            for rid, m, y, mo, d, responses in rows
            for position, line in _lines_of(_decode(responses))
        ]
        with conn.cursor() as cur:
            if lines:
                cur.executemany(INSERT_LINE, lines)
            cur.execute(
                "UPDATE web_index_attempts SET lined = true WHERE request_id = ANY(%s)",
                ([r[0] for r in rows],),
            )


def bump(cur: psycopg.Cursor[Any], method: str, year: int, month: int) -> None:
    cur.execute(
        "INSERT INTO web_index_generations VALUES (%s, %s, %s, 1)"
        " ON CONFLICT (method, year, month) DO UPDATE SET gen = web_index_generations.gen + 1"
        " RETURNING gen",
        (method, year, month),
    )
    row = cur.fetchone()
    if row is not None and row[0] == 1:  # a month's first flush: the list of months changed
        cur.execute(
            "INSERT INTO web_index_generations VALUES (%s, 0, 0, 1)"
            " ON CONFLICT (method, year, month) DO UPDATE SET gen = web_index_generations.gen + 1",
            (method,),
        )
