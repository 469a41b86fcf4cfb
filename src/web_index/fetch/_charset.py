"""Turning body bytes into text, whatever the server claims.

Stored bodies stay raw bytes; text is only needed to judge a page. Servers
lie about charsets, name ones Python does not know, or send bytes invalid in
the one they name, and none of that may break a fetch.
"""

from __future__ import annotations

import codecs
import re

__all__ = ["charset_from_content_type", "decode_body", "sniff_meta_charset"]

_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CT_CHARSET = re.compile(r"""charset\s*=\s*["']?([^"';\s]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_:.+-]+)""", re.IGNORECASE)
# What WHATWG's encoding standard maps these labels to: browsers decode
# "iso-8859-1" and "ascii" as windows-1252, and so should we.
_ALIASES = {
    "iso-8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "ascii": "cp1252",
    "us-ascii": "cp1252",
    "x-user-defined": "cp1252",
}


def _known(label: str | None) -> str | None:
    if not label:
        return None
    label = label.strip().lower()
    label = _ALIASES.get(label, label)
    try:
        return codecs.lookup(label).name
    except LookupError:
        return None


def charset_from_content_type(content_type: str | None) -> str | None:
    """The charset a ``Content-Type`` names, if Python knows it."""
    if not content_type:
        return None
    match = _CT_CHARSET.search(content_type)
    return _known(match.group(1)) if match else None


def sniff_meta_charset(body: bytes) -> str | None:
    """The charset of a ``<meta charset>`` in the first KiB, if known."""
    match = _META_CHARSET.search(body[:1024])
    return _known(match.group(1).decode("ascii", "replace")) if match else None


def decode_body(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Decode ``body`` as a browser would; return the text and the codec used.

    Order: byte-order mark, ``Content-Type`` charset, ``<meta>`` charset, then
    UTF-8 if the bytes are valid UTF-8, else windows-1252. Invalid bytes never
    raise: they become U+FFFD.
    """
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(name, "replace"), name
    declared = charset_from_content_type(content_type) or sniff_meta_charset(body)
    if declared is not None:
        try:
            return body.decode(declared, "replace"), declared
        except (LookupError, ValueError):
            pass  # a codec that refuses this input (e.g. a stateful one): fall back
    try:
        return body.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return body.decode("cp1252", "replace"), "cp1252"
