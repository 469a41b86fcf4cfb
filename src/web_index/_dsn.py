"""Telling a PostgreSQL connection string from anything else, without showing its password."""

from __future__ import annotations

import re

from web_index._extras import import_extra
from web_index.errors import StoreError

__all__ = ["check_dsn", "mask_dsn"]

# "password=..." (also sslpassword=, and ?password= in a URL), quoted or not,
# and the "user:password@" of a URL (up to its last "@": a password may hold one).
_KEY_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'?|\S+)", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)\S*@")

_FORMS = (
    "a shared buffer is a PostgreSQL connection string: a postgresql:// URL "
    "or libpq key=value pairs such as 'host=db.internal dbname=webindex'"
)


def mask_dsn(text: str) -> str:
    """``text`` with every password in it replaced by ``***``."""
    return _URL_PASSWORD.sub(r"\1***@", _KEY_PASSWORD.sub(r"\1***", text))


def check_dsn(dsn: str) -> None:
    """Refuse (``StoreError``) a string that is not a connection string libpq reads.

    The message never holds the password: a string with some structure is
    quoted with its passwords masked; one without (which may be a password
    passed by mistake) is not quoted at all. libpq's own parse error is not
    passed on either, as it quotes the string.
    """
    if dsn.strip():
        import_extra("psycopg.conninfo", "postgres")  # libpq is the judge
        from psycopg import Error
        from psycopg.conninfo import conninfo_to_dict

        try:
            conninfo_to_dict(dsn)
            return
        except (Error, ValueError):  # ValueError: text UTF-8 cannot encode
            pass
        # An empty string is valid libpq (all from PG* variables), but as a
        # buffer it is an unset setting far more often than a choice.
    if "://" in dsn or "=" in dsn:
        shown = repr(mask_dsn(dsn))
    else:
        shown = f"a string of {len(dsn)} characters (not shown: it may be a password)"
    raise StoreError(f"{_FORMS}; got {shown}")
