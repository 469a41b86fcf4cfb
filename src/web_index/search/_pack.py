"""Site packs: one SQLite FTS5 database per site, built whole or updated.

A pack is written by one packer and read by many searchers that download it,
so it is optimised for reading: the FTS index merged into one segment
('optimize') and the file VACUUMed. It is never changed in place: a build
writes a private work file and an update a private copy, each with journaling
off (a crash loses only that copy), and the result is VACUUMed INTO a fresh
file that replaces the pack by rename. So a reader that opened the old pack
(``immutable=1``) keeps reading it whole.

Input versions are merged in SQL, not in Python, so that the texts are
streamed: each chunk is upserted into a ``stage`` table that keeps, per url,
the version with the latest ``fetched`` (on a tie, the later one), tombstones
included, and the stage is then applied to ``pages`` and the FTS index.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

from web_index.errors import SearchError
from web_index.search._files import fsync_file, publish, sibling
from web_index.search._models import PackInfo, PageText, iso_utc, parse_iso_utc

__all__ = ["FORMAT", "build_pack", "open_read_only", "pack_info", "read_pack_info", "update_pack"]

FORMAT = 1
# Marks the file as a pack for `file(1)` and for read_pack_info ("WISP").
APPLICATION_ID = 0x57495350
_CHUNK = 2000
_SNIPPET_MARKS = {0x02: None, 0x03: None}  # see _reader: they delimit matches in snippets
# FTS5 buffers new entries in memory up to this size before writing a segment
# (default 1 MiB). 64 MiB halves the time to index 100,000 pages: fewer,
# larger segments to write and merge. It is stored in the pack, for updates.
_HASH_BYTES = 64 << 20

# unicode61 without stemming: a pack holds pages of any language, and a
# stemmer (porter is English only) would merge unrelated words of the others;
# exact tokens, folded for case and diacritics ("cafe" finds "café"), match
# predictably in all of them. `id INTEGER PRIMARY KEY`, not the bare rowid:
# VACUUM may renumber an implicit rowid, which would detach the external
# content index from its rows.
_SCHEMA = """
PRAGMA application_id = 1464423248; -- APPLICATION_ID
CREATE TABLE pack_meta(key TEXT PRIMARY KEY, value NOT NULL);
CREATE TABLE pages(
    id INTEGER PRIMARY KEY,
    url TEXT NOT NULL UNIQUE,
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    lang TEXT,
    fetched TEXT NOT NULL
);
CREATE VIRTUAL TABLE pages_fts USING fts5(
    title, body, content='pages', content_rowid='id', tokenize='unicode61 remove_diacritics 2'
);
"""

# Per url the latest version wins; `>=` so that of two equally recent ones the
# later in the input does. `old` and `wins` are filled in by _apply.
_STAGE = """
CREATE TABLE stage(
    url TEXT PRIMARY KEY, title TEXT, body TEXT, lang TEXT, fetched TEXT, deleted INTEGER,
    old INTEGER, wins INTEGER NOT NULL DEFAULT 1
)
"""
_UPSERT_STAGE = """
INSERT INTO stage(url, title, body, lang, fetched, deleted) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT(url) DO UPDATE SET
    title = excluded.title, body = excluded.body, lang = excluded.lang,
    fetched = excluded.fetched, deleted = excluded.deleted
