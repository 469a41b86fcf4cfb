"""What a user types into a search box, turned into a safe FTS5 expression.

FTS5's own query syntax (``NEAR``, ``col:``, ``-``, ``^``, parentheses,
unbalanced quotes) raises errors on ordinary text such as ``C++`` or
``e-mail``, and lets a query reach columns it should not. So nothing the user
types is passed through as syntax: every term goes into a double-quoted FTS5
string, where only ``""`` means anything, and the few operators we accept are
recognised here and written out explicitly:

- bare words are ANDed; punctuation inside a word stays text, so
  ``foo-bar`` is the phrase "foo bar" (FTS5 tokenises inside the quotes);
- ``"two words"`` is a phrase;
- a trailing ``*`` makes a prefix search (``pre*``, ``"a phr"*``);
- an uppercase ``OR`` between two terms is an OR. It binds tighter than the
  implied AND, as in web search engines (``a b OR c`` is ``a AND (b OR c)``),
  and the output is parenthesised so that FTS5's own precedence (OR lowest)
  never applies.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from web_index.errors import SearchQueryError

__all__ = ["MAX_QUERY_CHARS", "MAX_QUERY_TERMS", "fts_query"]

# Bounds on the work one query can ask for: every term is a posting-list walk.
MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 64

_LEXEME = re.compile(r'"(?P<phrase>[^"]*)"(?P<pstar>\*?)|(?P<word>[^\s"]+)')
# NUL ends an FTS5 string early ("unterminated string"); lone surrogates cannot
# be encoded to UTF-8 for sqlite3 at all. Both are treated as spaces.
_UNSAFE = re.compile("[\x00\ud800-\udfff]")
# Letters in Python's Unicode tables that the unicode61 tokenizer (tables of an
# older Unicode) splits on: New Tai Lue vowels and two Vedic signs, once marks.
# Without this, a term of only these would be an empty FTS5 phrase, and
# ``x AND ""`` matches nothing.
_SQLITE_SEPARATORS = frozenset([*map(chr, range(0x19B0, 0x19C1)), "\u19c8", "\u19c9", "\u1cf2", "\u1cf3"])


@dataclass(frozen=True, slots=True)
class _Term:
    text: str
    prefix: bool

    def fts(self) -> str:
        quoted = '"' + self.text.replace('"', '""') + '"'
        return quoted + " *" if self.prefix else quoted


def _is_token_char(ch: str) -> bool:
    # unicode61's default token classes are letters, numbers and private use
    # ("L* N* Co"); everything else separates tokens.
    category = unicodedata.category(ch)
    return (category[0] in "LN" or category == "Co") and ch not in _SQLITE_SEPARATORS


def _has_token(text: str) -> bool:
    return any(_is_token_char(ch) for ch in text)


def _lex(text: str) -> list[_Term | None]:
    """Terms in order, ``None`` standing for each uppercase ``OR`` word.

    An unbalanced ``"`` matches neither alternative of ``_LEXEME`` and so
    is skipped like any other separator.
    """
    items: list[_Term | None] = []
    for m in _LEXEME.finditer(text):
        word = m.group("word")
        if word is None:
            term = _Term(m.group("phrase"), prefix=bool(m.group("pstar")))
        elif word == "OR":
            items.append(None)
            continue
        else:
            stem = word.rstrip("*")
            term = _Term(stem, prefix=len(stem) < len(word))
        if _has_token(term.text):  # a term of punctuation only would be an empty phrase
            items.append(term)
    return items


def fts_query(text: str) -> str:
    """The FTS5 MATCH expression for the free text ``text``.

    Raises :class:`SearchError` when ``text`` has no word to search for, is
    longer than :data:`MAX_QUERY_CHARS` or has more than
    :data:`MAX_QUERY_TERMS` terms. Never returns an expression FTS5 rejects.
    """
    if len(text) > MAX_QUERY_CHARS:
        raise SearchQueryError(f"query too long: {len(text)} characters, at most {MAX_QUERY_CHARS}")
    items = _lex(_UNSAFE.sub(" ", text))
    groups: list[list[_Term]] = []
    joined = False  # the last item was an OR between two terms
    after_term = False
    for i, item in enumerate(items):
        if item is None:
            if after_term and i + 1 < len(items) and items[i + 1] is not None:
                joined, after_term = True, False
                continue
            item = _Term("OR", prefix=False)  # not between two terms: the word "or"
        if joined:
            groups[-1].append(item)
        else:
            groups.append([item])
        joined, after_term = False, True
    terms = sum(len(g) for g in groups)
    if terms == 0:
        raise SearchQueryError(f"empty query: {text!r} has no word to search for")
    if terms > MAX_QUERY_TERMS:
        raise SearchQueryError(f"query has {terms} terms, at most {MAX_QUERY_TERMS}")
    return " AND ".join(
        group[0].fts() if len(group) == 1 else "(" + " OR ".join(t.fts() for t in group) + ")"
        for group in groups
    )
