"""The CDX server API's queries against a tiny reference: a seeded store of GET and HEAD
attempts (redirect chains, failures, several hosts of one domain) and random queries
(match types and wildcards, from/to, closest, reverse, limit, filters, fl, outputs)."""

from __future__ import annotations

import base64
import hashlib
import json
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import surt
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import metadata
from web_index import WebIndex
from web_index.archive import cdx_lines, cdx_page, find_captures, parse_cdx_query
from web_index.errors import InvalidRecordError
from web_index.models import Response

HOSTS = ["example.com", "www.example.com", "b.example.com", "example.org"]  # two partitions
PATHS = ["/", "/x", "/x/y", "/xy", "/z?q=1"]
T0 = datetime(2023, 1, 1, tzinfo=UTC)
SPAN_S = 3 * 365 * 86400


def _responses(rng: random.Random, url: str, ts: datetime, head: bool) -> list[Response]:
    hops = rng.choice([1, 1, 1, 2])
    out = []
    for i in range(hops):
        final = i == hops - 1
        status = rng.choice([200, 200, 404, 500]) if final else 301
        mime = rng.choice(["text/html; charset=utf-8", "image/png", "text/plain"])
        body = rng.randbytes(rng.randint(0, 40))
        out.append(
            Response(
                url=url,
                request_url=url if final else f"{url.rstrip('/')}/hop{i}",
                status_code=status,
                headers={"content-type": mime} if final else {"location": url},
                timestamp=ts + timedelta(milliseconds=1500 * i),
                data=None if head else (body if final else b""),
                is_final=final,
                fetcher_name="test",
                fetcher_version="1.0",
                fetcher_calibre=10,
            )
        )
    return out


