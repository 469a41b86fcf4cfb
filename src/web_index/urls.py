"""URL normalisation and the domain a URL is partitioned under.

Two spellings of one resource must meet in the store, so matching uses a
normalised *URL key*: scheme and host lower-case, host IDNA-encoded, default
port dropped, fragment dropped, percent-encoding normalised (unreserved
characters decoded, hex digits upper-case, unsafe characters encoded), and an
empty path written ``/``. Path and query keep their case and order: servers
treat them as case-sensitive and order-sensitive.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from urllib.parse import urlsplit, urlunsplit

import idna
import surt
import tldextract

from web_index.errors import InvalidURLError

__all__ = [
    "domain_of",
    "host_of",
    "is_plain_url",
    "key_and_domain",
    "surt_key",
    "surt_prefixes",
    "target_uri",
    "url_key",
]

_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
# Characters that may stay literal in a path or query (RFC 3986 pchar + "/" + "?").
_SAFE_PATH = _UNRESERVED | frozenset("!$&'()*+,;=:@/%")
_SAFE_QUERY = _SAFE_PATH | frozenset("?")
_PCT = re.compile(r"%([0-9A-Fa-f]{2})")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A domain used in a file name: letters, digits, dots and dashes only, so that a
# name derived from a URL can never contain a separator or climb a folder.
_SAFE_DOMAIN = re.compile(r"^[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?$")
_MAX_DOMAIN = 200

# The offline snapshot of the public suffix list shipped inside tldextract:
# never reach the network at run time.
_EXTRACT = tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None)


def _normalise_escapes(text: str, safe: frozenset[str]) -> str:
    def fix(match: re.Match[str]) -> str:
        char = chr(int(match.group(1), 16))
        return char if char in _UNRESERVED else "%" + match.group(1).upper()

    text = _PCT.sub(fix, text)
    out: list[str] = []
    for char in text:
        if char in safe:
            out.append(char)
        else:
            out.extend(f"%{b:02X}" for b in char.encode("utf-8"))
    # A lone "%" not starting a valid escape must be encoded to stay unambiguous.
    return re.sub(r"%(?![0-9A-F]{2})", "%25", "".join(out))


def _encode_host(host: str, url: str) -> str:
    if host.startswith("["):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError as exc:
            raise InvalidURLError(url, f"invalid IPv6 host: {exc}") from None
        if address.scope_id is not None:
            # "[fe80::1%25eth0]" names an interface of one machine: no key for the
            # web, and ipaddress cannot even write it out in full (exploded).
            raise InvalidURLError(url, "IPv6 zone identifiers (%...) are not supported")
        return "[" + address.compressed + "]"
    host = host.rstrip(".").lower()
    if not host:
        raise InvalidURLError(url, "URL has no host")
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        pass
    if host.isascii():
        if not re.fullmatch(r"[a-z0-9_.-]+", host) or ".." in host:
            raise InvalidURLError(url, f"invalid host {host!r}")
        return host
    try:
        return idna.encode(host, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise InvalidURLError(url, f"host is not valid IDNA: {exc}") from None


@functools.lru_cache(maxsize=65536)
def _split(url: str) -> tuple[str, str, int | None, str, str]:
    if not isinstance(url, str):
        raise InvalidURLError(repr(url), "URL must be a string")
    if not url or url != url.strip() or _CONTROL.search(url):
        raise InvalidURLError(url, "URL is empty or has whitespace or control characters")
    if not url.isascii():
        try:
            url.encode()
        except UnicodeEncodeError:
            # A lone surrogate (a "\udcff" JSON escape, or an argument of
            # undecodable bytes) could be neither keyed nor stored as UTF-8.
            raise InvalidURLError(url, "URL is not encodable as UTF-8 (a lone surrogate?)") from None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise InvalidURLError(url, f"unparseable URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise InvalidURLError(url, "only absolute http:// and https:// URLs are supported")
    hostname = parts.netloc.rpartition("@")[2]
    if hostname.startswith("["):
        hostname = hostname[: hostname.index("]") + 1]
    else:
        hostname = hostname.rpartition(":")[0] if ":" in hostname else hostname
    host = _encode_host(hostname, url)
    return scheme, host, port, parts.path, parts.query


@functools.lru_cache(maxsize=65536)
def url_key(url: str) -> str:
    """The normalised form of ``url`` under which the store matches it.

    >>> url_key("HTTP://Example.COM:80/a%7eb?Q=1#frag")
    'http://example.com/a~b?Q=1'

    Raises :class:`~web_index.errors.InvalidURLError` when ``url`` is not an
    absolute http(s) URL.
    """
    scheme, host, port, path, query = _split(url)
    netloc = host if port is None or port == _DEFAULT_PORTS[scheme] else f"{host}:{port}"
    path = _normalise_escapes(path, _SAFE_PATH) or "/"
    query = _normalise_escapes(query, _SAFE_QUERY)
    return urlunsplit((scheme, netloc, path, query, ""))


def host_of(url: str) -> str:
    """The lower-case, IDNA-encoded host of ``url`` (IPv6 hosts in brackets)."""
    return _split(url)[1]


def domain_of(url: str) -> str:
    """The partition domain of ``url``: its registrable domain.

    Uses the public suffix list (an offline snapshot). Hosts without a
    registrable domain (IP addresses, ``localhost``, bare suffixes) use the host
    itself; IPv6 addresses are written with ``-`` for ``:``. The result only
    ever holds ``[a-z0-9.-]`` and so is safe to use as a file name.
    """
    host = host_of(url)
    domain = _domain_of_host(host)
    if domain is None:
        raise InvalidURLError(url, f"cannot derive a safe partition name from host {host!r}")
    return domain


@functools.lru_cache(maxsize=65536)
def _domain_of_host(host: str) -> str | None:
    """``domain_of`` for a normalised host (``None``: no safe name), cached per
    host: the public suffix lookup is the slow part, and a crawl or a batch of
    queries has many URLs per host."""
    if host.startswith("["):
        domain = "ip6-" + ipaddress.IPv6Address(host[1:-1]).exploded.replace(":", "-")
    elif host[-1:].isdigit() and _is_ipv4(host):
        domain = host
    else:
        domain = _EXTRACT(host).top_domain_under_public_suffix or host
    domain = domain.replace("_", "-")
    if len(domain) > _MAX_DOMAIN:
        # Keep file names under NAME_MAX: long hosts keep a readable tail and a hash.
        digest = hashlib.sha256(domain.encode()).hexdigest()[:16]
        domain = f"{digest}.{domain[-(_MAX_DOMAIN - 17) :].lstrip('.-')}"
    if not _SAFE_DOMAIN.match(domain) or ".." in domain:
        return None
    return domain


def _is_ipv4(host: str) -> bool:
    # Asked only of a host ending in a digit, as a dotted-decimal address does: refusing a
    # name by raising took a third of the time a new host's domain takes.
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        return False
    return True


# Most URLs a fetcher stores or a batch asks for are already in normal form: a
# lower-case http(s) scheme and host, no port, user info, fragment or percent
# escape, and a path and query of characters that normalisation keeps as they
# are. Such a URL is its own key. Path characters kept literally by url_key
# (RFC 3986 pchar and "/", no "%"); a query may also hold "?". The host is
# dot-separated labels of [a-z0-9-]: never an IPv6 literal, never a trailing or
# doubled dot, and an IPv4 address in it is already in the dotted-decimal form
# url_key writes.
_PATH = r"[A-Za-z0-9\-._~!$&'()*+,;=:@/]"
_QUERY = r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?]"
_PLAIN = re.compile(rf"https?://([a-z0-9-]+(?:\.[a-z0-9-]+)*)/{_PATH}*(?:\?{_QUERY}+)?")
_match_plain = _PLAIN.fullmatch


def is_plain_url(url: str) -> bool:
    """Whether ``url`` is already in normal form: its own :func:`url_key` (and so valid)."""
    return _match_plain(url) is not None


def key_and_domain(url: str) -> tuple[str, str]:
    """``(url_key(url), domain_of(url))``, raising what they raise; a URL in
    normal form costs one regular expression and a cache lookup."""
    m = _match_plain(url)
    if m is None:
        return url_key(url), domain_of(url)
    domain = _domain_of_host(m.group(1))
    if domain is None:
        return url, domain_of(url)  # raises, naming the URL
    return url, domain


def target_uri(url: str) -> str:
    """``url`` as a WARC-Target-URI and a CDX ``url`` must be (pywb's index wants
    it so): ASCII, without spaces. A URL that is not (an IRI, a space in a path)
    is written in its normal form, which percent-encodes them as UTF-8 (``url_key``)."""
    return url if _URI.fullmatch(url) else url_key(url)


_URI = re.compile(r"[!#-;=?-\[\]_a-z~]+")  # printable ASCII but space " < > \ ^ ` { | }


@functools.lru_cache(maxsize=65536)  # a replay asks for the same few again and again
def surt_key(url: str) -> str:
    """The SURT key a CDX index sorts ``url`` by (host labels reversed, scheme
    and ``www.`` dropped, query arguments sorted), as pywb computes it.

    >>> surt_key("https://www.Example.com/a?b=2&a=1")
    'com,example)/a?a=1&b=2'
    """
    key = _short_surt(url)
    if key is None:
        key = surt.surt(url)
    return key


# The surt package's IA canonicaliser takes ~20 us a URL (a bulk load's and a lookup's largest
# single cost). On most URLs a crawl stores, all it changes is the host (lower-case, a leading
# www dropped, labels reversed), the path (lower-case, no trailing slash) and the query (lower-case,
# arguments sorted). _short_surt does that for URLs of that form and declines (None) any other: a
# percent escape, a port, user info, a fragment, whitespace or a character the package escapes, an
# empty or dot path segment, an IP-like host (its last label must start with a letter), a "(" in
# the path (ASP.NET session paths) or a session-id argument. tests/test_urls.py checks it against
# the package.
_SURT_PATH = r"""[A-Za-z0-9!"$&')*+,\-./:;<=>@\[\\\]^_`{|}~]"""
_SURT_QUERY = r"""[A-Za-z0-9!"$&'()*+,\-./:;<=>?@\[\\\]^_`{|}~]"""
_SURT_SHORT = re.compile(
    rf"https?://((?:[A-Za-z0-9-]+\.)*[A-Za-z][A-Za-z0-9-]*)(/{_SURT_PATH}*)?(?:\?({_SURT_QUERY}*))?"
)
_WWW = re.compile(r"www\d*\.")
_SESSION_ARGUMENT = re.compile(r"sid=|sessionid|cfid=")


def _short_surt(url: str) -> str | None:
    m = _SURT_SHORT.fullmatch(url)
    if m is None:
        return None
    host, path, query = m.groups()
    path = (path or "/").lower()
    if "//" in path or "/./" in path or "/../" in path or path.endswith(("/.", "/..")):
        return None
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    if query:
        query = query.lower()
        if _SESSION_ARGUMENT.search(query):
            return None
        if len(query) > 1:
            args = sorted(tuple(arg.split("=", 1)) for arg in query.split("&"))
            query = "&".join("=".join(arg) for arg in args)
        path += "?" + query
    host = host.lower()
    www = _WWW.match(host)
    if www is not None:
        host = host[www.end() :]
    return ",".join(reversed(host.split("."))) + ")" + path


def surt_prefixes(url: str, match_type: str) -> tuple[str, ...]:
    """What the SURT key of every capture a CDX query matches starts with:
    ``exact`` the key and the space after it (a CDXJ line's separator),
    ``prefix`` the key, ``host`` the host's ``host)``, ``domain`` that and
    its subdomains' ``host,``.

    >>> surt_prefixes("http://example.com/a", "domain")
    ('com,example)', 'com,example,')
    """
    key = surt_key(url)
    if match_type == "exact":
        return (key + " ",)
    if match_type == "prefix":
        return (key,)
    host = key.split(")", 1)[0]
    if match_type == "host":
        return (host + ")",)
    return (host + ")", host + ",")
