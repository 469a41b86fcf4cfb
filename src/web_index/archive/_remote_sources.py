"""Remote index sources: a CDX server (pywb's, the Wayback Machine's, another
web-index) and a Memento archive (RFC 7089 TimeMaps). Their captures carry a
``live_url``, the archive's raw (``id_``) replay of them, which is where the
resource loaders fetch them from; the archive's own ``filename``, ``offset``
and ``length`` mean nothing here and are dropped.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import surt

from web_index.archive._bounded import get_bounded
from web_index.archive._cdx import Capture, capture_moment, ordered, wanted_fields
from web_index.archive._cdx_query import CdxQuery
from web_index.archive._index_sources import IndexSource

__all__ = ["CdxApiIndex", "MementoIndex"]

_log = logging.getLogger("web_index.archive")
_STAMP = re.compile(r"[0-9]{14}")
_REMOTE_ONLY = ("filename", "offset", "length", "source", "source_type", "live_url")
# The classic names some CDX servers answer with (the Wayback Machine's JSON).
_NAMES = {"original": "url", "mimetype": "mime", "statuscode": "status"}
_LINK = re.compile(r'<([^>]*)>((?:\s*;\s*[\w.-]+\s*=\s*(?:"[^"]*"|[^;,<\s]*))*)')
_PARAM = re.compile(r'([\w.-]+)\s*=\s*(?:"([^"]*)"|([^;,<\s]*))')


def _plain(url: str) -> bool:
    """An http(s) URL of printable ASCII: safe in a header and a path."""
    return url.startswith(("http://", "https://")) and url.isascii() and url.isprintable() and " " not in url


def _replay(template: str, timestamp: str, url: str) -> str:
    return template.replace("{timestamp}", timestamp).replace("{url}", url)


class CdxApiIndex(IndexSource):
    """A CDX server API: asked with the same query, answers read as JSON lines
    (pywb, web-index), a JSON table (the Wayback Machine) or CDXJ."""

    source_type = "cdx"

    def __init__(self, name: str, api_url: str, replay: str, client: httpx.AsyncClient) -> None:
        super().__init__(name)
        self.api_url, self.replay, self.client = api_url, replay, client

    async def find(self, query: CdxQuery) -> list[Capture]:
        params: list[tuple[str, str]] = [
            ("matchType", query.match_type),
            ("from", query.start),
            ("to", query.end),
            ("limit", str(query.limit)),
            ("output", "json"),
        ]
        params += [("filter", f.text) for f in query.filters]
        if query.closest is not None:
            params += [("closest", query.closest.strftime("%Y%m%d%H%M%S")), ("sort", "closest")]
        elif query.reverse:
            params.append(("sort", "reverse"))
        if query.collapse is not None:  # before the limit, as the remote cuts its answer
            field, width = query.collapse
            params.append(("collapse", field if width is None else f"{field}:{width}"))
        if query.type.value != "get":
            params.append(("type", query.type.value))
        url = self.api_url.replace("{url}", quote(query.url, safe=":/")).replace("{timestamp}", "")
        # Appended, not passed as params: httpx would replace the URL's own query.
        answer, body = await get_bounded(self.client, url + ("&" if "?" in url else "?") + urlencode(params))
        if answer.status_code == 404:
            return []
        answer.raise_for_status()
        found: list[Capture] = []
        for row in _rows(body.decode("utf-8", "replace")):
            fields = {
                _NAMES.get(k, k): str(v) for k, v in row.items() if _NAMES.get(k, k) not in _REMOTE_ONLY
            }
            if not _STAMP.fullmatch(fields.get("timestamp", "")) or not _plain(fields.get("url", "")):
                _log.warning(
                    "%s: a CDX line dropped (no 14-digit timestamp or http(s) URL): %.200s", self.name, row
                )
                continue  # it would end up in headers and paths: never a value of a remote's choosing
            fields["urlkey"] = surt.surt(fields["url"])
            for name in ("mime", "status", "digest"):
                fields.setdefault(name, "-")
            fields["live_url"] = _replay(self.replay, fields["timestamp"], fields["url"])
            if wanted_fields(query, self._tag(fields)):
                found.append((fields, capture_moment(fields["timestamp"])))
        return ordered(found, query)


def _rows(text: str) -> list[dict[str, Any]]:
    text = text.strip()
    if not text:
        return []
    if text.startswith("["):  # the Wayback Machine: a table whose first row names the columns
        table = json.loads(text)
        if not table:
            return []
        head = table[0]
        return [dict(zip(head, row, strict=False)) for row in table[1:]]
    rows = []
    for line in text.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
        elif line.strip():  # CDXJ: urlkey timestamp {json}
            key, stamp, blob = line.split(" ", 2)
            rows.append({**json.loads(blob), "urlkey": key, "timestamp": stamp})
    return rows


class MementoIndex(IndexSource):
    """A Memento archive: a URL's TimeMap lists its mementos; only exact
    lookups are possible (a TimeMap is per URL). Their status and type are
    unknown until loaded (``-``)."""

    source_type = "memento"

    def __init__(self, name: str, timemap: str, replay: str, client: httpx.AsyncClient) -> None:
        super().__init__(name)
        self.timemap, self.replay, self.client = timemap, replay, client

    async def find(self, query: CdxQuery) -> list[Capture]:
        if query.match_type != "exact":
            return []
        answer, body = await get_bounded(
            self.client, self.timemap.replace("{url}", quote(query.url, safe=":/"))
        )
        if answer.status_code == 404:
            return []
        answer.raise_for_status()
        key = surt.surt(query.url)
        found: list[Capture] = []
        for uri, params in parse_link_format(body.decode("utf-8", "replace")):
            if "memento" not in params.get("rel", "").split() or "datetime" not in params:
                continue
            moment = parsedate_to_datetime(params["datetime"])
            if moment.tzinfo is None:  # "-0000": RFC 5322's "UTC, zone unknown"
                moment = moment.replace(tzinfo=UTC)
            moment = moment.astimezone(UTC)
            stamp = moment.strftime("%Y%m%d%H%M%S")
            fields = {
                "urlkey": key,
                "timestamp": stamp,
                "url": query.url,
                "mime": "-",
                "status": "-",
                "digest": "-",
                "live_url": _replay(self.replay, stamp, query.url) if self.replay else uri,
            }
            if wanted_fields(query, self._tag(fields)):
                found.append((fields, moment))
        return ordered(found, query)


def parse_link_format(text: str) -> list[tuple[str, dict[str, str]]]:
    """The links of an ``application/link-format`` document: each target and
    its parameters (quoted or not)."""
    out = []
    for m in _LINK.finditer(text):
        params = {
            p.group(1).lower(): p.group(2) if p.group(2) is not None else p.group(3)
            for p in _PARAM.finditer(m.group(2))
        }
        out.append((m.group(1), params))
    return out
