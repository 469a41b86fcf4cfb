"""collections.yaml: the seed's full and shorthand forms read into the same
declarations, and every mistake named by its place in the file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from web_index import WebIndex
from web_index.archive._collection_config import (
    DEFAULT_INDEX_TIMEOUT,
    LoaderSpec,
    SourceSpec,
    load_collections,
    parse_collections,
)
from web_index.errors import InvalidRecordError


@pytest.fixture
def base(tmp_path: Path) -> Path:
    WebIndex(tmp_path / "store").close()
    (tmp_path / "warcs").mkdir()
    (tmp_path / "warcs" / "a.cdxj").write_text("")
    (tmp_path / "paths.txt").write_text("a.warc.gz /x/a.warc.gz\n")
    return tmp_path


def _one(data: Any, base: Path) -> Any:
    return parse_collections({"collections": data}, base=base)


def test_shorthand_and_full_forms_are_the_same(base: Path) -> None:
    pairs = [
        (
            "memento+http://arch.test/wayback/",
            {
                "index": {
                    "type": "memento",
                    "timegate_url": "http://arch.test/wayback/timegate/{url}",
                    "timemap_url": "http://arch.test/wayback/timemap/link/{url}",
                    "replay_url": "http://arch.test/wayback/{timestamp}id_/{url}",
                }
            },
        ),
        (
            "cdx+http://cdx.test/all-cdx",
            {
                "index": {
                    "type": "cdx",
                    "api_url": "http://cdx.test/all-cdx?url={url}",
                    "replay_url": "http://cdx.test/all/{timestamp}id_/{url}",
                }
            },
        ),
        (
            "cdx+http://web.test/cdx /web/",
            {
                "index": {
                    "type": "cdx",
                    "api_url": "http://web.test/cdx?url={url}",
                    "replay_url": "http://web.test/web/{timestamp}id_/{url}",
                }
            },
        ),
        ("cdx+http://wi.test/store/cdx", {"index": "cdx+http://wi.test/store/cdx http://wi.test/store"}),
        ("$live", {"index": {"type": "live"}}),
        ("store", {"index": {"type": "web-index", "path": "store"}}),
        ("warcs", {"index": {"type": "file", "path": "file://warcs"}}),
    ]
    for short, full in pairs:
        assert _one({"a": short}, base) == _one({"a": full}, base), short


def test_store_or_cdxj_decided_by_what_the_folder_holds(base: Path) -> None:
    got = _one({"s": "store", "c": "warcs", "f": "warcs/a.cdxj", "r": "s3://bucket/prefix"}, base)
    assert got["s"].sources == [SourceSpec("s", "web-index", str(base / "store"))]
    assert got["c"].sources == [SourceSpec("c", "file", str(base / "warcs"))]
    assert got["f"].sources == [SourceSpec("f", "file", str(base / "warcs" / "a.cdxj"))]
    assert got["r"].sources == [SourceSpec("r", "web-index", "s3://bucket/prefix")]


def test_group_sequence_timeouts_and_loaders(base: Path) -> None:
    got = _one(
        {
            "many": {
                "index_group": {"a": "cdx+http://a.test/cdx", "b": "memento+http://b.test/", "loc": "warcs"},
                "index_timeout": 2.5,
                "resource": [
                    "$live",
                    "warcs",
                    "paths.txt",
                    "warc-prefix+http://w.test/warcs/",
                    "redis://r/0/k",
                ],
            },
            "seq": {"sequence": [{"index": "store"}, {"index": "$live"}]},
        },
        base,
    )
    (step,) = got["many"].steps
    assert [s.name for s in step.sources] == ["a", "b", "loc"] and step.timeout == 2.5
    assert step.loaders == (
        LoaderSpec("live"),
        LoaderSpec("warc-prefix", str(base / "warcs") + "/"),
        LoaderSpec("warc-index", str(base / "paths.txt")),
        LoaderSpec("warc-prefix", "http://w.test/warcs/"),
        LoaderSpec("warc-index", "redis://r/0/k"),
    )
    first, second = got["seq"].steps
    assert first.sources[0].kind == "web-index" and second.sources[0].kind == "live"
    assert first.timeout == DEFAULT_INDEX_TIMEOUT and first.loaders == (LoaderSpec("live"),)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"api": "$live"}, "collections.api"),
        ({"a b": "$live"}, "collections.a b"),
        ({"x": "missing-folder"}, "collections.x"),
        ({"x": "cdx+ftp://a.test/cdx"}, "collections.x"),
        ({"x": "cdx+http://a.test/query"}, "collections.x"),
        ({"x": {"index": "$live", "index_timeout": 0}}, "collections.x.index_timeout"),
        ({"x": {"index": "$live", "index_timeout": "5"}}, "collections.x.index_timeout"),
        ({"x": {"index": "$live", "oops": 1}}, "collections.x.oops"),
        ({"x": {"index": "$live", "index_group": {}}}, "collections.x"),
        ({"x": {"index": {"type": "cdx", "api_url": "http://a.test/cdx"}}}, "collections.x.index.replay_url"),
        ({"x": {"index": {"type": "tape"}}}, "collections.x.index.type"),
        (
            {
                "x": {
                    "index": {
                        "type": "cdx",
                        "api_url": "http://a.test/cdx",
                        "replay_url": "http://a.test/{url}",
                    }
                }
            },
            "collections.x.index.api_url",
        ),
        ({"x": {"index_group": {"a": "$live", "b": 5}}}, "collections.x.index_group.b"),
        ({"x": {"sequence": []}}, "collections.x.sequence"),
        ({"x": {"sequence": [{"index": "$live"}, "nowhere"]}}, "collections.x.sequence[1]"),
        ({"x": {"sequence": [{"index": "$live"}], "index": "$live"}}, "collections.x.index"),
        ({"x": {"index": "$live", "resource": ["gopher://w/"]}}, "collections.x.resource"),
        ({"x": {"index": "$live", "resource": [7]}}, "collections.x.resource"),
        ({"x": {"index": {"type": "file", "path": "s3://b/p"}}}, "collections.x.index"),
        ({"x": "store/.."}, "collections.x"),  # a folder, but neither a store nor CDXJ
    ],
)
def test_mistakes_are_named_by_their_place(base: Path, body: Any, where: str) -> None:
    with pytest.raises(InvalidRecordError) as caught:
        _one(body, base)
    assert caught.value.field == where


def test_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "collections.yaml"
    path.write_text("collections:\n  a: $live\n  b: [unclosed\n")
    with pytest.raises(InvalidRecordError) as caught:
        load_collections(path)
    assert caught.value.field.startswith(f"{path}:")
    path.write_text("collections:\n  a: cdx+nowhere\n")
    with pytest.raises(InvalidRecordError) as caught:
        load_collections(path)
    assert caught.value.field == f"{path}: collections.a"
    with pytest.raises(InvalidRecordError, match="cannot read"):
        load_collections(tmp_path / "missing.yaml")
    path.write_text("collections: {}\n")
    with pytest.raises(InvalidRecordError, match="no collections"):
        load_collections(path)
