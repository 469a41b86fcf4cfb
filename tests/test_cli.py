"""The command line: JSONL in and out, exit codes scripts can rely on."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.factories import T0, attempt, insertion_request
from web_index import WebIndex
from web_index.cli import app
from web_index.models import SimplePageQuery, write_queries

runner = CliRunner()


def request_line(url: str, state: str = "success", hops: int = 1) -> str:
    return json.dumps(insertion_request(*attempt(url, T0, state=state, hops=hops)))


def run(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


def test_insert_query_presence_round_trip(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    src = tmp_path / "in.jsonl"
    src.write_text(
        "\n".join(
            [
                request_line("https://a.example.com/", hops=2),
                request_line("https://b.example.com/", "timeout"),
            ]
        )
        + "\n"
    )
    code, _out, err = run("insert", str(src), "--store", store)
    assert code == 0 and "stored 2 attempts" in err
    code, out, _ = run(
        "query", "https://a.example.com/", "https://c.example.com/", "--store", store, "--bodies"
    )
    lines = [json.loads(x) for x in out.splitlines()]
    assert code == 0 and len(lines) == 2 and lines[1]["result"] is None
    page = lines[0]["result"]
    assert (
        len(page["responses"]) == 2 and base64.b64decode(page["responses"][-1]["data"]) == b"<html>ok</html>"
    )
    code, out, _ = run("query", "https://a.example.com/", "--store", store)
    assert "data" not in json.loads(out)["result"]["responses"][-1]  # bodies only on request
    code, out, _ = run("query", "https://b.example.com/", "--type", "get-metadata", "--store", store)
    assert json.loads(out)["result"]["state"] == "timeout"
    code, out, _ = run(
        "presence", "https://a.example.com/", "https://c.example.com/", "--store", store, "--fail-missing"
    )
    assert code == 1 and [json.loads(x)["present"] for x in out.splitlines()] == [True, False]


def test_queries_from_parquet_and_jsonl_files(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with WebIndex(store) as index:
        key = index.insert(*attempt("https://a.example.com/"))
    qs = [SimplePageQuery(url="https://a.example.com/"), key, SimplePageQuery(url="https://z.example.com/")]
    write_queries(tmp_path / "q.parquet", qs)
    (tmp_path / "q.jsonl").write_text("\n".join(json.dumps(q.to_dict()) for q in qs))
    for name in ("q.parquet", "q.jsonl"):
        code, out, _ = run("presence", "--from", str(tmp_path / name), "--store", str(store))
        assert code == 0 and [json.loads(x)["present"] for x in out.splitlines()] == [True, True, False]


def test_invalid_line_stops_with_exit_2_keeping_what_came_before(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    lines = [
        request_line("https://a.example.com/"),
        '{"type": "get", "url": "nope"}',
        request_line("https://b.example.com/"),
    ]
    code, _, err = run("insert", "-", "--store", store, "--batch", "1", input="\n".join(lines))
    assert code == 2 and "<stdin>:2" in err and "stored 1" in err
    code, out, _ = run("presence", "https://a.example.com/", "https://b.example.com/", "--store", store)
    assert [json.loads(x)["present"] for x in out.splitlines()] == [True, False]
    code, _, err = run("insert", "-", "--store", store, "--skip-invalid", input="\n".join(lines))
    assert code == 0 and "skipped 1" in err


def test_semantic_error_names_the_field(tmp_path: Path) -> None:
    line = json.loads(request_line("https://a.example.com/"))
    line["timestamp"] = "2024-08-01T12:00:00"  # no zone
    code, _, err = run("insert", "-", "--store", str(tmp_path / "s"), input=json.dumps(line))
    assert code == 2 and "timestamp" in err and "naive" in err


@pytest.mark.parametrize(
    "args", [["query"], ["query", "not a url"], ["query", "https://a.example.com/", "--calibre", "300"]]
)
def test_bad_query_arguments_exit_2(tmp_path: Path, args: list[str]) -> None:
    WebIndex(tmp_path / "s").close()
    assert run(*args, "--store", str(tmp_path / "s"))[0] == 2


def test_missing_store_exits_4(tmp_path: Path) -> None:
    assert run("query", "https://a.example.com/", "--store", str(tmp_path / "nothing"))[0] == 4


def test_flush_compact_verify_stats(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with WebIndex(store) as index:
        index.insert_many([attempt(f"https://a.example.com/{n}") for n in range(5)])
    assert run("flush", "--store", str(store))[0] == 0
    with WebIndex(store) as index:
        index.insert_many([attempt(f"https://a.example.com/{n}") for n in range(5)])
        index.flush()
    code, _, err = run("compact", "--store", str(store))
    assert code == 0 and "compacted 2 partitions" in err  # get and get-metadata of one domain
    code, _, err = run("verify", "--store", str(store))
    assert code == 0 and "clean" in err
    code, out, _ = run("stats", "--store", str(store), "--json")
    data = json.loads(out)
    assert data["records"] == 20 and data["files"] == 2
    index_file = next((store / "_index").rglob("*.parquet"))
    index_file.write_bytes(b"garbage")
    code, _, err = run("verify", "--store", str(store))
    assert code == 0 and "month index unreadable" in err  # derived data: a note, not a problem
    next(p for p in store.rglob("*.parquet") if "_index" not in p.parts).write_bytes(b"garbage")
    code, _, err = run("verify", "--store", str(store))
    assert code == 3 and "problem" in err


def _one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_missing_input_file_exits_2_naming_it(tmp_path: Path) -> None:
    result = runner.invoke(app, ["insert", str(tmp_path / "nope.jsonl"), "--store", str(tmp_path / "s")])
    assert result.exit_code == 2, result.exc_info
    assert "nope.jsonl" in _one_line(result.stderr)


def test_a_store_that_cannot_be_written_exits_4(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    src = tmp_path / "in.jsonl"
    src.write_text(request_line("https://a.example.com/") + "\n")
    for store in (tmp_path / "file" / "s", tmp_path / "file"):
        result = runner.invoke(app, ["insert", str(src), "--store", str(store)])
        assert result.exit_code == 4, result.exc_info
        assert _one_line(result.stderr).startswith("error: ")


@pytest.mark.parametrize(
    "error",
    [
        sqlite3.OperationalError("cannot rollback - no transaction is active"),
        OSError(28, "No space left on device"),
    ],
)
def test_an_io_error_inside_the_store_exits_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    def broken(self: WebIndex, items: object) -> None:
        raise error

    monkeypatch.setattr(WebIndex, "insert_many", broken)
    code, _, err = run(
        "insert", "-", "--store", str(tmp_path / "s"), input=request_line("https://a.example.com/")
    )
    assert code == 4 and str(error.args[-1]) in _one_line(err)


@pytest.mark.parametrize(
    "args",
    [
        ["query", "http://[fe80::1%25eth0]/"],
        ["presence", "https://a.example.com/\udcff"],
        ["query", "https://a.example.com/", "--at", "9999-99-99"],
        ["query", "https://a.example.com/", "--type", "[/bold]"],
    ],
)
def test_bad_query_input_exits_2_in_one_line(tmp_path: Path, args: list[str]) -> None:
    WebIndex(tmp_path / "s").close()
    result = runner.invoke(app, [*args, "--store", str(tmp_path / "s")])
    assert result.exit_code == 2, result.exc_info
    assert _one_line(result.stderr).startswith("error: ")


def test_query_files_with_invalid_bytes_exit_2_naming_the_line(tmp_path: Path) -> None:
    WebIndex(tmp_path / "s").close()
    (tmp_path / "q.jsonl").write_bytes(b'{"url": "https://a.example.com/"}\n\n{"url": "\xff"}\n')
    result = runner.invoke(
        app, ["query", "--from", str(tmp_path / "q.jsonl"), "--store", str(tmp_path / "s")]
    )
    assert result.exit_code == 2, result.exc_info
    assert "q.jsonl:3" in _one_line(result.stderr)


def test_long_errors_stay_on_one_line(tmp_path: Path) -> None:
    line = json.loads(request_line("https://a.example.com/"))
    line["metadata"]["url"] = "https://a.example.com/" + "x" * 300
    code, _, err = run("insert", "-", "--store", str(tmp_path / "s"), input=json.dumps(line))
    assert code == 2 and "<stdin>:1: metadata.url" in _one_line(err)
