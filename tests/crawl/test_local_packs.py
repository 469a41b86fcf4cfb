"""Local copies of published packs: the newest is loaded, an older one swapped out while
searches on it finish, and copies of older generations left by earlier processes removed."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.factories import publish_pack
from web_index.crawl import LocalPacks, SiteFiles
from web_index.errors import SiteNotFoundError
from web_index.storage import LocalBackend


def test_older_copies_go_and_a_swap_fails_no_search(tmp_path: Path) -> None:
    files = SiteFiles(LocalBackend(tmp_path / "store"))
    folder = tmp_path / "packs"
    publish_pack(files, tmp_path, "a.test", 1, {"one": "alpha"})
    first = LocalPacks(files, folder)
    assert first.load("a.test") == 1
    first.close()  # an earlier process, gone: its copy stays on disk
    assert sorted(p.name for p in folder.iterdir()) == ["a.test.00000001.sqlite"]

    publish_pack(files, tmp_path, "a.test", 2, {"one": "alpha", "two": "beta"})
    packs = LocalPacks(files, folder)
    assert packs.ensure("a.test") == 2
    assert sorted(p.name for p in folder.iterdir()) == ["a.test.00000002.sqlite"]
    assert packs.ensure("a.test", max_age=60) == 2  # asks the store again only after max_age

    failures: list[BaseException] = []
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            try:
                assert packs.search("a.test", "alpha").total == 1
            except BaseException as exc:
                failures.append(exc)

    threads = [threading.Thread(target=search) for _ in range(4)]
    for t in threads:
        t.start()
    for generation in range(3, 8):
        publish_pack(files, tmp_path, "a.test", generation, {"one": "alpha", f"n{generation}": "gamma"})
        assert packs.load("a.test") == generation
    stop.set()
    for t in threads:
        t.join()
    assert failures == []
    assert [p.name for p in folder.iterdir()] == ["a.test.00000007.sqlite"]
    assert packs.used_bytes() == (folder / "a.test.00000007.sqlite").stat().st_size
    with pytest.raises(SiteNotFoundError, match=r"no search database is published for 'b\.test'"):
        packs.load("b.test")
    packs.close()
