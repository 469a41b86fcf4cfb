from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from web_index import WebIndex
from web_index.fetch import AddressPolicy, FetchConfig


@pytest.fixture
def crawl_config() -> FetchConfig:
    """Fetch settings for crawling the loopback test sites."""
    return FetchConfig(address_policy=AddressPolicy(allow_loopback=True), per_domain=8, concurrency=16)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WebIndex]:
    with WebIndex(tmp_path / "store") as index:
        yield index
