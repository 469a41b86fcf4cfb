"""Telling a store from any other location: the marker a store is created with.

A reader given a mistyped location must fail, not answer from an empty folder;
so a store is created with ``_web-index.json`` at its top, and only writers
allowed to create one write it. A store made before the marker is recognised
by its top-level folders and gets one when next opened to write.
"""

from __future__ import annotations

import json

from web_index.errors import StoreError
from web_index.storage._layout import STORE_ENTRIES, STORE_MARKER
from web_index.storage.backends import Backend

__all__ = ["open_or_create", "unwritable"]

# What wrote the store, for a person who opens the file.
_MARKER = json.dumps(
    {"store": "web-index", "standard": "0.1.0", "layout": "type/yyyy/mm/domain.parquet"}
).encode()


def open_or_create(backend: Backend, *, create: bool) -> None:
    """Check that ``backend`` holds a store; with ``create``, make it one where
    there is nothing (or mark one made before the marker). Else a
    :class:`StoreError` that says whether the location is missing or holds
    something else: a store is never made among other files (a site's
    folder given as ``--store``), whose owner meant something else."""
    if backend.list_files("", STORE_MARKER):
        return
    folders = backend.list_folders("")
    made_before_marker = bool(STORE_ENTRIES.intersection(folders))
    if not made_before_marker and backend.exists():
        names = [*(f.name for f in backend.list_files("")), *(f"{f}/" for f in folders)]
        # What a file manager or a fresh file system leaves is no one's data.
        held = sorted(n for n in names if not n.startswith(".") and n != "lost+found/")
        if held:
            shown = ", ".join(held[:3]) + (", …" if len(held) > 3 else "")
            raise StoreError(
                f"no store at {backend.url}: it is not a web-index store (no {STORE_MARKER}):"
                f" it holds {shown}; give an empty or new folder, or a store's"
            )
        if not create:
            raise StoreError(
                f"no store at {backend.url}: it is empty; create one with `web-index init`,"
                " or by inserting into it"
            )
    elif not (made_before_marker or create):
        raise StoreError(
            f"no store at {backend.url}: it does not exist; create one with `web-index init`,"
            " or by inserting into it"
        )
    if create:
        try:
            backend.write_bytes(STORE_MARKER, _MARKER)
        except OSError as exc:
            raise unwritable(backend, exc) from None


def unwritable(backend: Backend, exc: OSError) -> StoreError:
    """The error for a store that cannot be written (a read-only mount, no permission)."""
    return StoreError(
        f"the store {backend.url} cannot be written ({exc.strerror or exc});"
        " to read it only, open it read-only"
    )
