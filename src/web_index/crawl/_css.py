"""The URLs a stylesheet (or a ``style`` attribute) names, found and replaced as a
browser's CSS tokenizer reads them: ``url()`` quoted or not and however escaped
(``u\\72l(…)`` is ``url(…)`` to a browser), the strings of ``image-set()``, the
string after ``@import``; not ``@namespace``'s URL, which loads nothing, nor
anything in a comment. A pattern over the text misses what a tokenizer reads
otherwise: a crawl would not fetch such an image, and a replay would leave it
pointing at the live web.

Written here, not taken from tinycss2 (a whole CSS tokenizer in Python: ~1.3 s a
MB, where a crawl reads every stylesheet it fetches and a replay rewrites every one
it serves): one regular expression finds only the tokens that can carry a URL
(comments, strings, function names, ``url(`` tokens, ``@`` keywords, brackets).
The tests hold it to tinycss2's reading of random stylesheets.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["css_urls", "replace_css_urls"]

_WS = " \t\n\r\f"
_ESCAPE = r"\\(?:[0-9a-fA-F]{1,6}(?:\r\n|[ \t\n\r\f])?|[^\n\r\f0-9a-fA-F])"
_NAME_START = rf"(?:[a-zA-Z_\x80-\U0010ffff]|{_ESCAPE})"
_NAME_CHAR = rf"(?:[-\w\x80-\U0010ffff]|{_ESCAPE})"
_STRING_CHAR = r"(?:[^{q}\\\n\r\f]|\\(?:\r\n|[\s\S]))"
_TOKENS = re.compile(
    r"(?P<comment>/\*.*?(?:\*/|\Z))"
    rf"|\"(?P<dq>{_STRING_CHAR.format(q=chr(34))}*)(?P<dq_end>\")?"
    rf"|'(?P<sq>{_STRING_CHAR.format(q=chr(39))}*)(?P<sq_end>')?"
    rf"|(?P<function>-?-?{_NAME_START}{_NAME_CHAR}*)\("
    rf"|@(?P<at>-?-?{_NAME_START}{_NAME_CHAR}*)"
    r"|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<semicolon>;)",
    re.DOTALL,
)
# An unquoted url( token: its value, then white space and ")" (or the end). Anything else in
# it (a quote, a "(", white space inside, a bad escape) makes a bad url, which loads nothing.
_URL_TOKEN = re.compile(
    rf"[{_WS}]*((?:[^\"'()\\{_WS}\x00-\x08\x0b\x0e-\x1f\x7f]|{_ESCAPE})*)[{_WS}]*(?:\)|\Z)"
)
_BAD_URL_REST = re.compile(r"(?:[^)\\]|\\[\s\S])*\)?")
_ESCAPES = re.compile(_ESCAPE)
_URL_FUNCTIONS = frozenset({"url", "src"})
# Whose bare strings are images (image-set("a.png" 1x)); a nested type("image/avif") is not.
_IMAGE_SETS = frozenset({"image-set", "-webkit-image-set"})


def css_urls(css: str) -> list[str]:
    """Every URL ``css`` names, in its order (repeats kept)."""
    return [url for _, _, url, _ in _urls(css)]


def replace_css_urls(css: str, replace: Callable[[str], str]) -> str:
    """``css`` with every URL it names replaced by ``replace(url)`` (written as a quoted
    string, in ``url()`` where it was an unquoted ``url()``), the rest as it was."""
    out: list[str] = []
    at = 0
    for start, end, url, whole in _urls(css):
        new = replace(url)
        if new == url:
            continue  # written as it was
        out += [css[at:start], f'url("{_quoted(new)}")' if whole else f'"{_quoted(new)}"']
        at = end
    out.append(css[at:])
    return "".join(out)


def _urls(css: str) -> list[tuple[int, int, str, bool]]:
    """Each URL of ``css``: where its token starts and ends, its value, and whether the
    token is a whole unquoted ``url(…)`` (else a string)."""
    found: list[tuple[int, int, str, bool]] = []
    stack: list[str] = []  # the open functions' names ("" for a bracket)
    rule = None  # the at-rule whose prelude is being read (up to its ";" or block)
    pos = 0
    while (m := _TOKENS.search(css, pos)) is not None:
        pos = m.end()
        kind = m.lastgroup
        if kind in ("dq", "dq_end", "sq", "sq_end"):
            closed = m.group("dq_end") or m.group("sq_end")
            if not closed and pos < len(css):
                continue  # a newline before its quote: a bad string, which names nothing
            inside = stack[-1] if stack else None
            if rule != "namespace" and (
                inside in _URL_FUNCTIONS or inside in _IMAGE_SETS or (inside is None and rule == "import")
            ):
                value = m.group("dq") if m.group("dq") is not None else m.group("sq")
                found.append((m.start(), pos, _unescape(value), False))
        elif kind == "function":
            name = _unescape(m.group("function")).lower()
            if name == "url" and _after_space(css, pos) not in ('"', "'"):
                token = _URL_TOKEN.match(css, pos)
                if token is None:
                    pos = _BAD_URL_REST.match(css, pos).end()  # type: ignore[union-attr]  # matches any text
                else:
                    pos = token.end()
                    if rule != "namespace":
                        found.append((m.start(), pos, _unescape(token.group(1)), True))
                continue
            stack.append(name)
        elif kind == "open":
            stack.append("")
        elif kind == "close":
            if stack:
                stack.pop()
            if m.group() == "}" and not stack:
                rule = None
        elif kind == "semicolon":
            if not stack:
                rule = None
        elif kind == "at" and not stack:
            rule = _unescape(m.group("at")).lower()
    return found


def _after_space(css: str, pos: int) -> str:
    """The first character at or after ``pos`` that is not white space ("" at the end)."""
    while pos < len(css) and css[pos] in _WS:
        pos += 1
    return css[pos : pos + 1]


def _unescape(text: str) -> str:
    """CSS escapes resolved: ``\\75 `` is ``u``, ``\\(`` is ``(``, an escaped newline is nothing."""
    if "\\" not in text:
        return text
    return _ESCAPES.sub(_escaped, text.replace("\\\r\n", "").replace("\\\n", ""))


def _escaped(m: re.Match[str]) -> str:
    body = m.group()[1:]
    digits = body.rstrip(_WS)
    if digits and all(c in "0123456789abcdefABCDEF" for c in digits):
        code = int(digits, 16)
        return "\ufffd" if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF else chr(code)
    return body


def _quoted(url: str) -> str:
    """``url`` as the inside of a double-quoted CSS string."""
    escaped = url.replace("\\", "\\\\").replace('"', '\\"')
    return escaped.replace("\n", "\\a ").replace("\r", "\\d ").replace("\f", "\\c ")
