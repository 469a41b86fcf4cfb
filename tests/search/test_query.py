"""Free text to FTS5: nothing a user types is FTS5 syntax, and no input makes
a search raise anything but SearchError for a query with nothing to search."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.search.test_packs import T0
from web_index.errors import SearchError
from web_index.search import PageText, build_pack, fts_query, search_pack
from web_index.search._query import MAX_QUERY_CHARS, MAX_QUERY_TERMS

# The only reasons a query may be refused.
REFUSALS = ("empty query", "query too long", "query has")


@pytest.fixture(scope="module")
def pack(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("query") / "p.db"
    texts = [
        PageText(
            url="https://s/1", title="NEAR and OR", text="a b title x foo bar café phở * ^ - :", fetched=T0
        ),
        PageText(url="https://s/2", title="other", text="phrase a phrase prefix words", fetched=T0),
    ]
    build_pack(path, "s", texts, watermark="")
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("foo", '"foo"'),
        ("foo bar", '"foo" AND "bar"'),
        ("foo-bar", '"foo-bar"'),
        ('"a phrase"', '"a phrase"'),
        ('"a phr"*', '"a phr" *'),
        ("pre*", '"pre" *'),
        ("pre**", '"pre" *'),
        ("a OR b", '("a" OR "b")'),
        ("a b OR c", '"a" AND ("b" OR "c")'),
        ("a OR b OR c d", '("a" OR "b" OR "c") AND "d"'),
        ("a or b", '"a" AND "or" AND "b"'),
        ("OR", '"OR"'),
        ("a OR", '"a" AND "OR"'),
        ("OR a", '"OR" AND "a"'),
        ("a OR OR b", '"a" AND ("OR" OR "b")'),
        ("a OR - b", '("a" OR "b")'),
        ("NEAR(a b)", '"NEAR(a" AND "b)"'),
        ("title:x", '"title:x"'),
        ('"unbalanced', '"unbalanced"'),
        ('"a b" "c', '"a b" AND "c"'),
        ("a AND NOT b", '"a" AND "AND" AND "NOT" AND "b"'),
        ("^x +y -z", '"^x" AND "+y" AND "-z"'),
        ("nul\x00here", '"nul" AND "here"'),
        ("café", '"café"'),
    ],
)
def test_translation(text: str, expected: str) -> None:
    assert fts_query(text) == expected


@pytest.mark.parametrize(
    "text", ["", "   ", "!!! ---", '""', "* ** *", "- : ( )", "\x00", "\U0001f600", "\u19b0"]
)
def test_nothing_to_search_is_an_empty_query(text: str) -> None:
    with pytest.raises(SearchError, match="empty query"):
        fts_query(text)


def test_size_limits() -> None:
    with pytest.raises(SearchError, match="too long"):
        fts_query("a" * (MAX_QUERY_CHARS + 1))
    with pytest.raises(SearchError, match="terms"):
        fts_query(" ".join(["w"] * (MAX_QUERY_TERMS + 1)))
    assert fts_query(" ".join(["w"] * MAX_QUERY_TERMS)).count('"w"') == MAX_QUERY_TERMS


@pytest.mark.parametrize(
    ("text", "urls"),
    [
        ("NEAR(a b)", set()),  # "near a" is not in the pack: NEAR is a word here
        ("near", {"1"}),
        ("title:x", {"1"}),
        ("foo-bar", {"1"}),
        ("bar-foo", set()),
        ('"a phrase"', {"2"}),
        ("pref*", {"2"}),
        ("cafe", {"1"}),
        ("CAFÉ", {"1"}),
        ("pho", {"1"}),  # two diacritics on one letter
        ("phrase OR foo", {"1", "2"}),
        ("a OR", {"1"}),  # "or" as a word: in the title of 1
        ('"unbalanced', set()),
        ("* ^ foo -", {"1"}),
    ],
)
def test_queries_search_as_text(pack: Path, text: str, urls: set[str]) -> None:
    assert {h.url[-1] for h in search_pack(pack, text).hits} == urls


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=60) | st.text(st.sampled_from('ab "*-:()^+OR NEAR\x00é'), max_size=30))
def test_any_text_searches_or_is_refused_as_empty(pack: Path, text: str) -> None:
    try:
        search_pack(pack, text, limit=5)
    except SearchError as e:
        assert str(e).startswith(REFUSALS), e


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200))
def test_every_translation_is_valid_fts5(text: str) -> None:
    # Straight against FTS5, so that no wrapping can hide an sqlite3 error.
    con = sqlite3.connect(":memory:")
    con.execute("CREATE VIRTUAL TABLE t USING fts5(a, tokenize='unicode61 remove_diacritics 2')")
    try:
        expression = fts_query(text)
    except SearchError:
        return
    con.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expression,)).fetchone()