def _reference(kind: str, r: Response, position: int) -> dict[str, Any]:
    moment = r.timestamp.astimezone(UTC).replace(microsecond=0)
    digest = "-" if r.data is None else base64.b32encode(hashlib.sha1(r.data).digest()).decode()
    return {
        "type": kind,
        "position": position,  # in its chain
        "moment": moment,
        "host": r.request_url.split("/")[2],
        "fields": {
            "urlkey": surt.surt(r.request_url),
            "timestamp": moment.strftime("%Y%m%d%H%M%S"),
            "url": r.request_url,
            "mime": r.headers.get("content-type", "unk").split(";")[0],
            "status": str(r.status_code),
            "digest": digest,
            "source": "store",
            "source_type": "web-index",
        },
    }


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebIndex, list[dict[str, Any]]]]:
    rng = random.Random(5)
    seconds = rng.sample(range(SPAN_S), 120)  # distinct: no two attempts in one second
    captures = []
    with WebIndex(Path(tmp_path_factory.mktemp("cdx")) / "store") as index:
        for s in seconds:
            url = f"http://{rng.choice(HOSTS)}{rng.choice(PATHS)}"
            ts = T0 + timedelta(seconds=s, microseconds=rng.randrange(10**6) // 2)
            kind = rng.choice(["get", "get", "get", "head"])
            if rng.random() < 0.15:  # a failed attempt: no response, no capture
                index.insert(kind, url, ts, metadata(url, state="timeout"), [])
                continue
            responses = _responses(rng, url, ts, head=kind == "head")
            index.insert(kind, url, ts, metadata(url), responses)
            captures += [_reference(kind, r, i) for i, r in enumerate(responses)]
        index.flush()
        yield index, captures


def _expected(captures: list[dict[str, Any]], p: dict[str, list[str]]) -> list[dict[str, str]]:
    """The reference: the rules of docs/server.md, written plainly."""
    url = p["url"][0]
    match = p.get("matchType", [""])[0]
    if not match:
        match, url = ("domain", "http://" + url[2:]) if url.startswith("*.") else ("exact", url)
    start = p["from"][0] + "10000101000000"[len(p["from"][0]) :] if p.get("from") else "10000101000000"
    end = p["to"][0] + "29991231235959"[len(p["to"][0]) :] if p.get("to") else "29991231235959"

    key = surt.surt(url)  # pywb matches on it: no scheme, no "www."
    host_key = key.split(")")[0]

    def chosen(c: dict[str, Any]) -> bool:
        f = c["fields"]
        if c["type"] != p.get("type", ["get"])[0]:
            return False
        if match == "exact" and f["urlkey"] != key:
            return False
        if match == "prefix" and not f["urlkey"].startswith(key):
            return False
        if match == "host" and not f["urlkey"].startswith(host_key + ")"):
            return False
        if match == "domain" and not f["urlkey"].startswith((host_key + ")", host_key + ",")):
            return False
        if not start <= f["timestamp"] <= end:
            return False
        for spec in p.get("filter", []):
            neg, spec = spec.startswith("!"), spec.lstrip("!")
            field, value = spec[1:].split(":", 1)
            hit = f.get(field, "-") == value if spec[0] == "=" else f.get(field, "-").startswith(value)
            if hit == neg:
                return False
        return True

    got = [c for c in captures if chosen(c)]
    if p.get("closest"):
        target = datetime.strptime(p["closest"][0], "%Y%m%d%H%M%S").replace(tzinfo=UTC)
        got.sort(
            key=lambda c: (
                abs((c["moment"] - target).total_seconds()),
                c["fields"]["timestamp"],
                c["fields"]["urlkey"],
            )
        )
    else:
        got.sort(key=lambda c: (c["fields"]["urlkey"], c["fields"]["timestamp"]), reverse="sort" in p)
    if p.get("collapse"):  # of neighbours with the same value (or its first N characters), the first
        name, _, width = p["collapse"][0].partition(":")
        cut = int(width) if width else None
        values = [c["fields"].get(name, "-")[:cut] for c in got]
        got = [c for i, c in enumerate(got) if i == 0 or values[i] != values[i - 1]]
    return [c["fields"] for c in got[: int(p.get("limit", ["10000"])[0])]]


def _stamp(seconds: int, digits: int) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y%m%d%H%M%S")[:digits]


queries = st.fixed_dictionaries(
    {
        "url": st.sampled_from(HOSTS).flatmap(
            lambda h: st.sampled_from([f"http://{h}{p}" for p in PATHS] + [f"*.{h}"])
        ),
    },
    optional={
        "matchType": st.sampled_from(["exact", "prefix", "host", "domain"]),
        "from": st.builds(_stamp, st.integers(0, SPAN_S), st.sampled_from([4, 6, 8, 14])),
        "to": st.builds(_stamp, st.integers(0, SPAN_S), st.sampled_from([4, 8, 14])),
        "closest": st.builds(_stamp, st.integers(0, SPAN_S), st.just(14)),
        "sort": st.just("reverse"),
        "limit": st.integers(1, 30).map(str),
        "type": st.sampled_from(["get", "head"]),
        "collapse": st.sampled_from(["urlkey", "timestamp:4", "timestamp:8", "status", "digest"]),
        "filter": st.lists(
            st.tuples(
                st.sampled_from(["", "!"]),
                st.sampled_from(
                    ["=status:200", "=status:301", "~mime:text/", "=mime:image/png", "~url:http://b"]
                ),
            ).map("".join),
            max_size=2,
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(params=queries)
def test_queries_find_what_the_reference_finds(
    stored: tuple[WebIndex, list[dict[str, Any]]], params: dict[str, Any]
) -> None:
    index, captures = stored
    if "closest" in params and "sort" in params:
        del params["sort"]  # closest wins over reverse, in pywb and here
    multi = {k: v if isinstance(v, list) else [v] for k, v in params.items()}
    if multi.get("url", [""])[0].startswith("*.") and "matchType" in multi:
        multi["url"] = ["http://" + multi["url"][0][2:] + "/"]
    query = parse_cdx_query(multi)
    got = [fields for fields, _ in find_captures(index, query, source="store")]
    assert got == _expected(captures, multi)


def test_outputs_and_fields(stored: tuple[WebIndex, list[dict[str, Any]]]) -> None:
    index, captures = stored
    url = next(c["fields"]["url"] for c in captures if c["type"] == "get")
    found = find_captures(index, parse_cdx_query({"url": [url]}), source="store")
    assert found
    first = found[0][0]

    def lines(**extra: str) -> list[str]:
        q = parse_cdx_query({"url": [url], **{k: [v] for k, v in extra.items()}})
        return "".join(cdx_lines(found, q)).splitlines()

    key, stamp, rest = lines()[0].split(" ", 2)  # cdxj, the default
    assert (key, stamp) == (first["urlkey"], first["timestamp"])
    assert json.loads(rest) == {k: v for k, v in first.items() if k not in ("urlkey", "timestamp")}
    assert json.loads(lines(output="json")[0]) == first
    assert lines(output="text")[0].split(" ") == [
        *(first[k] for k in ("urlkey", "timestamp", "url", "mime", "status", "digest")),
        "-",
        "-",
        "-",
    ]
    assert lines(output="json", fl="timestamp,statuscode")[0] == json.dumps(
        {"timestamp": first["timestamp"], "status": first["status"]}
    )
    link = lines(output="link")
    assert len(link) == len(found) and all(x.endswith(",") for x in link[:-1])
    assert link[0].startswith(f'<{url}>; rel="memento"; datetime="') and 'collection="store"' in link[0]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({}, "url"),
        ({"url": "http://a.test/", "matchType": "everything"}, "matchType"),
        ({"url": "http://a.test/", "from": "2024-01"}, "from"),
        ({"url": "http://a.test/", "to": "123456789012345"}, "to"),
        ({"url": "http://a.test/", "closest": "20241341"}, "closest"),
        ({"url": "http://a.test/", "limit": "0"}, "limit"),
        ({"url": "http://a.test/", "output": "xml"}, "output"),
        ({"url": "http://a.test/", "fl": "url,colour"}, "fl"),
        ({"url": "http://a.test/", "filter": "~url:(unclosed"}, "filter"),
        ({"url": "http://a.test/", "filter": "=size:1"}, "filter"),
        ({"url": "http://a.test/", "type": "get-metadata"}, "type"),
        ({"url": "http://a.test/", "sort": "random"}, "sort"),
        ({"url": "http://a.test/", "page": "-1"}, "page"),
    ],
)
def test_a_bad_parameter_is_named(params: dict[str, str], parameter: str) -> None:
    with pytest.raises(InvalidRecordError) as caught:
        parse_cdx_query({k: [v] for k, v in params.items()})
    assert caught.value.field == parameter


def test_pages_of_results_stop_at_the_last(stored: tuple[WebIndex, list[dict[str, Any]]]) -> None:
    index, _ = stored
    found = find_captures(
        index, parse_cdx_query({"url": ["example.com"], "matchType": ["domain"]}), source="s"
    )
    assert cdx_page(found, 0) == found[:1000] and cdx_page(found, None) == found
    with pytest.raises(InvalidRecordError, match="Page 1 invalid: First Page is 0, Last Page is 0"):
        cdx_page(found, 1)


def test_a_redirect_target_is_found_from_its_own_second(
    stored: tuple[WebIndex, list[dict[str, Any]]],
) -> None:
    """Its attempt began a second or more earlier, before ``from``."""
    index, captures = stored
    targets = [c for c in captures if c["position"] > 0]
    assert targets
    for c in targets:
        f = c["fields"]
        params = {"url": [f["url"]], "from": [f["timestamp"]], "to": [f["timestamp"]], "type": [c["type"]]}
        got = [x for x, _ in find_captures(index, parse_cdx_query(params), source="store")]
        assert f in got


def test_reverse_keeps_the_order_of_captures_of_one_second(tmp_path: Path) -> None:
    """Read newest first, captures of one key and second come as a stable reverse sort leaves
    them (in key order), as when every capture is sorted at once."""
    url = "http://a.example/x"
    at = datetime(2024, 5, 31, 23, 59, 59, tzinfo=UTC)
    with WebIndex(tmp_path / "s") as index:
        for n, status in enumerate([200, 404, 500, 200, 301]):
            when = at + timedelta(seconds=n // 3, microseconds=n)
            response = Response(
                url=url,
                request_url=url,
                status_code=status,
                headers={"content-type": f"text/t{n}"},
                timestamp=when,
                data=b"x",
                is_final=True,
                fetcher_name="test",
                fetcher_version="1.0",
                fetcher_calibre=10,
            )
            index.insert("get", url, when, metadata(url), [response])
        index.flush()
        forward = [f for f, _ in find_captures(index, parse_cdx_query({"url": [url]}), source="s")]
        expected = sorted(forward, key=lambda f: (f["urlkey"], f["timestamp"]), reverse=True)
        for limit in ("1", "2", "4", "10"):
            query = parse_cdx_query({"url": [url], "sort": ["reverse"], "limit": [limit]})
            got = [f for f, _ in find_captures(index, query, source="s")]
            assert got == expected[: int(limit)]
