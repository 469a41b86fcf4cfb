"""The URLs a stylesheet (or a ``style`` attribute) names, found and replaced as a
browser's CSS tokenizer reads them (tinycss2): ``url()`` quoted or not and however
escaped (``u\\72l(…)`` is ``url(…)`` to a browser), the strings of ``image-set()``,
the string after ``@import``; not ``@namespace``'s URL, which loads nothing. A
pattern over the text misses what a tokenizer reads otherwise: a crawl would not
fetch such an image, and a replay would leave it pointing at the live web."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import tinycss2
from tinycss2.serializer import serialize_string_value, serialize_url

__all__ = ["css_urls", "replace_css_urls"]

_URL_FUNCTIONS = frozenset({"url", "src"})
# Whose bare strings are images (image-set("a.png" 1x)); a nested type("image/avif") is not.
_IMAGE_SETS = frozenset({"image-set", "-webkit-image-set"})
_BLOCKS = frozenset({"() block", "[] block", "{} block"})
_BETWEEN = frozenset({"whitespace", "comment"})


def css_urls(css: str) -> list[str]:
    """Every URL ``css`` names, in its order (repeats kept)."""
    found: list[str] = []

    def keep(url: str) -> str:
        found.append(url)
        return url

    _visit(tinycss2.parse_component_value_list(css, skip_comments=False), keep)
    return found


def replace_css_urls(css: str, replace: Callable[[str], str]) -> str:
    """``css`` with every URL it names replaced by ``replace(url)`` (a string replaced is
    written double-quoted), the rest as it was."""
    nodes = tinycss2.parse_component_value_list(css, skip_comments=False)
    _visit(nodes, replace)
    return str(tinycss2.serialize(nodes))


def _visit(nodes: Iterable[Any], replace: Callable[[str], str]) -> None:
    rule = None  # the at-rule whose prelude is being read (up to its ";" or block)
    for node in nodes:
        kind = node.type
        if kind in _BETWEEN:
            continue
        if kind == "at-keyword":
            rule = node.lower_value
            continue
        if rule == "namespace":
            pass  # a namespace's URL is a name: it loads nothing, and a selector matches it as written
        elif kind == "url":
            _set(node, replace(node.value))
        elif kind == "function":
            name = node.lower_name
            if name in _URL_FUNCTIONS or name in _IMAGE_SETS:
                for argument in node.arguments:
                    if argument.type == "string":
                        _set(argument, replace(argument.value))
            _visit(node.arguments, replace)
        elif kind in _BLOCKS:
            _visit(node.content, replace)
        elif kind == "string" and rule == "import":  # its prelude's one string is its URL
            _set(node, replace(node.value))
        if kind == "{} block" or (kind == "literal" and node.value == ";"):
            rule = None


def _set(token: Any, url: str) -> None:
    """A url or string token's value, and how it is written (what tinycss2 serializes)."""
    if url == token.value:
        return  # written as it was
    token.value = url
    if token.type == "url":
        token.representation = f"url({serialize_url(url)})"
    else:
        token.representation = f'"{serialize_string_value(url)}"'
