from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import Redis
from web_index import WebIndex
from web_index.fetch import AddressPolicy, FetchConfig


@pytest.fixture
def crawl_config() -> FetchConfig:
    """Fetch settings for crawling the loopback test sites."""
    return FetchConfig(address_policy=AddressPolicy(allow_loopback=True), per_domain=8, concurrency=16)


@pytest.fixture(params=["sqlite", "redis"])
def broker_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each broker in turn: a SQLite file, then a real redis-server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'queue.sqlite'}"
    server: Redis = request.getfixturevalue("redis_server")
    return server.url()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WebIndex]:
    with WebIndex(tmp_path / "store") as index:
        yield index
