"""A newcomer's first hour on the command line (issue 16): each rough edge, fixed and held."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.factories import T0, attempt
from tests.servers import Postgres
from web_index import WebIndex, __version__
from web_index.cli import app

runner = CliRunner()
CLI = [sys.executable, "-c", "from web_index.cli import main; main()"]


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_version_and_short_help() -> None:
    assert run("--version")[:2] == (0, f"web-index {__version__}\n")
    code, out, _ = run("-h")
    assert code == 0 and "Usage: web-index" in out and "query" in out
    code, out, _ = run("query", "-h")
    assert code == 0 and "--not-before" in out


@pytest.mark.parametrize(
    "command",
    [
        ["flush"],
        ["compact"],
        ["verify"],
        ["stats"],
        ["query", "https://a.example.com/"],
        ["presence", "https://x.org/"],
        ["lookup", "--digest", "sha1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"],
        ["export-warc", "warcs-out"],
        ["search", "example.com", "words"],
        ["serve", "--port", "1"],
    ],
)
def test_only_writers_create_a_store(tmp_path: Path, command: list[str]) -> None:
    typo = tmp_path / "typo_store"
    code, _, err = run(*command, "--store", str(typo))
    assert code == 4 and "no store at" in err and "does not exist" in err, err
    assert not typo.exists()  # nothing made on the way
    folder = tmp_path / "some_folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    code, _, err = run(*command, "--store", str(folder))
    assert code == 4 and "is not a web-index store" in err, err
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
    code, _, err = run(*command, "--store", str(folder / "notes.txt"))
    assert code == 4 and "is a file, not a store folder" in err and "does not exist" not in err, err


def _one_request(tmp_path: Path) -> str:
    line = tmp_path / "one.jsonl"
    method, url, ts, meta, _ = attempt("https://a.example.com/x", T0, state="timeout")
    request = {"type": method, "url": url, "timestamp": ts.isoformat(), "metadata": meta.to_dict()}
    line.write_text(json.dumps(request) + "\n")
    return str(line)


@pytest.mark.parametrize(
    "command",
    [
        ["init"],
        ["insert", "ONE"],
        ["import-warc", "EMPTY.warc"],
        ["fetch", "http://127.0.0.1:9/"],
        ["crawl", "http://127.0.0.1:9/", "--timeout", "5"],
    ],
)
def test_a_store_is_never_made_in_a_folder_that_holds_something_else(
    tmp_path: Path, command: list[str]
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<h1>mine</h1>")
    (tmp_path / "EMPTY.warc").write_bytes(b"")
    args = [
        _one_request(tmp_path) if a == "ONE" else str(tmp_path / a) if a.endswith(".warc") else a
        for a in command
    ]
    code, _, err = run(*args, "--store", str(site))
    assert code == 4 and "not a web-index store" in err and "index.html" in err, err
    assert sorted(p.name for p in site.iterdir()) == ["index.html"]  # left as it was
    code, _, err = run(*args, "--store", str(tmp_path / "site" / "index.html"))
    assert code == 4 and "is a file, not a store folder" in err, err


def test_import_warc_makes_a_new_store(tmp_path: Path) -> None:
    (tmp_path / "EMPTY.warc").write_bytes(b"")
    run("import-warc", str(tmp_path / "EMPTY.warc"), "--store", str(tmp_path / "new"))
    assert (tmp_path / "new" / "_web-index.json").is_file()


def test_init_takes_one_location(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    code, _, err = run("init", str(a), "--store", str(b))
    assert code == 2 and str(a) in err and str(b) in err and "--store" in err, err
    assert not a.exists() and not b.exists()
    code, _, err = run("init", str(a), env={"WEB_INDEX_STORE": str(b)})  # the argument wins over the env
    assert code == 0 and a.is_dir() and not b.exists(), err


def test_init_and_insert_create_one(tmp_path: Path) -> None:
    made = tmp_path / "made"
    assert run("init", str(made))[0] == 0
    assert run("init", str(made))[0] == 0  # again: left as it is
    code, out, _ = run("query", "--store", str(made), "https://a.example.com/")
    assert code == 0 and json.loads(out)["result"] is None
    with WebIndex(tmp_path / "by-python") as index:  # the Python API creates by default
        index.insert(*attempt("https://a.example.com/"))
    assert run("stats", "--store", str(tmp_path / "by-python"))[0] == 0


def _store_with_one(tmp_path: Path) -> str:
    store = tmp_path / "s"
    with WebIndex(store) as index:
        index.insert(*attempt("https://a.example.com/x", T0))  # 2024-08-01T12:00Z
    return str(store)


@pytest.mark.parametrize(
    ("args", "found"),
    [
        (["--at", "2024-08-01"], True),
        (["--at", "2024"], True),
        (["--not-before", "2024-08-01", "--not-after", "2024-08-01"], True),  # the whole day
        (["--not-after", "20240801"], True),
        (["--not-after", "20240801115959"], False),
        (["--not-before", "202408011201"], False),
        (["--not-before", "7d"], False),  # T0 is long ago
        (["--not-before", "99999d"], True),
        (["--not-before", "7d ago"], False),  # as the README and -h write an age
        (["--not-before", "99999d ago"], True),
        (["--at", "2024-08-01T12:00:00"], True),  # no zone: UTC, as every other form
        (["--not-after", "2024-08-01T11:59:59"], False),
    ],
)
def test_archive_time_forms(tmp_path: Path, args: list[str], found: bool) -> None:
    code, out, err = run("query", "--store", _store_with_one(tmp_path), *args, "https://a.example.com/x")
    assert code == 0, err
    assert (json.loads(out)["result"] is not None) is found


def test_a_time_that_is_none_of_the_forms_is_refused_naming_the_option(tmp_path: Path) -> None:
    code, _, err = run(
        "query", "--store", _store_with_one(tmp_path), "--at", "last tuesday", "https://x.org/"
    )
    assert code == 2 and err.startswith("error: --at: ") and "7d ago" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--from", "7d ago"], 1),  # nothing that recent: exit 1, no error about the time
        (["--from", "2024-08-01", "--to", "2024-08-01"], 0),  # the whole day
        (["--from", "2024-08-01T12:00:00", "--to", "20240801120000"], 0),
        (["--to", "2024-08-01T11:59:59"], 1),
    ],
)
def test_export_takes_the_same_times(tmp_path: Path, args: list[str], code: int) -> None:
    got, _, err = run("export-warc", "--store", _store_with_one(tmp_path), *args, str(tmp_path / "out"))
    assert got == code, err
    assert "not an ISO" not in err


@pytest.mark.parametrize("option", ["--from", "--to"])
def test_a_bad_export_time_names_the_option(tmp_path: Path, option: str) -> None:
    out = tmp_path / "out"
    code, _, err = run("export-warc", "--store", _store_with_one(tmp_path), option, "soon", str(out))
    assert code == 2 and err.startswith(f"error: {option}: "), err
    assert not out.exists()  # refused before anything was written


def test_query_from_a_file_of_urls(tmp_path: Path) -> None:
    store = _store_with_one(tmp_path)
    urls = tmp_path / "urls.txt"
    urls.write_text(
        "# what to ask\nhttps://a.example.com/x\n\nhttps://b.example.com/\n"
        '{"url": "https://a.example.com/x", "type": "get-metadata"}\n'
    )
    code, out, err = run("query", "--store", store, "--from", str(urls))
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["query"]["url"] for line in lines] == [
        "https://a.example.com/x",
        "https://b.example.com/",
        "https://a.example.com/x",
    ]
    assert [line["result"] is not None for line in lines] == [True, False, True]
    assert lines[2]["result"]["state"] == "success"  # the metadata record
    urls.write_text("https://a.example.com/x\nnot a url\n")
    code, _, err = run("query", "--store", store, "--from", str(urls))
    assert code == 2 and f"{urls}:2" in err


def test_the_buffer_has_a_flag_and_an_env_var(tmp_path: Path, postgres: Postgres) -> None:
    dsn = postgres.new_database()
    store = str(tmp_path / "s")
    line = tmp_path / "one.jsonl"
    method, url, ts, meta, _ = attempt("https://a.example.com/x", T0, state="timeout")
    request = {"type": method, "url": url, "timestamp": ts.isoformat(), "metadata": meta.to_dict()}
    line.write_text(json.dumps(request) + "\n")
    code, _, err = run("insert", "--store", store, str(line), env={"WEB_INDEX_BUFFER": dsn})
    assert code == 0, err
    ask = ["query", "--store", store, "--type", "get-metadata", url]
    assert json.loads(run(*ask, "--buffer", dsn)[1])["result"] is not None  # in PostgreSQL, not flushed
    assert json.loads(run(*ask)[1])["result"] is None  # the store's own SQLite buffer knows nothing
    code, _, err = run(*ask, "--buffer", "hunter2")
    assert code == 4 and "connection string" in err and "hunter2" not in err


def test_off_a_terminal_nothing_wraps_or_is_cut(tmp_path: Path) -> None:
    deep = tmp_path / ("a-rather-long-folder-name-" * 6) / "store"
    env = {**os.environ, "COLUMNS": "40"}
    run_ = subprocess.run([*CLI, "stats", "--store", str(deep)], capture_output=True, text=True, env=env)
    assert run_.returncode == 4
    assert run_.stderr.count("\n") == 1 and str(deep) in run_.stderr
    long_domain = "a-registered-domain-name-as-long-as-a-label-may-be-sixty-three.com"
    with WebIndex(deep) as index:
        index.insert(*attempt(f"https://{long_domain}/"))
        index.flush()
    run_ = subprocess.run([*CLI, "stats", "--store", str(deep)], capture_output=True, text=True, env=env)
    assert run_.returncode == 0 and long_domain in run_.stdout and "…" not in run_.stdout


def test_compact_counts_every_partition_it_changed(tmp_path: Path) -> None:
    store = tmp_path / "s"
    with WebIndex(store) as index:
        for domain in ("a.example.com", "b.example.org"):
            for n in range(2):
                index.insert(*attempt(f"https://{domain}/{n}"))
                index.flush()
    code, _, err = run("compact", "--store", str(store))
    assert code == 0 and "compacted 4 partitions" in err  # get and get-metadata, two domains
    code, _, err = run("compact", "--store", str(store))
    assert code == 0 and "compacted 0 partitions" in err


@pytest.mark.parametrize(
    ("env", "args", "durable"),
    [({}, [], True), ({"WEB_INDEX_DURABLE": "0"}, [], False), ({}, ["--no-durable"], False)],
)
def test_durability_has_a_flag_and_an_env_var(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], args: list[str], durable: bool
) -> None:
    import web_index.cli._app as cli_app

    opened: list[bool] = []

    class Watched(WebIndex):  # the real store, its opening noted
        def __init__(self, *a: Any, **k: Any) -> None:
            opened.append(k["durable"])
            super().__init__(*a, **k)

    monkeypatch.setattr(cli_app, "WebIndex", Watched)
    line = tmp_path / "one.jsonl"
    method, url, ts, meta, _ = attempt("https://a.example.com/x", T0, state="timeout")
    request = {"type": method, "url": url, "timestamp": ts.isoformat(), "metadata": meta.to_dict()}
    line.write_text(json.dumps(request) + "\n")
    code, _, err = run("insert", "--store", str(tmp_path / "s"), *args, str(line), env=env)
    assert code == 0, err
    assert opened == [durable]


def test_a_fetch_table_never_cuts_its_why(tmp_path: Path) -> None:
    store = str(tmp_path / "s")
    code, out, _ = run("fetch", "--json", "--store", store, "http://127.0.0.1:9/")
    why = json.loads(out)["why"]
    assert code == 1 and len(why) > 80 and "--allow-loopback" in why  # a reason longer than a column
    piped = subprocess.run(
        [*CLI, "fetch", "--store", store, "http://127.0.0.1:9/"], capture_output=True, text=True
    )
    assert why in piped.stdout and "…" not in piped.stdout, piped.stdout


def test_serve_on_a_port_in_use_says_so_before_serving(tmp_path: Path) -> None:
    import socket

    store = _store_with_one(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [*CLI, "serve", "--store", store, "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"error: 127.0.0.1:{port} ") and "in use" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "serving" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    "given", ["http://127.0.0.1:8522/", "HTTP://127.0.0.1:8522/docs/?q=1", "127.0.0.1:8522"]
)
def test_search_takes_a_site_or_any_url_of_it(tmp_path: Path, given: str) -> None:
    code, _, err = run("search", "--store", _store_with_one(tmp_path), given, "words")
    assert code == 2 and "127.0.0.1:8522" in err and "lower-case" not in err, err
    assert "'127.0.0.1:8522'" in err or "127.0.0.1:8522 " in err  # the site, not the URL given


def test_a_site_that_is_neither_says_what_to_give(tmp_path: Path) -> None:
    code, _, err = run("search", "--store", _store_with_one(tmp_path), "my site", "words")
    assert code == 2 and "host[:port]" in err and "URL" in err, err


@pytest.mark.parametrize(
    ("name", "content", "says"),
    [
        ("attempts.jsonl", b'{"type": "get"}\n', "not a WARC file"),
        ("crawl.warc.gz", gzip.compress(b'{"type": "get"}\n'), "not a WARC file"),
        ("crawl.arc", b"<html>not an arc</html>\n", "not an ARC file"),
        # A .wacz is read as a package (tests/archive/test_import_wacz.py); another zip is said to be one.
        (
            "site.zip",
            b"PK\x03\x04" + bytes(40),
            "a zip file: a WACZ package is read as one when its name ends in .wacz",
        ),
    ],
)
def test_import_of_a_file_that_is_no_archive_says_so(
    tmp_path: Path, name: str, content: bytes, says: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    code, _, err = run("import-warc", "--store", str(tmp_path / "s"), str(path))
    assert code == 2 and err.startswith(f"error: {path}") and says in err and "Content-Length" not in err, err
    code, _, err = run("import-warc", "--store", str(tmp_path / "s"), "--skip-invalid", str(path))
    assert code == 0 and says in err, err


@pytest.mark.parametrize(
    ("command", "option"),
    [
        (["fetch", "--from"], "--from"),
        (["query", "--from"], "--from"),
        (["presence", "--from"], "--from"),
        (["serve", "--config"], "--config"),
        (["serve", "--write-token-file"], "--write-token-file"),
        (["insert"], None),
    ],
)
def test_an_input_file_that_cannot_be_read_is_said_one_way(
    tmp_path: Path, command: list[str], option: str | None
) -> None:
    store = _store_with_one(tmp_path)
    (tmp_path / "folder").mkdir()
    for name, why in (("nofile.txt", "No such file or directory"), ("folder", "Is a directory")):
        path = tmp_path / name
        code, _, err = run(*command, str(path), "--store", store)
        said = f"cannot read {path}: {why}"
        assert code == 2 and err == (f"error: {option}: {said}\n" if option else f"error: {said}\n"), err


@pytest.mark.parametrize(
    ("command", "option"),
    [(["fetch", "--from"], "--from"), (["serve", "--write-token-file"], "--write-token-file")],
)
def test_an_input_that_is_not_text_says_so(tmp_path: Path, command: list[str], option: str) -> None:
    path = tmp_path / "bin.txt"
    path.write_bytes(b"\xff\xfe")
    code, _, err = run(*command, str(path), "--store", _store_with_one(tmp_path))
    assert code == 2 and err == f"error: {option} {path}: not UTF-8 text\n", err


def test_a_closed_port_leads_with_why(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    code, out, _ = run("fetch", "--json", "--allow-loopback", "--store", str(tmp_path / "s"), url)
    row = json.loads(out)
    assert code == 1 and row["state"] == "unreachable"
    assert row["why"].startswith("not fetched: could not connect"), row["why"]
    assert "robots.txt" in row["why"]  # said second: why this URL was not tried itself


def _help(*args: str) -> str:
    done = subprocess.run(
        [*CLI, *args, "-h"], capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"}
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_help_groups_the_commands_in_the_order_a_newcomer_meets_them() -> None:
    import typer.main

    text = _help()
    panels = [
        "Make and fill a store",
        "Ask the store",
        "Fetch and crawl",
        "Look after a store",
        "Serve and export",
    ]
    at = [text.find(f"─ {panel} ─") for panel in panels]
    assert -1 not in at and at == sorted(at), text
    assert "─ Commands ─" not in text  # every command is in a group
    group = typer.main.get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for paragraph in (command.help or "").strip().split("\n\n"):
            assert "\n" not in paragraph.strip(), f"{name}: a line broken by hand: {paragraph!r}"


@pytest.mark.parametrize("command", ["stats", "query", "crawl", "serve", "worker", "fetch"])
def test_help_loses_no_words_to_markup(command: str) -> None:
    text = " ".join(_help(command).split())
    assert " . " not in text and " .[" not in text, text
    assert "default: the per-user store" in text


def test_counts_agree_with_their_nouns(tmp_path: Path) -> None:
    from web_index.cli._app import plural

    assert [plural(n, "attempt") for n in (0, 1, 2, 1000)] == [
        "0 attempts",
        "1 attempt",
        "2 attempts",
        "1,000 attempts",
    ]
    assert (plural(1, "query"), plural(3, "query"), plural(2, "day")) == ("1 query", "3 queries", "2 days")
    store = str(tmp_path / "s")
    code, _, err = run("insert", "--store", store, _one_request(tmp_path))
    assert code == 0 and err.strip() == "stored 1 attempt", err
    code, _, err = run("flush", "--store", store)
    assert code == 0 and err.strip() == "flushed 1 attempt", err
    code, _, err = run("query", "--store", store, "--fail-missing", "https://b.example.com/")
    assert code == 1 and "1 of 1 query matched nothing" in err, err
    code, _, err = run("export-warc", "--store", _store_with_one(tmp_path), str(tmp_path / "out"))
    assert code == 0 and "1 attempt: 1 response, 0 revisits in 1 file (" in err, err


def test_a_crawl_with_nothing_left_to_fetch_does_not_wait_out_settle(tmp_path: Path) -> None:
    import functools
    import threading
    import time
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(
        "<html><title>One</title><body><p>" + "Some words. " * 60 + "</p></body></html>"
    )
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        began = time.monotonic()
        # --settle 60: the default's point made plain; --timeout 30: exit 5 had it waited
        code, out, err = run(
            "crawl",
            url,
            "--store",
            str(tmp_path / "s"),
            "--allow-loopback",
            "--settle",
            "60",
            "--timeout",
            "30",
            "--json",
        )
        took = time.monotonic() - began
        server.shutdown()
    assert code == 0, err
    assert json.loads(out)["pages"] == 1 and took < 30


def test_an_empty_folder_is_no_store_yet_and_a_hidden_file_is_nobodys_data(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run("stats", "--store", str(empty))
    assert code == 4 and "is empty; create one with `web-index init`" in err, err
    assert list(empty.iterdir()) == []
    (empty / ".DS_Store").write_bytes(b"\0")
    (empty / "lost+found").mkdir()
    code, _, err = run("init", str(empty))
    assert code == 0, err
    assert run("stats", "--store", str(empty))[0] == 0
