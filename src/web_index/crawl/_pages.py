"""What a crawl reads out of a fetched page: its text, title, language and
links, and whether a link is in the crawl's scope.

Text comes from resiliparse (lexbor underneath: fast, and it keeps working on
broken or absurdly nested HTML); links from selectolax. Both parse the same
decoded text, decoded the way the fetchers decode it (``fetch.decode_body``).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree
from resiliparse.parse.lang import detect_fast
from selectolax.lexbor import LexborHTMLParser

from web_index.crawl._messages import CrawlSpec
from web_index.errors import InvalidURLError
from web_index.fetch import decode_body
from web_index.urls import domain_of, host_of, url_key

__all__ = ["Extracted", "extract", "in_scope", "is_html", "links_of", "normalise", "scope_prefix"]

_MAX_LINKS = 20_000  # per page: a page of 100,000 links is read, not all of them followed
_BINARY_SHARE = 0.10  # more control bytes than this in the first 8 KiB: not text
# resiliparse's main-content heuristic is worse than quadratic in nesting depth
# (20,000 nested <div>: 10 s); past this depth the whole page's text is kept.
_MAX_MAIN_DEPTH = 256
_CONTAINER = re.compile(
    r"<(/?)(?:div|section|article|main|span|table|tr|td|ul|ol|li|blockquote)\b", re.IGNORECASE
)


@dataclass(frozen=True, slots=True)
class Extracted:
    """A page's readable parts. ``nofollow`` when the page asks robots not to follow its links."""

    title: str
    text: str
    lang: str | None
    nofollow: bool


def normalise(url: str, base: str | None = None) -> str | None:
    """``url`` (resolved against ``base``) as the crawl compares URLs: http(s)
    only, scheme and host lower-case, default port and fragment dropped, an
    empty path as ``/``; ``None`` for anything else."""
    try:
        joined = urljoin(base, url.strip()) if base else url.strip()
        parts = urlsplit(joined)
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None or port == (80 if scheme == "http" else 443) else f"{host}:{port}"
    out = urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))
    try:
        url_key(out)
    except InvalidURLError:
        return None
    return out


@functools.lru_cache(maxsize=256)
def scope_prefix(seed: str) -> str:
    """What a ``prefix`` crawl from ``seed`` follows: the seed's directory, as
    wget's ``--no-parent`` and HTTrack take it (``http://h/std/index.html``
    gives ``http://h/std/``; ``http://h/std`` names a file: ``http://h/``)."""
    url = normalise(seed) or seed
    parts = urlsplit(url)
    directory = parts.path[: parts.path.rfind("/") + 1] or "/"
    return urlunsplit((parts.scheme, parts.netloc, directory, "", ""))


def in_scope(url: str, spec: CrawlSpec) -> bool:
    """Whether the crawl ``spec`` may follow ``url`` (already normalised)."""
    if spec.scope == "host":
        return host_of(url) == host_of(spec.seed)
    if spec.scope == "domain":
        return domain_of(url) == domain_of(spec.seed)
    if spec.scope == "prefix":
        return url.startswith(scope_prefix(spec.seed))
    host = host_of(url)
    for allowed in spec.allow:
        if "://" in allowed:
            if url.startswith(normalise(allowed) or allowed):
                return True
        elif host == allowed or host.endswith("." + allowed):
            return True
    return False


def is_html(content_type: str | None, body: bytes) -> bool:
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind:
        return kind in ("text/html", "application/xhtml+xml")
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html"))


def _looks_binary(body: bytes) -> bool:
    sample = body[:8192]
    if not sample:
        return False
    control = sum(1 for b in sample if b < 9 or 13 < b < 32)
    return control / len(sample) > _BINARY_SHARE


def extract(body: bytes, content_type: str | None, url: str) -> Extracted | None:
    """Text and links of an HTML page fetched from ``url``; ``None`` if the
    body is not text at all (binary content served as HTML)."""
    if _looks_binary(body):
        return None
    html, _ = decode_body(body, content_type)
    tree = HTMLTree.parse(html)
    title = " ".join((tree.title or "").split())
    text = ""
    if _depth(html) <= _MAX_MAIN_DEPTH:
        text = extract_plain_text(tree, main_content=True, list_bullets=False, alt_texts=False)
    if not text.strip():
        text = extract_plain_text(tree, main_content=False, list_bullets=False, alt_texts=False)
    lang, _score = detect_fast(text[:4000]) if text.strip() else ("unknown", 0)
    metas = tree.document.query_selector_all("meta[name]") if tree.document is not None else []
    nofollow = any(_says_nofollow(m.getattr("name"), m.getattr("content")) for m in metas)
    return Extracted(title, text, None if lang == "unknown" else lang, nofollow)


def _depth(html: str) -> int:
    depth = deepest = 0
    for match in _CONTAINER.finditer(html):
        if match.group(1):
            depth = max(0, depth - 1)
        else:
            depth += 1
            deepest = max(deepest, depth)
            if deepest > _MAX_MAIN_DEPTH:
                break
    return deepest


def _says_nofollow(name: str | None, content: str | None) -> bool:
    if (name or "").strip().lower() not in ("robots", "googlebot"):
        return False
    words = {w.strip() for w in (content or "").lower().split(",")}
    return "nofollow" in words or "none" in words


def links_of(body: bytes, content_type: str | None, url: str) -> tuple[list[str], bool] | None:
    """The links of an HTML page fetched from ``url`` (normalised, in page
    order, each once) and whether the page forbids following them; ``None``
    if the body is not text."""
    if _looks_binary(body):
        return None
    html, _ = decode_body(body, content_type)
    doc = LexborHTMLParser(html)
    for meta in doc.css("meta[name]"):
        if _says_nofollow(meta.attributes.get("name"), meta.attributes.get("content")):
            return [], True
    base = url
    tag = doc.css_first("base[href]")
    if tag is not None:
        base = normalise(tag.attributes.get("href") or "", url) or url
    out: list[str] = []
    seen: set[str] = set()
    for node in doc.css("a[href], area[href]"):
        if "nofollow" in (node.attributes.get("rel") or "").lower().split():
            continue
        link = normalise(node.attributes.get("href") or "", base)
        if link is not None and link not in seen:
            seen.add(link)
            out.append(link)
            if len(out) >= _MAX_LINKS:
                break
    return out, False
