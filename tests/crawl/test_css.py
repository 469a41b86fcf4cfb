"""The URLs of a stylesheet as a browser's tokenizer reads them: every form a URL takes in
CSS found, in order, and replaced where it stands; strings that are not URLs left alone."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tinycss2
from hypothesis import given
from hypothesis import strategies as st

from web_index.crawl import css_requisites, replace_css_urls
from web_index.crawl._css import css_urls
from web_index.ui._replay import rewrite_css

_PLAIN = st.text(st.sampled_from("abcXYZ019/._-~%?=&"), min_size=1, max_size=12)
_QUOTABLE = st.text(st.sampled_from("abc019/._-~ ()',;:"), min_size=1, max_size=12)

# (CSS with {} where the URL goes, the alphabet its URLs come from)
_FORMS = [
    ("a {{ background: url({}) }}", _PLAIN),
    ('a {{ background: url("{}") }}', _QUOTABLE),
    ("a {{ background: URL( {} ) }}", _PLAIN),
    ("a {{ background: u\\72l({}) }}", _PLAIN),  # an escaped name is url( to a browser
    ('a {{ background: image-set("{}" 1x) }}', _QUOTABLE),
    ('a {{ background: -webkit-image-set("{}" 2x type("image/png")) }}', _QUOTABLE),
    ("a {{ background: image-set(url({}) 1x) }}", _PLAIN),
    ('@import "{}";', _QUOTABLE),
    ('@import "{}" supports(content: "x") screen;', _QUOTABLE),  # "x" is no URL
    ("@import /* first */ url({}) screen;", _PLAIN),
    ('@font-face {{ src: url("{}") format("woff2") }}', _QUOTABLE),
    ("@media print {{ b {{ list-style: url({}) }} }}", _PLAIN),
]
_NOT_URLS = [
    'a::before { content: "not a url" }',
    'q { quotes: "«" "»" }',
    "p { color: red }",
    "@namespace svg url(http://www.w3.org/2000/svg);",  # a name: it loads nothing
    '@namespace "http://www.w3.org/1999/xhtml";',
]


@st.composite
def stylesheets(draw: st.DrawFn) -> tuple[str, list[str]]:
    parts: list[str] = []
    urls: list[str] = []
    for _ in range(draw(st.integers(min_value=0, max_value=6))):
        if draw(st.booleans()):
            parts.append(draw(st.sampled_from(_NOT_URLS)))
            continue
        form, alphabet = draw(st.sampled_from(_FORMS))
        url = draw(alphabet)
        parts.append(form.format(url.replace('"', "")))
        urls.append(url.replace('"', ""))
    return "\n".join(parts), urls


@given(stylesheets())
def test_every_url_of_a_stylesheet_is_found_and_replaced_in_place(sheet: tuple[str, list[str]]) -> None:
    css, urls = sheet
    assert css_urls(css) == urls
    replaced = replace_css_urls(css, lambda url: f"/archive/{len(url)}/{url}")
    assert css_urls(replaced) == [f"/archive/{len(url)}/{url}" for url in urls]
    for text in _NOT_URLS:
        if text in css:
            assert text in replaced  # strings that name no URL, and the rest, as they were


def test_a_replay_points_every_form_into_the_archive() -> None:
    css = (
        '.hero { background: image-set("big.png" 2x, url(small.png) 1x) }'
        " .x { background: u\\72l(http://live.example/esc.png) }"
        ' .y { background: url("javascript:alert(1)") }'
    )
    out = rewrite_css(css, "http://site.test/css/main.css", "/ui/store/2024if_/")
    assert css_urls(out) == [
        "/ui/store/2024if_/http://site.test/css/big.png",
        "/ui/store/2024if_/http://site.test/css/small.png",
        "/ui/store/2024if_/http://live.example/esc.png",
        "",  # what cannot be replayed is emptied
    ]
    assert "live.example/esc.png)" not in out.replace("/ui/store/2024if_/http://live.example/esc.png", "")
    assert css_requisites(css, "http://site.test/css/main.css") == [
        "http://site.test/css/big.png",
        "http://site.test/css/small.png",
        "http://live.example/esc.png",
    ]


# The reference: tinycss2, a whole CSS tokenizer (too slow to run on every stylesheet a crawl
# fetches and a replay serves, ~1.3 s a MB), walked for the same tokens.
_BLOCKS = frozenset({"() block", "[] block", "{} block"})


def _reference(css: str) -> list[str]:
    found: list[str] = []
    _walk(tinycss2.parse_component_value_list(css, skip_comments=False), found.append)
    return found


def _walk(nodes: Iterable[Any], keep: Callable[[str], object], top: bool = True) -> None:
    rule = None  # the at-rule whose prelude is being read (@import and @namespace: at the top only)
    for node in nodes:
        kind = node.type
        if kind in ("whitespace", "comment"):
            continue
        if kind == "at-keyword":
            rule = node.lower_value if top else None
            continue
        if rule == "namespace":
            pass
        elif kind == "url":
            keep(node.value)
        elif kind == "function":
            names = node.lower_name in ("url", "src", "image-set", "-webkit-image-set")
            for argument in node.arguments:  # in their order: image-set("a" 1x, url(b) 2x)
                if names and argument.type == "string":
                    keep(argument.value)
                else:
                    _walk([argument], keep, top=False)
        elif kind in _BLOCKS:
            _walk(node.content, keep, top=False)
        elif kind == "string" and rule == "import":
            keep(node.value)
        if kind == "{} block" or (kind == "literal" and node.value == ";"):
            rule = None


_PIECES = st.sampled_from(
    [
        "a { background: url(x.png) }",
        "a{background:URL( 'y z.png' )}",
        "b { background: u\\72l(esc.png); }",
        "b { background: \\75 rl(esc2.png) }",
        'c { content: "url(not.png)" }',
        "/* url(commented.png) */",
        "/* unclosed comment url(c.png)",
        'd { background: image-set("a.png" 1x, url(b.png) 2x, "c.avif" type("image/avif")) }',
        "e { background: url(bad url.png) }",
        'e { background: url(bad"quote.png) }',
        "e { background: url(esc\\(aped.png) }",
        "e { background: url() }",
        '@import "imp.css";',
        "@import url(imp2.css) screen;",
        '@import "imp3.css" supports(content: "x");',
        "@namespace svg url(http://www.w3.org/2000/svg);",
        '@namespace "http://www.w3.org/1999/xhtml";',
        '@media print { f { list-style: url("list.png") } }',
        '@font-face { font-family: "F"; src: url(f.woff2) format("woff2"), src("g.woff") }',
        "g { width: calc(100% - (2 * 3px)); color: rgba(0, 0, 0, .5) }",
        'h::before { content: "\\f101"; }',
        "i { background: myurl(nope.png) }",
        '"unclosed string url(u.png)\n',
        "j { background: url(tail.png",
        "k { background: url(  spaced.png  ) }",
        'l { background: url( "q.png" ) }',
        "m { background: url(\\68 ex.png) }",
        'n { background: url("bad\nstring.png") }',
    ]
)


@given(st.lists(_PIECES, max_size=8), st.sampled_from(["", " ", "\n"]))
def test_the_urls_found_are_those_a_css_tokenizer_finds(pieces: list[str], between: str) -> None:
    css = between.join(pieces)
    assert css_urls(css) == _reference(css)
    replaced = replace_css_urls(css, lambda url: f"/archive/{url}")
    assert _reference(replaced) == [f"/archive/{url}" for url in _reference(css)]