WHERE excluded.fetched >= stage.fetched
"""
# Applying the stage, in order. An external-content FTS5 table cannot read
# the old text of a row once it has changed, so old entries are removed with
# the 'delete' command first, while `pages` still holds them.
_APPLY = [
    # A stored page newer than the staged version keeps its place.
    """UPDATE stage SET old = p.id, wins = (stage.fetched >= p.fetched)
       FROM pages AS p WHERE p.url = stage.url""",
    """INSERT INTO pages_fts(pages_fts, rowid, title, body)
       SELECT 'delete', p.id, p.title, p.body FROM stage AS s JOIN pages AS p ON p.id = s.old
       WHERE s.wins""",
    "DELETE FROM pages WHERE id IN (SELECT old FROM stage WHERE old IS NOT NULL AND wins AND deleted)",
    """UPDATE pages SET title = s.title, body = s.body, lang = s.lang, fetched = s.fetched
       FROM stage AS s WHERE pages.id = s.old AND s.wins AND NOT s.deleted""",
    """INSERT INTO pages(url, title, body, lang, fetched)
       SELECT url, title, body, lang, fetched FROM stage WHERE old IS NULL AND NOT deleted""",
    """INSERT INTO pages_fts(rowid, title, body)
       SELECT p.id, p.title, p.body FROM stage AS s JOIN pages AS p ON p.url = s.url
       WHERE s.wins AND NOT s.deleted""",
    "DROP TABLE stage",
]
_SET_META = "INSERT OR REPLACE INTO pack_meta(key, value) VALUES (?, ?)"


def _stage_rows(texts: Iterable[PageText]) -> Iterator[tuple[str, str, str, str | None, str, int]]:
    for t in texts:
        if t.deleted:
            yield t.url, "", "", None, iso_utc(t.fetched), 1
            continue
        body = t.text
        if "\x02" in body or "\x03" in body:  # rare: the test is cheap, translate() is not
            body = body.translate(_SNIPPET_MARKS)
        yield t.url, t.title, body, t.lang, iso_utc(t.fetched), 0


def _open_work(path: Path) -> sqlite3.Connection:
    # isolation_level=None: transactions are begun and committed here, so that
    # a whole build or update is one transaction.
    con = sqlite3.connect(path, isolation_level=None)
    # The work file is private until published, and a crash restarts from the
    # input, so neither a journal nor syncs buy anything.
    con.execute("PRAGMA journal_mode = OFF")
    con.execute("PRAGMA synchronous = OFF")
    con.execute("PRAGMA cache_size = -65536")  # 64 MiB: the url index and FTS merges stay in memory
    return con


def _apply(con: sqlite3.Connection, texts: Iterable[PageText], watermark: str) -> None:
    con.execute("BEGIN")
    con.execute(_STAGE)
    rows = _stage_rows(texts)
    while chunk := list(islice(rows, _CHUNK)):
        con.executemany(_UPSERT_STAGE, chunk)
    for statement in _APPLY:
        con.execute(statement)
    (pages,) = con.execute("SELECT count(*) FROM pages").fetchone()
    meta = {"watermark": watermark, "built": iso_utc(datetime.now(UTC)), "pages": pages}
    con.executemany(_SET_META, meta.items())
    # One b-tree per term instead of many segments: what searches read fastest.
    con.execute("INSERT INTO pages_fts(pages_fts) VALUES ('optimize')")
    con.execute("COMMIT")


def _finish(con: sqlite3.Connection, work: Path, dst: Path) -> PackInfo:
    """VACUUM the work database INTO a temporary file and rename it to ``dst``."""
    out = sibling(dst, "tmp")
    try:
        # INTO a new file, not VACUUM in place: in place copies the database
        # to a temporary file and back, twice the writing.
        con.execute("VACUUM INTO ?", (os.fspath(out),))
        fsync_file(out)
        info = read_pack_info(out)
        publish(out, dst)
        return info
    finally:
        out.unlink(missing_ok=True)


def _check_watermark(watermark: object) -> None:
    if not isinstance(watermark, str):
        raise TypeError(f"watermark must be a str, got {type(watermark).__name__}")


def build_pack(path: Path, site: str, texts: Iterable[PageText], *, watermark: str) -> PackInfo:
    """Build a new pack at ``path`` from ``texts`` (read once, in chunks).

    Of several texts of one url the latest ``fetched`` is kept (on a tie, the
    later one); a url whose kept text is a tombstone is left out. Raises
    :class:`FileExistsError` if ``path`` exists: a pack is replaced only by
    :func:`update_pack`. ``path`` appears only once the pack is complete.
    """
    _check_watermark(watermark)
    if path.exists():
        raise FileExistsError(errno.EEXIST, "a pack or other file is there already", os.fspath(path))
    work = sibling(path, "build")
    try:
        con = _open_work(work)
        try:
            con.executescript(_SCHEMA)
            con.execute("INSERT INTO pages_fts(pages_fts, rank) VALUES ('hashsize', ?)", (_HASH_BYTES,))
            con.executemany(_SET_META, [("site", site), ("format", FORMAT)])
            _apply(con, texts, watermark)
            return _finish(con, work, path)
        finally:
            con.close()
    finally:
        work.unlink(missing_ok=True)


def update_pack(path: Path, texts: Iterable[PageText], *, watermark: str) -> PackInfo:
    """Apply ``texts`` to the pack at ``path`` and record ``watermark``.

    A text replaces the stored page of its url unless the stored one was
    fetched later; a tombstone removes it on the same terms. A tombstone is not
    remembered: a text older than it, in a later update, adds the page back.
    The pack is replaced by rename, never changed in place.
    """
    _check_watermark(watermark)
    read_pack_info(path)  # a SearchError now rather than a confusing SQL error later
    work = sibling(path, "update")
    try:
        shutil.copyfile(path, work)
        con = _open_work(work)
        try:
            _apply(con, texts, watermark)
            return _finish(con, work, path)
        finally:
            con.close()
    finally:
        work.unlink(missing_ok=True)


def open_read_only(path: Path, *, check_same_thread: bool = True) -> sqlite3.Connection:
    """A read-only connection to a published pack.

    ``immutable=1``: packs are replaced by rename, never changed in place, so
    SQLite may skip locking and change detection. ``as_uri()`` percent-encodes
    the path, so any file name (``?``, ``#``, ``%``) is safe in the URI.
    """
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "no pack there", os.fspath(path))
    uri = path.absolute().as_uri() + "?mode=ro&immutable=1"
    return sqlite3.connect(uri, uri=True, check_same_thread=check_same_thread)


def pack_info(con: sqlite3.Connection, path: Path) -> PackInfo:
    """The :class:`PackInfo` of the pack open on ``con``; SearchError naming
    ``path`` if it is not a pack this version can read."""
    try:
        (app_id,) = con.execute("PRAGMA application_id").fetchone()
        meta = {}
        if app_id == APPLICATION_ID:
            meta = dict(con.execute("SELECT key, value FROM pack_meta").fetchall())
    except sqlite3.DatabaseError as e:
        raise SearchError(f"{path}: not a search pack ({e})") from e
    if not {"site", "format", "watermark", "built", "pages"} <= meta.keys():
        raise SearchError(f"{path}: not a search pack")
    if meta["format"] != FORMAT:
        raise SearchError(f"{path}: pack format {meta['format']!r}; this version reads format {FORMAT}")
    return PackInfo(
        site=meta["site"],
        pages=meta["pages"],
        watermark=meta["watermark"],
        built=parse_iso_utc(meta["built"]),
        format=meta["format"],
    )


def read_pack_info(path: Path) -> PackInfo:
    """What the pack at ``path`` says about itself.

    Raises :class:`SearchError` naming ``path`` if the file is not a pack
    (:class:`FileNotFoundError` if there is no file).
    """
    con = open_read_only(path)
    try:
        return pack_info(con, path)
    finally:
        con.close()
