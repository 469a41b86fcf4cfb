"""The JSON query API over real HTTP: ``POST /api/query`` and ``/api/presence``
answer as ``WebIndex.query`` and ``presence`` do, line for line, streamed a chunk at
a time, and refuse a bad batch whole; the caps on a request's size."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.factories import T0, attempt
from tests.server.serving import serving
from web_index import WebIndex
from web_index.models import PageKey, Query, query_from_dict, result_json
from web_index.server import _api

STORED = [f"https://example.com/p/{i}" for i in range(4)] + ["https://www.other.org/x"]
ABSENT = ["https://example.com/p/9", "https://nowhere.example/"]
TYPES = ["get", "head", "get-metadata", "head-metadata"]
NDJSON = {"content-type": "application/x-ndjson"}


def _fill(index: WebIndex) -> list[PageKey]:
    items = []
    for day in range(3):
        for i, url in enumerate(STORED):
            ts = T0 + timedelta(days=day, minutes=i)
            state = "timeout" if (day + i) % 4 == 3 else "success"
            items.append(attempt(url, ts, state=state, calibre=10 + 10 * (i % 2), hops=1 + day % 2))
            items.append(attempt(url, ts + timedelta(hours=1), method="head", body=b""))
    keys = index.insert_many(items[: len(items) // 2])
    index.flush()  # some in Parquet part files, the rest in the buffer
    return keys + index.insert_many(items[len(items) // 2 :])


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebIndex, list[PageKey]]]:
    with WebIndex(tmp_path_factory.mktemp("api") / "store") as index:
        yield index, _fill(index)


@pytest.fixture(scope="module")
def http(stored: tuple[WebIndex, list[PageKey]]) -> Iterator[httpx.Client]:
    with serving(stored[0]) as client:
        yield client


def _lines(response: httpx.Response) -> list[Any]:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/x-ndjson"
    return [json.loads(line) for line in response.text.splitlines()]


def _expected(index: WebIndex, objects: list[dict[str, Any]], bodies: bool) -> list[Any]:
    queries = [query_from_dict(o) for o in objects]
    return [
        {"query": q.to_dict(), "result": result_json(r, bodies=bodies)}
        for q, r in zip(queries, index.query(queries), strict=True)
    ]


def _post(http: httpx.Client, path: str, objects: list[Any], ndjson: bool, **params: str) -> httpx.Response:
    if ndjson:
        body = "".join(json.dumps(o) + "\n" for o in objects)
        return http.post(path, content=body, headers=NDJSON, params=params)
    return http.post(path, json=objects, params=params)


_times = st.integers(-24, 4 * 24).map(lambda h: (T0 + timedelta(hours=h)).isoformat())
_simple = st.fixed_dictionaries(
    {"url": st.sampled_from(STORED + ABSENT), "type": st.sampled_from(TYPES)},
    optional={"calibre": st.sampled_from([10, 20, 30]), "calibre_strict": st.booleans()},
)


@st.composite
def _time_aware(draw: st.DrawFn) -> dict[str, Any]:
    out = draw(_simple)
    bounds = sorted(draw(st.lists(_times, min_size=2, max_size=2)))
    chosen = draw(st.sets(st.sampled_from(["timestamp", "not_before", "not_after"]), min_size=1))
    for name in chosen:
        out[name] = draw(_times) if name == "timestamp" else bounds[name == "not_after"]
    return out


@st.composite
def _key(draw: st.DrawFn, keys: list[PageKey]) -> dict[str, Any]:
    out = draw(st.sampled_from(keys)).to_dict()
    if draw(st.booleans()):
        out["type"] = draw(st.sampled_from(TYPES))
    if draw(st.booleans()):
        out["request_id"] = str(uuid.uuid4())  # no such attempt
    return out


def _batches(keys: list[PageKey]) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(st.one_of(_simple, _time_aware(), _key(keys)), max_size=30)


@settings(max_examples=40)
@given(data=st.data(), bodies=st.booleans(), ndjson=st.booleans())
def test_answers_equal_the_index_line_by_line(
    stored: tuple[WebIndex, list[PageKey]],
    http: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
    data: st.DataObject,
    bodies: bool,
    ndjson: bool,
) -> None:
    monkeypatch.setattr(_api, "CHUNK", 3)  # batches of several chunks, and their edges
    index, keys = stored
    objects = data.draw(_batches(keys))
    got = _lines(_post(http, "/api/query", objects, ndjson, bodies=str(bodies).lower()))
    assert got == _expected(index, objects, bodies)
    queries = [query_from_dict(o) for o in objects]
    present = _lines(_post(http, "/api/presence", objects, ndjson))
    assert present == [
        {"query": q.to_dict(), "present": p} for q, p in zip(queries, index.presence(queries), strict=True)
    ]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
_fields = st.sampled_from(
    ["url", "type", "kind", "timestamp", "not_before", "not_after", "calibre", "request_id"]
)


@settings(max_examples=100)
@given(
    st.dictionaries(_fields, _json | st.sampled_from([STORED[0], "get", "key", "2024-08-01T12:00Z"])) | _json
)
def test_any_json_is_answered_or_refused_naming_the_query(http: httpx.Client, anything: Any) -> None:
    got = http.post("/api/query", json=[{"url": STORED[0]}, anything])
    assert got.status_code in (200, 400), got.text
    if got.status_code == 400:
        assert got.json()["parameter"].startswith("queries[1]")
        assert got.json()["error"].startswith(got.json()["parameter"] + ": ")


def test_the_batches_asked_find_and_miss(stored: tuple[WebIndex, list[PageKey]]) -> None:
    # The property above is worth something only if its batches find pages,
    # metadata and nothing: here, the kinds of answer it compares.
    index, keys = stored
    objects = [k.to_dict() for k in keys] + [{"url": u, "type": t} for u in ABSENT for t in TYPES]
    results = index.query([query_from_dict(o) for o in objects])
    kinds = {type(r).__name__ for r in results}
    assert kinds == {"Page", "AttemptMetadata", "NoneType"}


def test_bodies_on_and_off_and_the_forms_of_a_body(
    stored: tuple[WebIndex, list[PageKey]], http: httpx.Client
) -> None:
    index, keys = stored
    key = next(k for k in keys if k.type.value == "get")
    objects: list[dict[str, Any]] = [{"url": key.url}, key.to_dict(), {"url": ABSENT[0]}]
    without = _lines(http.post("/api/query", json=objects))
    final = without[1]["result"]["responses"][-1]
    assert "data" not in final and final["data_length"] == len(b"<html>ok</html>")
    with_bodies = _lines(http.post("/api/query", json=objects, params={"bodies": "true"}))
    assert "data_length" not in with_bodies[1]["result"]["responses"][-1]
    assert with_bodies == _expected(index, objects, True) and without == _expected(index, objects, False)
    assert with_bodies[2] == {"query": query_from_dict(objects[2]).to_dict(), "result": None}
    ndjson = "\n".join(json.dumps(o) for o in objects).replace("\n", "\n\n", 1) + "\n"
    for content_type in ("application/x-ndjson", "application/jsonl; charset=utf-8", ""):
        headers = {"content-type": content_type} if content_type else {}
        assert _lines(http.post("/api/query", content=ndjson, headers=headers)) == without
    # The media type decides: an NDJSON line that is an array is not a query.
    arrayed = http.post("/api/query", content=json.dumps(objects), headers=NDJSON)
    assert arrayed.json() == {"error": "queries[0]: expected an object, got list", "parameter": "queries[0]"}
    # No media type said: a "[" is an array.
    assert (
        _lines(http.post("/api/query", content=json.dumps(objects), headers={"content-type": ""})) == without
    )
    assert _lines(http.post("/api/query", content=b"")) == []
    assert http.post("/api/query", json=objects, params={"bodies": "maybe"}).json()["parameter"] == "bodies"


def test_a_batch_larger_than_a_chunk_streams_in_order(
    stored: tuple[WebIndex, list[PageKey]], http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, keys = stored
    objects = [{"url": STORED[i % 5] if i % 3 else ABSENT[0]} for i in range(_api.CHUNK * 2 + 500)]
    objects[-1] = keys[0].to_dict()
    answer = index.query
    first_read = threading.Event()
    sizes: list[int] = []
    waited_out: list[bool] = []

    def gated(chunk: list[Query]) -> list[Any]:
        sizes.append(len(chunk))
        if len(sizes) > 1:  # every chunk after the first waits for the client to read the first
            waited_out.append(not first_read.wait(10))
        return answer(chunk)

    monkeypatch.setattr(index, "query", gated)
    got = []
    with http.stream("POST", "/api/query", json=objects) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        for _ in range(_api.CHUNK):
            got.append(json.loads(next(lines)))
        first_read.set()  # the first chunk arrived before the second was asked
        got += [json.loads(line) for line in lines]
    assert sizes == [_api.CHUNK, _api.CHUNK + 500] and waited_out == [False]
    monkeypatch.undo()
    assert got == _expected(index, objects, False)


@pytest.mark.parametrize("path", ["/api/presence", "/api/query"])
def test_chunks_grow_while_their_bodies_are_light(
    stored: tuple[WebIndex, list[PageKey]], http: httpx.Client, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    index, _ = stored
    c = _api.CHUNK
    monkeypatch.setattr(_api, "LARGEST", 4 * c)
    objects = [{"url": (STORED + ABSENT)[i % 7]} for i in range(c * 11 + 1)]
    sizes: list[int] = []
    method = path.rpartition("/")[2]
    answer = getattr(index, method)
    monkeypatch.setattr(index, method, lambda chunk: sizes.append(len(chunk)) or answer(chunk))
    got = _lines(http.post(path, json=objects))
    assert sizes == [c, 2 * c, 4 * c, 4 * c, 1]
    queries = [query_from_dict(o) for o in objects]
    key = "present" if method == "presence" else "result"
    expected = [r if key == "present" else result_json(r, bodies=False) for r in answer(queries)]
    assert got == [{"query": q.to_dict(), key: r} for q, r in zip(queries, expected, strict=True)]


def test_query_chunks_shrink_when_their_bodies_are_heavy(
    stored: tuple[WebIndex, list[PageKey]], http: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    index, _ = stored
    c = _api.CHUNK
    body = len(b"<html>ok</html>")  # every stored page's, and every query below finds one
    monkeypatch.setattr(_api, "BODY_BUDGET", body * c // 4)
    monkeypatch.setattr(_api, "SMALLEST", c // 8)
    sizes: list[int] = []
    answer = index.query
    monkeypatch.setattr(index, "query", lambda chunk: sizes.append(len(chunk)) or answer(chunk))
    got = _lines(http.post("/api/query", json=[{"url": STORED[i % 5]} for i in range(2 * c)]))
    assert len(got) == 2 * c and all(line["result"] is not None for line in got)
    assert sizes == [c, c // 4, c // 4, c // 4, c // 4]
    monkeypatch.setattr(_api, "BODY_BUDGET", 1)
    sizes.clear()
    assert len(_lines(http.post("/api/query", json=[{"url": STORED[0]}] * (2 * c)))) == 2 * c
    assert sizes == [c, *[c // 8] * 8]


LATE = _api.CHUNK * 2 + 3


@pytest.mark.parametrize(
    ("position", "bad", "parameter", "says"),
    [
        (3, {"url": "ftp://example.com/"}, "queries[3].url", "queries[3].url: "),
        (0, {"url": STORED[0], "type": "post"}, "queries[0].type", "'post' is not one of"),
        (1, ["not", "an object"], "queries[1]", "queries[1]: expected an object"),
        (2, {"url": STORED[0], "colour": "red"}, "queries[2]", "unknown field(s) ['colour']"),
        (2, {"url": STORED[0], "not_before": "2024-09-01T00:00Z", "not_after": "2024-08-01T00:00Z"},
         "queries[2].not_before", "window is empty"),
        (LATE, {"url": STORED[0], "kind": "vague"}, f"queries[{LATE}].kind", "'vague'"),  # after two chunks
    ],
)  # fmt: skip
@pytest.mark.parametrize("ndjson", [False, True])
def test_a_bad_query_refuses_the_whole_batch_naming_it(
    stored: tuple[WebIndex, list[PageKey]],
    http: httpx.Client,
    monkeypatch: pytest.MonkeyPatch,
    position: int,
    bad: Any,
    parameter: str,
    says: str,
    ndjson: bool,
) -> None:
    index, _ = stored
    asked: list[int] = []
    answer = index.query
    monkeypatch.setattr(index, "query", lambda chunk: asked.append(len(chunk)) or answer(chunk))
    objects: list[Any] = [{"url": STORED[0]}] * (position + 5)
    objects[position] = bad
    for path in ("/api/query", "/api/presence"):
        refused = _post(http, path, objects, ndjson)
        assert refused.status_code == 400 and refused.headers["content-type"] == "application/json"
        assert refused.json()["parameter"] == parameter and says in refused.json()["error"]
        assert refused.json()["error"].startswith(f"{parameter}: ")
    assert asked == []  # nothing was answered


def test_malformed_json_is_named(http: httpx.Client) -> None:
    lines = '{"url": "https://example.com/"}\n\n{"url": \n'
    refused = http.post("/api/query", content=lines, headers=NDJSON)
    assert refused.status_code == 400
    assert refused.json()["parameter"] == "body" and refused.json()["error"].startswith(
        "body: line 3: not valid JSON"
    )
    broken = http.post(
        "/api/query",
        content='[{"url": "https://example.com/"},',
        headers={"content-type": "application/json"},
    )
    assert broken.status_code == 400 and broken.json()["error"].startswith("body: not valid JSON")
    # application/json means an array, whatever follows
    lined = http.post(
        "/api/query", content=lines.splitlines()[0], headers={"content-type": "application/json"}
    )
    assert lined.json() == {
        "error": "body: expected a JSON array of queries (or NDJSON: one a line)",
        "parameter": "body",
    }
    latin = http.post("/api/query", content=b'{"url": "https://example.com/\xe9"}', headers=NDJSON)
    assert latin.json()["error"] == "body: line 1: not valid UTF-8: invalid continuation byte at byte 29"


def test_a_batch_over_max_batch_is_a_413(stored: tuple[WebIndex, list[PageKey]]) -> None:
    with serving(stored[0], max_batch=3) as http:
        for ndjson in (False, True):
            objects = [{"url": u} for u in STORED[:3]]
            assert len(_lines(_post(http, "/api/query", objects, ndjson))) == 3
            over = _post(http, "/api/presence", [*objects, {"url": STORED[3]}], ndjson)
            assert over.status_code == 413
            assert over.json() == {
                "error": "queries: more than max_batch (3) in one request: split the batch",
                "parameter": "queries",
            }


def test_a_body_over_max_body_is_refused_without_reading_it(stored: tuple[WebIndex, list[PageKey]]) -> None:
    sent = 0

    def endless() -> Iterator[bytes]:
        nonlocal sent
        while sent < 256 * 2**20:  # would take seconds, where the refusal takes milliseconds
            sent += 2**16
            yield b" " * 2**16

    with serving(stored[0], max_body=2**20) as http:
        refused = http.post("/api/query", content=endless(), headers=NDJSON)  # chunked: read until over
        assert refused.status_code == 413 and refused.json()["parameter"] == "body"
        assert "max_body (1,048,576 bytes)" in refused.json()["error"]
        assert sent < 32 * 2**20
        assert len(_lines(http.post("/api/query", content=b" " * 2**20, headers=NDJSON))) == 0  # just fits
    with serving(stored[0], max_body=64 * 2**20) as http:
        sent = 0
        declared = {**NDJSON, "content-length": str(2**40)}
        refused = http.post("/api/query", content=endless(), headers=declared)  # refused before any is read
        assert refused.status_code == 413 and sent < 32 * 2**20


def test_a_client_leaving_mid_body_leaves_no_traceback(http: httpx.Client) -> None:
    errors: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = errors.append  # type: ignore[method-assign]
    logging.getLogger("uvicorn.error").addHandler(handler)
    try:
        assert http.base_url.port is not None
        with socket.create_connection(("127.0.0.1", http.base_url.port)) as raw:
            raw.sendall(
                b"POST /api/query HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n[" + b" " * 999
            )
            time.sleep(0.2)  # the server is reading the body
        assert _lines(http.post("/api/query", json=[])) == []  # still serving, and done with the other
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
    assert [r.getMessage() for r in errors if r.levelno >= logging.ERROR] == []


def test_the_limits_are_create_apps_and_the_clis(stored: tuple[WebIndex, list[PageKey]]) -> None:
    import inspect

    from web_index.cli._serve import serve
    from web_index.server import create_app

    app, cli = inspect.signature(create_app).parameters, inspect.signature(serve).parameters
    for name in ("max_batch", "max_body"):
        assert app[name].default == cli[name].default
    with pytest.raises(ValueError, match="max_batch"):
        create_app(stored[0], max_batch=0)


def test_unknown_paths_and_methods(http: httpx.Client) -> None:
    assert http.get("/api/query").status_code == 405
    assert http.post("/api/insert", json=[]).status_code == 404  # no write token: no such endpoint
    assert http.post("/api/insert", json=[]).json() == http.post("/api/nothing", json=[]).json()
