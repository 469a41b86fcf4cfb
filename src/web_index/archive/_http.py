"""The HTTP response inside a WARC record, and the store's form of its body.

The store keeps a GET body as the fetchers deliver it: with the transfer
coding undone and every content coding web-index decodes (gzip, deflate)
undone, under the header fields as sent. So a body is *decoded* exactly when
its ``Content-Encoding`` names only codings web-index decodes. Import brings a
WARC payload to that form (:func:`store_body`); export writes it back as a
consistent HTTP message (:func:`wire_headers`), keeping the fields it must
change under :data:`ORIGINAL` names, which import restores.
"""

from __future__ import annotations

import http
import re
from collections.abc import Mapping, Sequence

from web_index.errors import InvalidRecordError
from web_index.fetch import BoundedDecoder, DecompressionBombError

__all__ = [
    "ARCHIVED_CONTENT_POLICY",
    "ARCHIVED_PREFIX",
    "HOP_BY_HOP",
    "ORIGINAL",
    "collection_sources",
    "content_policy",
    "dechunk",
    "decoded",
    "inert",
    "parse_http_response",
    "restore_headers",
    "served_name",
    "status_line",
    "store_body",
    "wire_headers",
]

# Prefix of a field export renamed because the body it writes is decoded.
ORIGINAL = "x-web-index-original-"
_FRAMING = ("content-encoding", "transfer-encoding", "content-length")


def content_policy(sources: str = "'self'") -> str:
    """What archived content is served under, wherever a browser may open it (a raw memento,
    the UI's frame): an origin of its own (sandbox, never allow-same-origin), no script, no
    form, no plugin, and nothing loaded but from ``sources`` (a CSP source: this server, or
    better one collection's path on it, since another of its collections may be the live
    web's): archived pages are hostile, and never reach the live web."""
    return (
        f"sandbox; default-src {sources} data:; style-src {sources} 'unsafe-inline' data:; "
        "script-src 'none'; object-src 'none'; form-action 'none'; base-uri 'none'; frame-ancestors 'self'"
    )


ARCHIVED_CONTENT_POLICY = content_policy()


def collection_sources(root: str, path: str) -> str:
    """The CSP source for what a collection serves at ``path`` on the server at ``root``
    (``http://host:port``): ``'self'`` where the host is an IPv6 literal, which CSP's
    grammar has no form for (a browser would drop the source, and load nothing)."""
    host = root.split("://", 1)[-1]
    return "'self'" if host.startswith("[") else f"{root}{path}"


# A connection's own fields, never a page's: not replayed, not taken from a remote's answer.
HOP_BY_HOP = frozenset(["connection", "keep-alive", "transfer-encoding", "content-length", "upgrade"])
# An archived field served to a browser under a name of its own, as pywb serves them: a
# browser acts on a response's fields for the origin that serves it (cookies set or cleared,
# a Refresh, a policy's reports, a service worker's scope, an authentication prompt, CORS,
# caching, Link prefetches...), and the archive's origin is not the page's.
ARCHIVED_PREFIX = "x-archive-orig-"
# The archived fields served as they are: what says what the body is, and nothing else.
_SERVED_AS_IS = frozenset(
    [
        "content-type",
        "content-language",
        "content-encoding",  # the body as served still has it (wire_headers renames it if not)
        "content-range",
        "content-disposition",
        "last-modified",
        "etag",
    ]
)
_PIECE = 1 << 12  # fed to the decoder at a time: a break loses at most this much

_STATUS = re.compile(rb"HTTP/\d(?:\.\d)? +(\d{3})(?: .*)?")


