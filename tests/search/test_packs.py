"""Site packs against a tiny in-memory reference: random builds and updates
(duplicates, older versions, tombstones) must leave a pack whose searches
find exactly the reference's pages; plus ranking, snippets, pack info and
the reader's threads."""

from __future__ import annotations

import re
import sqlite3
import tempfile
import unicodedata
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from web_index.errors import SearchError
from web_index.search import (
    PackReader,
    PageText,
    build_pack,
    read_pack_info,
    search_pack,
    update_pack,
)

T0 = datetime(2024, 5, 1, tzinfo=UTC)
# Made-up words, so that a search hits only what the test wrote; some with
# diacritics, which the pack folds away ("cafe" finds "Café", "pho" "Phở", whose
# "ở" has two).
VOCAB = ["zorp", "quix", "blen", "Café", "naïve", "Mañana", "über", "frotz", "Phở", "à"]
URLS = [f"https://site.example/p{i}" for i in range(8)]


def fold(word: str) -> str:
    decomposed = unicodedata.normalize("NFD", word.lower())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


TOKENS = sorted({fold(w) for w in VOCAB})


def words() -> st.SearchStrategy[str]:
    # Separated by spaces and punctuation, which the tokenizer splits on too.
    return st.lists(st.sampled_from(VOCAB), max_size=6).flatmap(
        lambda ws: st.sampled_from([" ", ", ", " - ", "; "]).map(lambda sep: sep.join(ws))
    )


page_texts = st.builds(
    PageText,
    url=st.sampled_from(URLS),
    title=words(),
    text=words(),
    lang=st.sampled_from([None, "en", "fr"]),
    # Few distinct times: ties and older versions are common.
    fetched=st.integers(0, 4).map(lambda h: T0 + timedelta(hours=h)),
    deleted=st.sampled_from([False, False, False, True]),
)
batches = st.lists(page_texts, max_size=12)


def winners(batch: list[PageText]) -> dict[str, PageText]:
    """Per url the latest text; of equally recent ones the later."""
    out: dict[str, PageText] = {}
    for t in batch:
        if t.url not in out or t.fetched >= out[t.url].fetched:
            out[t.url] = t
    return out


def all_hits(path: Path, query: str, limit: int) -> tuple[list[str], set[int]]:
    urls: list[str] = []
    totals: set[int] = set()
    offset = 0
    while True:
        page = search_pack(path, query, limit=limit, offset=offset)
        totals.add(page.total)
        assert len(page.hits) == max(0, min(limit, page.total - offset))
        urls += [h.url for h in page.hits]
        scores = [h.score for h in page.hits]
        assert scores == sorted(scores, reverse=True)
        offset += limit
        if offset >= page.total:
            return urls, totals


class PackModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="packs-"))
        self.builds = 0
        self.reference: dict[str, PageText] = {}
        self.watermark = ""
        self.reader: PackReader | None = None  # of the current file, kept across searches

    def reopen(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.reader = PackReader(self.path, cached_answers=4)

    @initialize(batch=batches)
    def first_build(self, batch: list[PageText]) -> None:
        self.build(batch)

    @rule(batch=batches)
    def build(self, batch: list[PageText]) -> None:
        self.builds += 1
        self.path = self.dir / f"site-{self.builds}.db"
        self.watermark = f"part-{self.builds}"
        info = build_pack(self.path, "site.example", iter(batch), watermark=self.watermark)
        self.reference = {u: t for u, t in winners(batch).items() if not t.deleted}
        assert info.pages == len(self.reference)
        self.reopen()

    @rule(batch=batches, watermark=st.sampled_from(["", "part-x", "part-y"]))
    def update(self, batch: list[PageText], watermark: str) -> None:
        update_pack(self.path, iter(batch), watermark=watermark)
        self.watermark = watermark
        for url, text in winners(batch).items():
            stored = self.reference.get(url)
            if stored is not None and text.fetched < stored.fetched:
                continue  # older than the stored page: ignored
            if text.deleted:
                self.reference.pop(url, None)
            else:
                self.reference[url] = text
        self.reopen()

    @invariant()
    def info_matches(self) -> None:
        info = read_pack_info(self.path)
        assert (info.pages, info.watermark, info.site, info.format) == (
            len(self.reference),
            self.watermark,
            "site.example",
            1,
        )

    @invariant()
    def every_token_finds_exactly_its_pages(self) -> None:
        for token in TOKENS:
            expected = {
                url
                for url, t in self.reference.items()
                if token in {fold(w) for w in re.findall(r"\w+", t.title + " " + t.text)}
            }
            urls, totals = all_hits(self.path, token, limit=3)
            assert len(urls) == len(set(urls)), f"{token}: a url on two pages of results"
            assert set(urls) == expected, token
            assert totals == {len(expected)}, token

    @invariant()
    def a_kept_reader_answers_as_a_fresh_one(self) -> None:
        assert self.reader is not None
        for token in [*TOKENS, *TOKENS]:  # the second round mostly from kept answers
            assert self.reader.search(token, limit=3) == search_pack(self.path, token, limit=3)

    @invariant()
    def stored_text_is_the_winners(self) -> None:
        # Which version of a page is kept, not only whether it is found.
        con = sqlite3.connect(self.path.as_uri() + "?mode=ro", uri=True)
        try:
            rows = dict(con.execute("SELECT url, title || '|' || body || '|' || fetched FROM pages"))
        finally:
            con.close()
        expected = {
            u: f"{t.title}|{t.text}|{t.fetched.isoformat(timespec='microseconds')[:-6]}Z"
            for u, t in self.reference.items()
        }
        assert rows == expected

    def teardown(self) -> None:
        if self.reader is not None:
            self.reader.close()
        for f in self.dir.iterdir():
            f.unlink()
        self.dir.rmdir()


PackModel.TestCase.settings = settings(max_examples=60, stateful_step_count=8, deadline=None)
TestPackModel = PackModel.TestCase


def _page(url: str, title: str, text: str, **kw: object) -> PageText:
    return PageText(url=url, title=title, text=text, fetched=kw.pop("fetched", T0), **kw)  # type: ignore[arg-type]


FILLER = ["alpha", "beta", "gamma", "delta", "epsilon", "eta", "theta", "iota", "kappa", "lambda"]


def test_a_title_match_ranks_above_a_body_match(tmp_path: Path) -> None:
    # The body page even has the word twice: with equal weights it would win.
    body = " ".join(FILLER * 2)
    texts = [
        _page("https://s/body", "mu nu xi omicron", body + " zeta zeta"),
        _page("https://s/title", "zeta nu xi omicron", body + " pi rho"),
    ] + [_page(f"https://s/f{i}", "mu nu xi omicron", body) for i in range(10)]
    build_pack(tmp_path / "p.db", "s", texts, watermark="")
    hits = search_pack(tmp_path / "p.db", "zeta").hits
    assert [h.url for h in hits] == ["https://s/title", "https://s/body"]
    assert hits[0].score > hits[1].score > 0


def test_snippets_mark_matches_and_escape_the_text(tmp_path: Path) -> None:
    text = "before <b>bold</b> & café \x02sneaky\x03 " + " ".join(FILLER * 5)
    build_pack(tmp_path / "p.db", "s", [_page("https://s/a", "T", text)], watermark="")
    (hit,) = search_pack(tmp_path / "p.db", "cafe").hits
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; <mark>café</mark> sneaky" in hit.snippet
    assert hit.snippet.endswith("…")
    assert hit.snippet.count("<mark>") == hit.snippet.count("</mark>") == 1


def test_prefix_phrase_and_or_search(tmp_path: Path) -> None:
    texts = [
        _page("https://s/1", "one", "prefixes are fine and foo bar"),
        _page("https://s/2", "two", "bar foo in reverse"),
        _page("https://s/3", "three", "title x only in the body"),
    ]
    path = tmp_path / "p.db"
    build_pack(path, "s", texts, watermark="")

    def urls(q: str) -> set[str]:
        return {h.url[-1] for h in search_pack(path, q).hits}

    assert urls("pref*") == {"1"}
    assert urls("pref") == set()
    assert urls("foo-bar") == urls('"foo bar"') == {"1"}
    assert urls("foo bar") == {"1", "2"}
    assert urls("reverse OR prefixes") == {"1", "2"}
    assert urls("title:x") == {"3"}  # the phrase "title x", not a column filter
    assert urls("one") == {"1"}  # titles are searched too


def test_limit_and_offset_are_checked(tmp_path: Path) -> None:
    build_pack(tmp_path / "p.db", "s", [_page("https://s/1", "a", "b")], watermark="")
    for kw, name in [({"limit": 0}, "limit"), ({"limit": 1001}, "limit"), ({"offset": -1}, "offset")]:
        with pytest.raises(ValueError, match=name):
            search_pack(tmp_path / "p.db", "b", **kw)  # type: ignore[arg-type]
    assert search_pack(tmp_path / "p.db", "b", limit=1000, offset=5).hits == ()


def test_build_refuses_an_existing_file_and_leaves_no_work_files(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    path.write_bytes(b"")
    with pytest.raises(FileExistsError):
        build_pack(path, "s", [], watermark="")
    path.unlink()
    info = build_pack(path, "s", [], watermark="w")
    assert (info.pages, info.watermark) == (0, "w")
    assert info.built.tzinfo is not None
    update_pack(path, [_page("https://s/1", "a", "b")], watermark="w2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.db"]


def test_a_failed_build_leaves_nothing(tmp_path: Path) -> None:
    def texts() -> Iterator[PageText]:
        yield _page("https://s/1", "a", "b")
        raise RuntimeError("input broke")

    with pytest.raises(RuntimeError):
        build_pack(tmp_path / "p.db", "s", texts(), watermark="")
    assert list(tmp_path.iterdir()) == []


def test_not_a_pack_is_a_search_error_naming_the_file(tmp_path: Path) -> None:
    junk, empty, plain = tmp_path / "junk.db", tmp_path / "empty.db", tmp_path / "plain.db"
    junk.write_bytes(b"not sqlite at all" * 1000)
    empty.write_bytes(b"")
    con = sqlite3.connect(plain)
    con.execute("CREATE TABLE pack_meta(key, value)")
    con.commit()
    con.close()
    for path in (junk, empty, plain):
        with pytest.raises(SearchError, match=str(path)):
            read_pack_info(path)
        with pytest.raises(SearchError, match=str(path)):
            search_pack(path, "x")
        with pytest.raises(SearchError, match=str(path)):
            update_pack(path, [], watermark="")
    with pytest.raises(FileNotFoundError):
        read_pack_info(tmp_path / "missing.db")


def test_a_pack_of_another_format_or_application_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    build_pack(path, "s", [_page("https://s/1", "a", "b")], watermark="")
    for change, problem in [
        ("UPDATE pack_meta SET value = 2 WHERE key = 'format'", "format 2"),
        ("PRAGMA application_id = 0", "not a search pack"),
    ]:
        copy = tmp_path / "copy.db"
        copy.write_bytes(path.read_bytes())
        con = sqlite3.connect(copy)
        con.execute(change)
        con.commit()
        con.close()
        with pytest.raises(SearchError, match=problem):
            read_pack_info(copy)


def test_an_update_never_writes_into_the_old_file(tmp_path: Path) -> None:
    # A searcher may have the pack open (immutable=1): it must keep its bytes.
    path = tmp_path / "p.db"
    build_pack(path, "s", [_page(f"https://s/{i}", "t", f"old {i}") for i in range(100)], watermark="")
    with path.open("rb") as old:
        before = old.read()
        update_pack(path, [_page("https://s/new", "t", "new words")], watermark="2")
        old.seek(0)
        assert old.read() == before
    assert read_pack_info(path).pages == 101


def test_odd_file_names_are_safe_in_the_uri(tmp_path: Path) -> None:
    path = tmp_path / "a b?c#d%25e&mode=rw.db"
    build_pack(path, "s", [_page("https://s/1", "a", "needle")], watermark="")
    assert search_pack(path, "needle").total == 1


def test_fetched_must_be_timezone_aware() -> None:
    with pytest.raises(ValueError, match="timezone"):
        PageText(url="u", title="", text="", fetched=datetime(2024, 1, 1))


def test_readers_of_the_old_pack_keep_it_whole_across_an_update(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    build_pack(path, "s", [_page(f"https://s/{i}", "t", "old words") for i in range(50)], watermark="")
    with PackReader(path) as reader:
        assert reader.search("old").total == 50
        new = [_page(f"https://s/{i}", "t", "new words", fetched=T0 + timedelta(1)) for i in range(50)]
        update_pack(path, new, watermark="2")
        assert reader.search("old").total == 50  # the replaced file, still open
    assert search_pack(path, "old").total == 0
    assert search_pack(path, "new").total == 50


def test_one_reader_serves_many_threads(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    texts = [_page(f"https://s/{i}", f"t{i}", " ".join(FILLER[: 1 + i % 10])) for i in range(200)]
    build_pack(path, "s", texts, watermark="")
    queries = FILLER * 20
    with PackReader(path, cached_answers=0) as reader:  # every search runs its SQL
        expected = {q: reader.search(q, limit=5) for q in FILLER}
        with ThreadPoolExecutor(4) as pool:
            pages = list(pool.map(lambda q: reader.search(q, limit=5), queries))
        assert all(p == expected[q] for q, p in zip(queries, pages, strict=True))
        assert reader.info.pages == 200
    with pytest.raises(SearchError, match="closed"):
        reader.search("alpha")


def test_a_reader_keeps_its_answers(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    texts = [_page(f"https://s/{i}", f"t{i}", " ".join(FILLER[: 1 + i % 10])) for i in range(50)]
    build_pack(path, "s", texts, watermark="")
    with PackReader(path, cached_answers=2) as reader:
        first = reader.search("beta", limit=3)
        assert reader.search("beta", limit=3) is first
        assert reader.search("beta", limit=3, offset=3) != first
        assert reader.search("gamma") != first  # "beta" limit=3 is now the oldest kept: gone
        assert reader.search("beta", limit=3) == first == search_pack(path, "beta", limit=3)
        info = reader.cache_info()
        assert (info.hits, info.misses, info.currsize) == (1, 4, 2)
        for _ in range(2):  # a refused query is refused every time, never kept
            with pytest.raises(SearchError, match="empty query"):
                reader.search("-- !!")
    assert reader.cache_info().currsize == 0
