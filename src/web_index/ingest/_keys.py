"""``url_key`` and ``domain_of`` at insert speed.

Most URLs a fetcher stores are already in normal form: a lower-case
``http``/``https`` scheme and host, no port, user info, fragment or percent
escape, and a path and query of characters that normalisation keeps as they
are. For those, :func:`web_index.urls.url_key` returns the URL unchanged, and
:func:`web_index.urls.domain_of` depends on the host alone. One regular
expression recognises them; the domain is then cached per host, so the
public suffix list is consulted once per host, not once per URL. Every other
URL goes through :mod:`web_index.urls` (same results, same errors).
"""

from __future__ import annotations

import re

from web_index.urls import domain_of, url_key

__all__ = ["is_plain_url", "key_and_domain"]

# Path characters kept literally by url_key (RFC 3986 pchar and "/", no "%");
# a query may also hold "?". The host is dot-separated labels of [a-z0-9-]:
# never an IPv6 literal, never a trailing or doubled dot, and an IPv4 address
# in it is already in the dotted-decimal form url_key writes.
_PATH = r"[A-Za-z0-9\-._~!$&'()*+,;=:@/]"
_QUERY = r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?]"
_PLAIN = re.compile(rf"https?://([a-z0-9-]+(?:\.[a-z0-9-]+)*)/{_PATH}*(?:\?{_QUERY}+)?")
_match = _PLAIN.fullmatch

_domains: dict[str, str] = {}
_MAX_HOSTS = 1 << 16


def is_plain_url(url: str) -> bool:
    """Whether ``url`` is its own URL key (and so certainly valid)."""
    return _match(url) is not None


def key_and_domain(url: str) -> tuple[str, str]:
    """``(url_key(url), domain_of(url))``, raising what they raise."""
    m = _match(url)
    if m is None:
        return url_key(url), domain_of(url)
    host = m.group(1)
    domain = _domains.get(host)
    if domain is None:
        domain = domain_of(url)  # a function of the host alone
        if len(_domains) >= _MAX_HOSTS:
            _domains.clear()
        _domains[host] = domain
    return url, domain