def parse_http_response(block: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
    """``(status, [(name, value)...], body)`` of an HTTP/1.x response message.

    Lines may end in CRLF or a bare LF (both are met in the wild); a field
    folded over several lines is unfolded. Anything that is not an HTTP
    response is an :class:`InvalidRecordError` on ``payload``.
    """
    end = block.find(b"\r\n\r\n")
    sep = 4
    # A bare blank line counts only before the CRLF one: looked for in the head, not the body
    # (a body without one was searched whole: 8 us a record of the WARC benchmark's imports).
    bare = block.find(b"\n\n", 0, len(block) if end == -1 else end)
    if bare != -1 and (end == -1 or bare < end):
        end, sep = bare, 2
    if end == -1:
        raise InvalidRecordError("payload", "not an HTTP response: no end of the header block")
    lines = block[:end].replace(b"\r\n", b"\n").split(b"\n")
    status = _STATUS.fullmatch(lines[0].rstrip())
    if status is None:
        shown = lines[0][:60].decode("latin-1")
        raise InvalidRecordError("payload", f"not an HTTP response: status line {shown!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line[:1] in (b" ", b"\t") and headers:
            folded_name, folded = headers[-1]
            headers[-1] = (folded_name, f"{folded} {line.strip().decode('latin-1')}")
            continue
        raw_name, colon, raw_value = line.partition(b":")
        if not colon or not raw_name.strip():
            continue  # a malformed field line is dropped, as browsers do
        headers.append((raw_name.strip().decode("latin-1"), raw_value.strip().decode("latin-1")))
    return int(status[1]), headers, block[end + sep :]


def dechunk(body: bytes) -> bytes | None:
    """The body of a ``Transfer-Encoding: chunked`` message, or ``None`` if
    ``body`` is not chunked after all (crawlers often keep the header and
    write the body de-chunked): then every size line must parse. Trailer
    fields are dropped; a message cut short inside a chunk keeps what came."""
    out = bytearray()
    pos = 0
    while pos < len(body):
        eol = body.find(b"\n", pos)
        size_text = body[pos : len(body) if eol == -1 else eol].split(b";", 1)[0].strip()
        if not _HEX.fullmatch(size_text):
            return None
        size = int(size_text, 16)
        if size == 0:
            return bytes(out)
        if eol == -1:
            return None
        start = eol + 1
        out += body[start : start + size]
        pos = start + size
        pos += 2 if body[pos : pos + 2] == b"\r\n" else 1 if body[pos : pos + 1] == b"\n" else 0
    return bytes(out) if out else None


_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


def store_body(headers: Sequence[tuple[str, str]], body: bytes, max_bytes: int) -> tuple[bytes, str | None]:
    """``body`` in the store's form (see the module), and a note for the
    attempt's logs if a content coding broke off (the body is then what
    decoded before the break). A body that decodes to more than ``max_bytes``
    is an :class:`InvalidRecordError` on ``data``."""
    fields = {name.lower(): value for name, value in headers}
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = dechunk(body) or body
    coding = fields.get("content-encoding")
    decoder = BoundedDecoder(coding, max_bytes, max_ratio=float(max_bytes))
    if decoder.undecoded is not None or not coding:
        return body, None
    out = bytearray()
    try:
        for start in range(0, len(body), _PIECE):
            out += decoder.feed(body[start : start + _PIECE])
    except DecompressionBombError as exc:
        if decoder.produced > max_bytes:
            raise InvalidRecordError("data", str(exc)) from None
        return bytes(out), f"content-encoding {coding}: {exc}; the body is what decoded before it"
    return bytes(out), None


def wire_headers(headers: Mapping[str, str], body: bytes | None) -> list[tuple[str, str]]:
    """A stored response's header fields as an HTTP message carrying ``body``
    must have them: a decoded body without its content coding, no transfer
    coding, its own length; each field changed is kept as ``ORIGINAL + name``.
    ``Set-Cookie`` values (stored joined by newlines) become a field each."""
    out: list[tuple[str, str]] = []
    renamed = False
    for name, value in headers.items():
        if body is not None and name in _FRAMING and _changes(name, value, body):
            out.append((ORIGINAL + name, _one_line(value)))
            renamed = renamed or name == "content-length"
        elif name == "set-cookie":
            out += [(name, _one_line(v)) for v in value.split("\n")]
        else:
            out.append((name, _one_line(value)))
    if renamed and body is not None:
        out.append(("content-length", str(len(body))))
    return out


# Media types a browser shows with no links of its own (or does not show at all, a plugin's
# in a sandbox): the only archived types a replay serves as they are, HTML and CSS aside,
# which it rewrites. SVG, XML, multipart and whatever else a browser may render as a page are
# not among them: a link in one would be followed as it is, out of the archive.
_INERT = re.compile(
    r"(?:image/(?!svg)[a-z0-9.+-]+|audio/[a-z0-9.+-]+|video/[a-z0-9.+-]+|font/[a-z0-9.+-]+"
    r"|text/(?:plain|css|javascript)|application/(?:javascript|x-javascript|json|octet-stream|pdf|wasm"
    r"|font-woff|vnd\.ms-fontobject))"
)


def inert(content_type: str) -> bool:
    """Whether a body of this ``Content-Type`` is safe to show a browser as it is: one media
    type (in a list, browsers take the last, whatever the first), of a kind shown with no links
    of its own (:data:`_INERT`)."""
    if "," in content_type:
        return False
    return _INERT.fullmatch(content_type.split(";", 1)[0].strip().lower()) is not None


def served_name(name: str) -> str:
    """The name an archived header field is served under to a browser: its own for what
    describes the body (and for :func:`wire_headers`' renamed fields), else
    :data:`ARCHIVED_PREFIX` and its name."""
    low = name.lower()
    if low in _SERVED_AS_IS or low.startswith((ORIGINAL, ARCHIVED_PREFIX)):
        return name
    return ARCHIVED_PREFIX + name


def restore_headers(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """Header fields as they were stored before :func:`wire_headers`."""
    originals = {n.lower()[len(ORIGINAL) :] for n, _ in headers if n.lower().startswith(ORIGINAL)}
    out: list[tuple[str, str]] = []
    for name, value in headers:
        low = name.lower()
        if low.startswith(ORIGINAL):
            out.append((low[len(ORIGINAL) :], value))
        elif low not in originals:
            out.append((name, value))
    return out


def decoded(headers: Mapping[str, str]) -> bool:
    """Whether a stored body under these fields differs from the payload on the
    wire (a transfer coding or a content coding web-index decodes was undone)."""
    return any(_changes(n, v, None) for n, v in headers.items() if n != "content-length")


def _changes(name: str, value: str, body: bytes | None) -> bool:
    if name == "transfer-encoding":
        return True
    if name == "content-encoding":
        return BoundedDecoder(value, 1, 1.0).undecoded is None
    return body is not None and name == "content-length" and value.strip() != str(len(body))


def _one_line(value: str) -> str:
    # A stored value never holds a line break from the wire; one written by hand
    # would end the field early, so it is folded into a space.
    return value.replace("\r", " ").replace("\n", " ")


def status_line(status: int) -> str:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}".rstrip()
