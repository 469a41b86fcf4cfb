"""``WebIndex(..., buffer=...)`` takes any libpq connection string, and no error ever
shows the password in it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.factories import attempt
from tests.servers import Postgres, free_port
from web_index import WebIndex
from web_index.errors import StoreError

SECRET = "s3cr3t-Pa55"


@pytest.mark.parametrize(
    "form",
    [
        "host=127.0.0.1 port={port} user=crawler password={secret} connect_timeout=2",
        "host=127.0.0.1 port={port} password='{secret} with spaces' connect_timeout=2",
        "postgresql://crawler:{secret}@127.0.0.1:{port}/webindex?connect_timeout=2",
        "postgres://crawler:{secret}@127.0.0.1:{port}/webindex",
        "postgresql://127.0.0.1:{port}/webindex?password={secret}",
    ],
)
def test_connection_strings_are_passed_on_and_their_password_never_shown(tmp_path: Path, form: str) -> None:
    dsn = form.format(port=free_port(), secret=SECRET)  # nothing listens there
    with pytest.raises(StoreError) as info:
        WebIndex(tmp_path / "s", buffer=dsn)
    message = str(info.value)
    assert "cannot connect" in message  # accepted and tried, not refused as a form
    assert SECRET not in message


@pytest.mark.parametrize(
    "buffer",
    [
        "mysql://crawler:{secret}@db.internal/webindex",
        "host=db password={secret} oops",
        "host=db password='{secret} unterminated",
        "{secret}",
        "db.internal:5432 {secret}",
        "",
        "   ",
    ],
)
def test_other_strings_are_refused_without_echoing_a_password(tmp_path: Path, buffer: str) -> None:
    with pytest.raises(StoreError) as info:
        WebIndex(tmp_path / "s", buffer=buffer.format(secret=SECRET))
    message = str(info.value)
    assert SECRET not in message
    assert "postgresql://" in message and "key=value" in message  # says what is accepted


def test_a_key_value_connection_string_works(postgres: Postgres, tmp_path: Path) -> None:
    name = postgres.new_database().rsplit("/", 1)[1]
    dsn = f"host=127.0.0.1 port={postgres.port} dbname={name} user=postgres password={SECRET}"
    with WebIndex(tmp_path / "s", buffer=dsn) as index:
        key = index.insert(*attempt("https://a.example.com/"))
        assert index.query([key])[0] is not None
        assert SECRET not in repr(index._store.buffer)
