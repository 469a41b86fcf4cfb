"""Fuzzing the command line: whatever the input, a documented exit code, never an
uncaught exception, an error in one line, and nothing stored from a refused line on."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tests.test_cli_insert import request
from web_index import WebIndex
from web_index.cli import app
from web_index.models import SimplePageQuery

runner = CliRunner()

_weird_text = st.text(st.characters(exclude_characters="\n"), max_size=20) | st.sampled_from(
    ["", " ", "\udcff", "\x00", "ä€𝄞", "[/x]", "[bold]", "%", "%zz", "\\", "é" * 50]
)
_numbers = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 99, 100, 255, 256, 999, 1000, 2**63, -(2**63) - 1]),
    st.floats(allow_nan=False),
)
_bad_urls = st.sampled_from(
    [
        "http://[fe80::1%25eth0]/",
        "http://[fe80::1%eth0]/",
        "http://[::1/",
        "http://[zz]/",
        "https://a.com:99999/",
        "https://a.com:-1/",
        "https://\udcff.com/",
        "https://a.com/\udcff",
        "https://u\udcff@a.com/",
        "https://a.com/#\udcff",
        "https://xn--/",
        "https://..com/",
        "ftp://a.com/",
        "https:///x",
        "https://" + "a" * 300 + ".com/",
        "https://[/",
        "https://a.com/%",
    ]
)
_years = st.integers(1, 9999)
_offsets = st.sampled_from(["Z", "+00:00", "+01:00", "-01:00", "+23:59", "-23:59", "", "+14:00"])
_iso = st.builds(
    lambda y, m, d, off, frac: f"{y:04d}-{m:02d}-{d:02d}T00:00:00{frac}{off}",
    _years,
    st.integers(1, 12),
    st.integers(1, 28),
    _offsets,
    st.sampled_from(["", ".5", ".999999"]),
)
_timestamps = st.one_of(
    _iso,
    st.sampled_from(
        [
            "9999-12-31T00:00:00Z",
            "9999-12-31T23:59:59.999999-23:59",
            "0001-01-01T00:00:00+01:00",
            "0001-01-01T00:00:00Z",
            "1969-12-31T23:59:59.999999Z",
            "1970-01-01T00:00:00Z",
            "9998-12-31T23:59:59.999999Z",
            "9999-01-01T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "garbage",
            "",
        ]
    ),
    _weird_text,
)
_json_values = st.recursive(
    st.none() | st.booleans() | _numbers | _weird_text | _bad_urls | _timestamps,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_weird_text, children, max_size=3),
    max_leaves=6,
)

# Where a mutation lands: a top-level key, a metadata key or a key of the first response.
_PATHS = [("type",), ("url",), ("timestamp",), ("metadata",), ("data",), ("extra",)]
_PATHS += [("metadata", k) for k in ("state", "url", "fetcher_name", "fetcher_version", "fetcher_calibre")]
_PATHS += [("metadata", k) for k in ("timestamp", "request_id", "logs", "traceback", "run_time")]
_PATHS += [
    ("data", 0, k)
    for k in (
        "url",
        "request_url",
        "status_code",
        "headers",
        "timestamp",
        "data",
        "retry_attempt",
        "is_final",
        "fetcher_name",
        "fetcher_version",
        "fetcher_calibre",
        "request_id",
    )
]


# Values a valid request may hold at these places: weird, but storable (mostly).
_FREE: dict[tuple[str | int, ...], st.SearchStrategy[Any]] = {
    ("metadata", "logs"): st.none() | st.text(),
    ("metadata", "traceback"): st.none() | _weird_text,
    ("metadata", "run_time"): st.none() | st.floats(min_value=0) | st.integers(0, 2**70),
    ("data", 0, "headers"): st.dictionaries(st.text(), _weird_text).map(
        lambda d: json.dumps(d, ensure_ascii=False)
    ),
    ("data", 0, "status_code"): st.integers(100, 999),
    ("data", 0, "retry_attempt"): st.integers(0, 255),
    ("data", 0, "timestamp"): _iso,
    ("timestamp",): _iso,
    ("extra",): _json_values,
}


@st.composite
def mutated_requests(draw: st.DrawFn, url: str) -> bytes:
    obj = request(url, method=draw(st.sampled_from(["get", "head"])))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_PATHS))
        values = _json_values
        if draw(st.booleans()):  # half the time: a change a valid request may make
            path = draw(st.sampled_from(sorted(_FREE, key=str)))
            values = _FREE[path]
        parent: Any = obj
        for step in path[:-1]:
            if isinstance(parent, dict):
                parent = parent.get(step)
            elif isinstance(parent, list) and isinstance(step, int) and step < len(parent):
                parent = parent[step]
            else:
                parent = None
            if not isinstance(parent, dict | list):
                break  # an earlier mutation replaced the way there
        else:
            last = path[-1]
            if isinstance(parent, dict) and draw(st.integers(0, 4)) == 0:
                parent.pop(last, None)
            elif isinstance(parent, dict) or (isinstance(last, int) and last < len(parent)):
                parent[last] = draw(values)
    raw = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    return raw.encode("utf-8", "surrogatepass")


_lines = st.one_of(
    st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")),
    st.builds(lambda u: u, mutated_requests(url="https://fuzz.example.com/x")),
)


def _present(store: Path, urls: list[str]) -> list[bool]:
    with WebIndex(store, read_only=True) as index:
        return [
            a or b
            for a, b in zip(
                index.presence([SimplePageQuery(url=u, type="get-metadata") for u in urls]),
                index.presence([SimplePageQuery(url=u, type="head-metadata") for u in urls]),
                strict=True,
            )
        ]


def _buffered(store: Path) -> int:
    with WebIndex(store, read_only=True) as index:
        count: int = index.stats().buffered_attempts
    return count


def _no_crash(result: Any) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
    assert "Traceback" not in result.stderr


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=_lines, skip=st.booleans(), batch=st.integers(1, 3))
@example(line=b'{"type": "\xff"}', skip=False, batch=1)
@example(line=json.dumps(request("http://[fe80::1%25eth0]/")).encode(), skip=False, batch=1)
def test_any_insert_line_gets_a_documented_answer(line: bytes, skip: bool, batch: int) -> None:
    before, after = "https://before.example.com/", "https://after.example.com/"
    with tempfile.TemporaryDirectory() as tmp:
        store, src = Path(tmp) / "store", Path(tmp) / "in.jsonl"
        src.write_bytes(
            b"\n".join([json.dumps(request(before)).encode(), line, json.dumps(request(after)).encode()])
        )
        args = ["insert", str(src), "--store", str(store), "--batch", str(batch)]
        result = runner.invoke(app, args + (["--skip-invalid"] if skip else []))
        _no_crash(result)
        err = [x for x in result.stderr.splitlines() if x.strip()]
        stored = _buffered(store)
        blank = not line.strip()
        event(f"exit {result.exit_code}, {stored} stored")
        if result.exit_code == 2:
            assert not skip
            assert _present(store, [before, after]) == [True, False] and stored == 1
            assert len(err) == 1 and err[0].startswith(f"error: {src}:2: "), err
        else:
            assert result.exit_code == 0, result.stderr
            assert _present(store, [before, after]) == [True, True] and stored in (2, 3)
            assert err[-1] == f"stored {stored} attempts" + (
                ", skipped 1 invalid" if stored == 2 and not blank else ""
            )
            if stored == 2 and not blank:
                assert len(err) == 2 and err[0].startswith(f"skipped {src}:2: "), err
            else:
                assert len(err) == 1, err


@pytest.fixture(scope="module")
def query_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.factories import attempt

    store = tmp_path_factory.mktemp("fuzz") / "store"
    with WebIndex(store) as index:
        index.insert_many([attempt(f"https://a.example.com/{n}") for n in range(3)])
        index.flush()
        index.insert(*attempt("https://a.example.com/buffered"))
    return store


_good_urls = st.sampled_from(
    [
        "https://a.example.com/0",
        "https://A.example.com:443/1#x",
        "http://a.example.com/",
        "https://a.example.com/buffered",
    ]
)
_query_urls = st.one_of(
    _weird_text,
    _bad_urls,
    _good_urls,
    st.builds(lambda host, rest: f"https://{host}/{rest}", _weird_text, _weird_text),
)
_any_options = st.fixed_dictionaries(
    {},
    optional={
        "--at": _timestamps,
        "--not-before": _timestamps,
        "--not-after": _timestamps,
        "--calibre": st.integers(-(2**70), 2**70).map(str),
        "--request-id": _weird_text,
        "--type": st.sampled_from(["get", "head", "get-metadata", "head-metadata", "post", "", "GET"]),
    },
)
# Valid arguments, times of any year and offset: the store answers these.
_valid_options = st.fixed_dictionaries(
    {},
    optional={
        "--at": _iso,
        "--not-before": _iso,
        "--not-after": _iso,
        "--calibre": st.integers(0, 100).map(str),
        "--type": st.sampled_from(["get", "head", "get-metadata", "head-metadata"]),
    },
)
_query_files = st.lists(
    st.one_of(
        st.binary(max_size=60).map(lambda b: b.replace(b"\n", b"")),
        st.dictionaries(
            st.sampled_from(
                ["url", "type", "timestamp", "not_before", "not_after", "calibre", "request_id", "kind"]
            ),
            _json_values,
            max_size=4,
        ).map(lambda d: json.dumps(d).encode("utf-8", "surrogatepass")),
    ),
    max_size=3,
)
_query_args = st.one_of(
    st.tuples(st.lists(_query_urls, max_size=3), _any_options, st.none() | _query_files),
    st.tuples(st.lists(_good_urls, min_size=1, max_size=3), _valid_options, st.none()),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["query", "presence"]), arguments=_query_args, fail_missing=st.booleans())
@example(kind="query", arguments=(["http://[fe80::1%25eth0]/"], {}, None), fail_missing=False)
@example(
    kind="query",
    arguments=(
        ["https://a.example.com/0"],
        {"--at": "0001-01-01T00:00:00+01:00", "--not-after": "9999-12-31T23:59:59-23:59"},
        None,
    ),
    fail_missing=True,
)
def test_any_query_arguments_get_a_documented_answer(
    query_store: Path,
    kind: str,
    arguments: tuple[list[str], dict[str, str], list[bytes] | None],
    fail_missing: bool,
) -> None:
    urls, options, from_file = arguments
    args = [kind, "--store", str(query_store)] + [f"{k}={v}" for k, v in options.items()]
    args += ["--fail-missing"] if fail_missing else []
    with tempfile.TemporaryDirectory() as tmp:
        if from_file is not None:
            src = Path(tmp) / "q.jsonl"
            src.write_bytes(b"\n".join(from_file))
            args += ["--from", str(src)]
        result = runner.invoke(app, [*args, "--", *urls])
    _no_crash(result)
    event(f"exit {result.exit_code}")
    assert result.exit_code in ((0, 1, 2) if fail_missing else (0, 2)), result.stderr
    err = [x for x in result.stderr.splitlines() if x.strip()]
    if result.exit_code == 2:
        assert len(err) == 1 and err[0].startswith("error: "), err
        assert result.stdout == ""
    else:
        answers = [json.loads(x) for x in result.stdout.splitlines()]
        assert answers and all(("result" if kind == "query" else "present") in a for a in answers)
        if result.exit_code == 1:  # --fail-missing says on stderr what was missing
            missing = sum(1 for a in answers if a.get("result", a.get("present")) in (None, False))
            what = "matched nothing" if kind == "query" else "is absent"
            queries = "query" if len(answers) == 1 else "queries"
            assert err == [f"error: {missing} of {len(answers)} {queries} {what} (--fail-missing)"]
        else:
            assert err == []
