"""What a page needs to render (wget's "page requisites"): the stylesheets,
scripts, images, fonts, icons, ``srcset`` candidates, media, frames and
objects an HTML page loads, and the ``url()``\\ s and ``@import``\\ s of a
stylesheet. A crawl with ``--page-requisites`` records them so that a replay
shows the page as it was; a replay (:mod:`web_index.ui`) rewrites the same
attributes into the archive."""

from __future__ import annotations

import asyncio
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser

from web_index.crawl._css import css_urls
from web_index.crawl._messages import CrawlSpec, Index, encode
from web_index.crawl._pages import _looks_binary, normalise
from web_index.crawl.queues import Broker
from web_index.fetch import RobotsCache, decode_body
from web_index.models import Response

__all__ = [
    "LOADED_ATTRIBUTES",
    "css_requisites",
    "queue_requisites",
    "requisites_of",
    "requisites_set",
    "srcset_urls",
    "stylesheet_requisites",
]

# The attributes whose URL a browser loads while it renders the element (not a
# link a reader follows): selector -> attribute.
LOADED_ATTRIBUTES: tuple[tuple[str, str], ...] = (
    ("link[href]", "href"),  # filtered by rel below
    ("script[src]", "src"),
    ("img[src]", "src"),
    ("image[href]", "href"),
    ("input[src]", "src"),
    ("iframe[src]", "src"),
    ("frame[src]", "src"),
    ("embed[src]", "src"),
    ("object[data]", "data"),
    ("source[src]", "src"),
    ("audio[src]", "src"),
    ("video[src]", "src"),
    ("video[poster]", "poster"),
    ("track[src]", "src"),
    ("body[background]", "background"),
    ("table[background]", "background"),
    ("td[background]", "background"),
)
_LOADED_RELS = {"stylesheet", "icon", "shortcut", "apple-touch-icon", "preload", "modulepreload", "manifest"}
_MAX = 2_000  # requisites a page: a page of 100,000 images is read, not all of it fetched


def srcset_urls(value: str) -> list[str]:
    """The URLs of a ``srcset``'s candidates (``a.png 1x, b.png 2x``)."""
    return [parts[0] for c in value.split(",") if (parts := c.strip().split())]


def css_requisites(css: str, base: str) -> list[str]:
    """The URLs a stylesheet (or ``style`` attribute) at ``base`` loads: its
    ``url()``\\ s and ``@import``\\ s, normalised, each once, in order."""
    return _unique(css_urls(css), base)


def stylesheet_requisites(response: Response) -> list[str]:
    """What a stylesheet fetched whole (a 200 of ``text/css``) loads in turn
    (:func:`css_requisites`); nothing for any other response."""
    ctype = response.headers.get("content-type")
    if response.status_code != 200 or (ctype or "").split(";", 1)[0].strip().lower() != "text/css":
        return []
    css, _ = decode_body(response.data or b"", ctype)
    return css_requisites(css, response.request_url)


def requisites_of(body: bytes, content_type: str | None, url: str) -> list[str]:
    """The URLs an HTML page fetched from ``url`` loads to render, normalised,
    each once, in page order (at most 2,000); none for a body that is not text."""
    if _looks_binary(body):
        return []
    html, _ = decode_body(body, content_type)
    doc = LexborHTMLParser(html)
    base = url
    tag = doc.css_first("base[href]")
    if tag is not None:
        base = urljoin(url, tag.attributes.get("href") or "")
    raw: list[str] = []
    for selector, attribute in LOADED_ATTRIBUTES:
        for node in doc.css(selector):
            if node.tag == "link" and not _LOADED_RELS & set(
                (node.attributes.get("rel") or "").lower().split()
            ):
                continue
            raw.append(node.attributes.get(attribute) or "")
    for node in doc.css("img[srcset], source[srcset], img[data-srcset]"):
        raw += srcset_urls(node.attributes.get("srcset") or node.attributes.get("data-srcset") or "")
    for node in doc.css("style"):
        raw += css_urls(node.text())
    for node in doc.css("[style]"):
        raw += css_urls(node.attributes.get("style") or "")
    return _unique(raw, base)


def _unique(raw: list[str], base: str) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for value in raw:
        value = value.strip()
        if not value or value.lower().startswith(("data:", "javascript:", "#")):
            continue
        link = normalise(value, base)
        if link is not None and link not in seen:
            seen.add(link)
            out.append(link)
            if len(out) >= _MAX:
                break
    return out


def requisites_set(spec: CrawlSpec) -> str:
    """The broker's seen-set of a crawl's requisites: apart from its pages, so
    that each is fetched once per crawl and counted against its own limit."""
    return f"{spec.id}/requisites"


async def queue_requisites(
    broker: Broker, robots: RobotsCache | None, spec: CrawlSpec, site: str, urls: list[str], depth: int
) -> int:
    """Post ``index`` (as requisites) for those of ``urls`` that robots.txt
    allows and the crawl has not seen; how many were new."""
    if robots is not None and urls:
        allowed = await asyncio.gather(*(robots.check(u) for u in urls))
        urls = [u for u, verdict in zip(urls, allowed, strict=True) if verdict.allowed]
    if not urls:
        return 0
    bodies = [encode(Index(site=site, url=u, crawl=spec.id, depth=depth, requisite=True)) for u in urls]
    admitted = await asyncio.to_thread(
        broker.add_seen,
        requisites_set(spec),
        urls,
        max_pages=spec.max_requisites,
        queue="index",
        bodies=bodies,
    )
    return sum(admitted)
