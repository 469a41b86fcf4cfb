"""The URLs of a stylesheet as a browser's tokenizer reads them: every form a URL takes in
CSS found, in order, and replaced where it stands; strings that are not URLs left alone."""

from __future__ import annotations

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
