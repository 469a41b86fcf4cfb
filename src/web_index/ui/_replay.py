"""The archived page itself, for a capture page's frame: ``/ui/{coll}/{ts}if_/{url}``.

Archived content is hostile. It is served under a policy that sandboxes it
(an origin of its own, no scripts, no forms, no popups, no navigation of the
page around it) and lets it load nothing but this server's own paths; every
URL it names (links, stylesheets, images, fonts, frames, ``srcset``
candidates, ``url()`` and ``@import`` in CSS, a refresh) is rewritten to the
archive's copy closest in time, and anything else is dropped: a replayed page
never reaches the live web.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from selectolax.lexbor import LexborHTMLParser
from starlette.requests import Request
from starlette.responses import Response

from web_index.archive import collection_sources, content_policy, inert, parse_cdx_query, ranged, url_for_path
from web_index.crawl import is_html, replace_css_urls
from web_index.errors import InvalidRecordError
from web_index.fetch import decode_body
from web_index.ui._render import UI_PREFIX, UiError, store_of, target_url

__all__ = ["replay", "rewrite_css", "rewrite_html"]
_URL_ATTRIBUTES = {
    "href": ("a", "area", "link"),
    "src": ("img", "iframe", "frame", "source", "audio", "video", "track", "embed", "input", "script"),
    "poster": ("video",),
    "data": ("object",),
    "background": ("body", "table", "td", "th"),
    "action": ("form",),
    "formaction": ("button", "input"),
    "xlink:href": ("use", "image"),
}
_CHARSET = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9._:-]+)", re.IGNORECASE)
_DROPPED_ATTRIBUTES = ("integrity", "ping")  # a rewritten body fails its hash; pings reach out
# A refresh as the HTML standard reads it: a delay (digits and dots, ".5" too), then a ";",
# a "," or white space, then the URL, after "url=" or not, quoted or not.
_REFRESH = re.compile(r"\s*([\d.]*)[\s;,]*(?:url\s*=\s*)?(.*)", re.IGNORECASE | re.DOTALL)


def _archived(base: str, prefix: str) -> Callable[[str], str | None]:
    """A function giving the archive's address of a URL named in a page at
    ``base``, or ``None`` for one that must not be loaded at all."""

    def to_archive(raw: str) -> str | None:
        value = raw.strip()
        if not value or value.startswith("#"):
            return value
        if value.lower().startswith("data:"):
            return value
        try:
            absolute = urljoin(base, value)
            scheme = urlsplit(absolute).scheme.lower()
        except ValueError:
            return None
        if scheme not in ("http", "https"):
            return None  # javascript:, mailto:, file:, ...: nothing to replay
        return prefix + url_for_path(absolute)  # an absolute URL keeps its dot segments

    return to_archive


def rewrite_css(css: str, base: str, prefix: str) -> str:
    """``css`` with every URL it names (``url()``, ``image-set()``, ``@import``) pointing
    into the archive, and any that cannot be replayed emptied."""
    to_archive = _archived(base, prefix)
    return replace_css_urls(css, lambda url: to_archive(url) or "")


def rewrite_html(html: str, base: str, prefix: str) -> str:
    """``html`` with every URL it loads or links to pointing into the archive
    (``prefix`` + the absolute URL), and nothing left that could reach out."""
    doc = LexborHTMLParser(html)
    tag = doc.css_first("base[href]")
    if tag is not None:
        base = urljoin(base, tag.attributes.get("href") or "")
    for node in doc.css("base"):
        node.decompose()
    to_archive = _archived(base, prefix)
    for attribute, tags in _URL_ATTRIBUTES.items():
        for node in doc.css(", ".join(f"{t}[{attribute.replace(':', '|')}]" for t in tags)):
            target = to_archive(node.attributes.get(attribute) or "")
            if target is None:
                del node.attrs[attribute]
            else:
                node.attrs[attribute] = target
    for node in doc.css("img[srcset], source[srcset], img[imagesrcset], link[imagesrcset]"):
        for attribute in ("srcset", "imagesrcset"):
            if attribute in node.attributes:
                node.attrs[attribute] = _srcset(node.attributes.get(attribute) or "", to_archive)
    for node in doc.css("[style]"):
        node.attrs["style"] = rewrite_css(node.attributes.get("style") or "", base, prefix)
    for node in doc.css("style"):
        # Raw text: what it holds is never parsed as markup, so "</" must not end it early.
        node.inner_html = rewrite_css(node.text(deep=True), base, prefix).replace("</", "<\\/")
    for node in doc.css("meta[http-equiv]"):
        if (node.attributes.get("http-equiv") or "").strip().lower() == "refresh":
            _refresh(node, to_archive)
    for attribute in _DROPPED_ATTRIBUTES:
        for node in doc.css(f"[{attribute}]"):
            del node.attrs[attribute]
    return doc.html or ""


def _srcset(value: str, to_archive: Callable[[str], str | None]) -> str:
    out = []
    for candidate in value.split(","):
        parts = candidate.strip().split()
        if not parts:
            continue
        target = to_archive(parts[0])
        if target is not None:
            out.append(" ".join([target, *parts[1:]]))
    return ", ".join(out)


def _refresh(node: object, to_archive: Callable[[str], str | None]) -> None:
    """A refresh's URL rewritten into the archive; the refresh removed if it names one that
    cannot be replayed. (Any text after the delay is taken as a URL: whatever a browser would
    follow, it is rewritten, or gone.)"""
    content = node.attributes.get("content") or ""  # type: ignore[attr-defined]
    delay, url = _REFRESH.fullmatch(content).groups()  # type: ignore[union-attr]  # matches any text
    url = url.strip()
    if url[:1] in ("'", '"'):
        url = url[1:].split(url[0], 1)[0]
    if not url.strip():
        return  # no URL: the page itself again
    target = to_archive(url)
    if target is None:
        node.decompose()  # type: ignore[attr-defined]
    else:
        node.attrs["content"] = f"{delay or '0'}; url={target}"  # type: ignore[attr-defined]


async def replay(request: Request) -> Response:
    name, stamp = request.path_params["coll"], request.path_params["stamp"]
    coll, _ = store_of(request, name)
    asked = target_url(request, f"{UI_PREFIX}/{name}/{stamp}/")
    try:
        query = parse_cdx_query({"url": [asked], "closest": [stamp[:-3]], "matchType": ["exact"]})
    except InvalidRecordError as exc:
        raise UiError(400, f"{asked!r}: {exc.problem}") from None
    loaded = await coll.load(query, live=False)
    # Nothing loaded but from this collection's replay: another collection may be the live web.
    root = f"{request.url.scheme}://{request.url.netloc}{request.scope.get('root_path', '')}"
    policy = content_policy(collection_sources(root, f"{UI_PREFIX}/{name}/"))
    headers = {"content-security-policy": policy, "x-content-type-options": "nosniff"}
    if loaded is None:
        return Response(b"", status_code=404, headers=headers)
    fields = loaded.capture[0]
    response = loaded.response
    body = response.data or b""
    ctype = response.headers.get("content-type") or ""
    # Sub-resources resolve in time around the page's capture, as a visitor saw them.
    prefix = f"{UI_PREFIX}/{name}/{stamp}/"
    status = response.status_code
    if 300 <= status < 400 and response.headers.get("location"):
        target = _archived(fields["url"], prefix)(response.headers["location"])
        return Response(b"", status_code=302, headers={**headers, "location": target or "about:blank"})
    if is_html(ctype, body) and ctype.split(";")[0].strip().lower() != "text/css":
        text, _ = decode_body(body, ctype)
        out = rewrite_html(text, fields["url"], prefix).encode()
        return Response(out, status_code=status, media_type="text/html; charset=utf-8", headers=headers)
    if ctype.split(";")[0].strip().lower() == "text/css":
        text, _ = decode_body(body, ctype)
        out = rewrite_css(text, fields["url"], prefix).encode()
        return Response(out, status_code=status, media_type="text/css; charset=utf-8", headers=headers)
    svg_image = request.headers.get("sec-fetch-dest") == "image" and ctype.lower().startswith("image/svg+xml")
    if inert(ctype) or svg_image:  # an SVG an <img> shows is inert: no link, no script
        # A replayed video or audio seeks by ranges, as it would on the web.
        part = ranged(body, status, request.headers, response.headers)
        served = Response(part.body, status_code=part.status or status, media_type=ctype, headers=headers)
        for name, value in part.headers:
            served.headers[name] = value
        return served
    # SVG, XML, a list of types, none: a browser may show it as a page whose links, not
    # rewritten, lead out of the archive. Its text, then, in its own charset.
    charset = _CHARSET.search(ctype)
    media = f"text/plain; charset={charset.group(1)}" if charset else "text/plain"
    return Response(body, status_code=status, media_type=media, headers=headers)
