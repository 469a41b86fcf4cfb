"""`web-index insert` as a model: random files of valid, invalid and blank lines, with and
without --skip-invalid; exactly the right lines stored, reported and counted, and the exit code."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from web_index import WebIndex
from web_index.cli import app
from web_index.models import SimplePageQuery

runner = CliRunner()


def line_url(n: int) -> str:
    return f"https://example.com/line/{n}"


def request(
    url: str, *, state: str = "success", method: str = "get", ts: str = "2024-08-01T12:00:00Z"
) -> Any:
    data = [
        {
            "url": url,
            "request_url": url,
            "status_code": 200,
            "headers": '{"content-type":"text/html"}',
            "timestamp": ts,
            "data": "PGh0bWw+PC9odG1sPg==" if method == "get" else None,
            "is_final": True,
            "fetcher_name": "t",
            "fetcher_version": "1",
            "fetcher_calibre": 10,
        }
    ]
    return {
        "type": method,
        "url": url,
        "timestamp": ts,
        "metadata": {
            "state": state,
            "url": url,
            "fetcher_name": "t",
            "fetcher_version": "1",
            "fetcher_calibre": 10,
        },
        "data": data if state == "success" else [],
    }


def _dump(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _with(n: int, change: Any) -> bytes:
    obj = request(line_url(n))
    change(obj)
    return _dump(obj)


def _far_future(obj: Any) -> None:
    obj["timestamp"] = obj["data"][0]["timestamp"] = "9999-12-31T00:00:00Z"


def _year_one(obj: Any) -> None:
    obj["timestamp"] = obj["data"][0]["timestamp"] = "0001-01-01T00:00:00+01:00"


def _zoned_url(obj: Any) -> None:
    obj["url"] = obj["metadata"]["url"] = obj["data"][0]["url"] = obj["data"][0]["request_url"] = (
        "http://[fe80::1%25eth0]/"
    )


# kind -> (line n's bytes, whether it is stored, what its report must name; None: not reported)
KINDS: dict[str, tuple[Any, bool, str | None]] = {
    "get": (lambda n: _dump(request(line_url(n))), True, None),
    "failed": (lambda n: _dump(request(line_url(n), state="timeout")), True, None),
    "head": (lambda n: _dump(request(line_url(n), method="head")), True, None),
    "blank": (lambda n: b"", False, None),
    "spaces": (lambda n: b"  \t ", False, None),
    "not json": (lambda n: b"not json", False, "not valid JSON"),
    "cut short": (lambda n: _dump(request(line_url(n)))[:40], False, "not valid JSON"),
    "array": (lambda n: b"[1, 2]", False, "object"),
    "status": (
        lambda n: _with(n, lambda o: o["data"][0].update(status_code=42)),
        False,
        "data[0].status_code",
    ),
    "no fetcher": (
        lambda n: _with(n, lambda o: o["metadata"].pop("fetcher_name")),
        False,
        "metadata.fetcher_name",
    ),
    "type": (lambda n: _with(n, lambda o: o.update(type="post")), False, "type"),
    "raw xff": (lambda n: _dump(request(line_url(n))).replace(b'"t"', b'"t\xff"', 1), False, "UTF-8"),
    "surrogate": (
        lambda n: _with(n, lambda o: o["data"][0].update(headers='{"x": "\\udcff"}')),
        False,
        "data[0].headers",
    ),
    "year 9999": (lambda n: _with(n, _far_future), False, "timestamp"),
    "year 1": (lambda n: _with(n, _year_one), False, "timestamp"),
    "zone id": (lambda n: _with(n, _zoned_url), False, "url"),
}


def run_insert(
    lines: list[bytes], *, skip: bool, batch: int, stdin: bool, eol: bytes, folder: Path, bulk: bool = False
) -> Any:
    text = eol.join(lines) + eol
    store = str(folder / "store")
    args = ["insert", "--store", store, "--batch", str(batch)] + (["--skip-invalid"] if skip else [])
    args += ["--bulk"] if bulk else []
    if stdin:
        return runner.invoke(app, [*args, "-"], input=text), "<stdin>"
    src = folder / "in.jsonl"
    src.write_bytes(text)
    return runner.invoke(app, [*args, str(src)]), str(src)


def stored_lines(folder: Path, count: int) -> set[int]:
    with WebIndex(folder / "store", read_only=True) as index:
        present = [
            index.presence([SimplePageQuery(url=line_url(n), type=t) for n in range(1, count + 1)])
            for t in ("get-metadata", "head-metadata")
        ]
    return {n for n in range(1, count + 1) if present[0][n - 1] or present[1][n - 1]}


@settings(max_examples=120, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(sorted(KINDS)), max_size=10),
    skip=st.booleans(),
    batch=st.integers(1, 4),
    stdin=st.booleans(),
    eol=st.sampled_from([b"\n", b"\r\n"]),
    bulk=st.booleans(),
)
@example(kinds=["get", "not json", "get", "get"], skip=True, batch=1000, stdin=False, eol=b"\n", bulk=True)
@example(kinds=["get", "blank", "status", "get"], skip=False, batch=1, stdin=False, eol=b"\n", bulk=True)
@example(kinds=["get", "get", "no fetcher", "get"], skip=False, batch=1000, stdin=True, eol=b"\n", bulk=False)
def test_insert_stores_every_valid_line_and_reports_every_invalid_one(
    kinds: list[str], skip: bool, batch: int, stdin: bool, eol: bytes, bulk: bool
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        lines = [KINDS[k][0](n) for n, k in enumerate(kinds, start=1)]
        result, name = run_insert(
            lines, skip=skip, batch=batch, stdin=stdin, eol=eol, folder=folder, bulk=bulk
        )
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exc_info
        invalid = [n for n, k in enumerate(kinds, start=1) if KINDS[k][2] is not None]
        first_bad = invalid[0] if invalid and not skip else len(kinds) + 1
        expected = {n for n, k in enumerate(kinds, start=1) if KINDS[k][1] and n < first_bad}
        assert stored_lines(folder, len(kinds)) == expected
        if bulk and expected:  # straight to compacted files: nothing buffered, no part left
            with WebIndex(folder / "store", read_only=True) as index:
                stats = index.stats()
            assert stats.buffered_attempts == 0 and all(p.part_files == 0 for p in stats.partitions)
        err = [line for line in result.stderr.splitlines() if line.strip()]
        if skip or not invalid:
            assert result.exit_code == 0, result.stderr
            reports = err[:-1]
            assert [r.split(":")[0:2] for r in reports] == [["skipped " + name, str(n)] for n in invalid]
            for report, n in zip(reports, invalid, strict=True):
                assert KINDS[kinds[n - 1]][2] in report  # names the field (or the problem)
            tail = f"stored {len(expected)} attempt{'' if len(expected) == 1 else 's'}" + (
                f", skipped {len(invalid)} invalid" if invalid else ""
            )
            assert err[-1] == tail
        else:
            assert result.exit_code == 2
            assert len(err) == 1, err  # one line, naming the line and the field
            assert err[0].startswith(f"error: {name}:{first_bad}: ")
            assert KINDS[kinds[first_bad - 1]][2] in err[0]
            assert f"stored {len(expected)} " in err[0]


@pytest.mark.parametrize("skip", [False, True])
def test_the_issue_example(tmp_path: Path, skip: bool) -> None:
    lines = [
        _dump(request(line_url(1))),
        b"not json",
        _dump(request(line_url(3))),
        _dump(request(line_url(4))),
    ]
    result, name = run_insert(lines, skip=skip, batch=1000, stdin=False, eol=b"\n", folder=tmp_path)
    if skip:
        assert result.exit_code == 0 and stored_lines(tmp_path, 4) == {1, 3, 4}
        assert result.stderr.splitlines()[-1] == "stored 3 attempts, skipped 1 invalid"
    else:
        assert result.exit_code == 2 and stored_lines(tmp_path, 4) == {1}
        assert result.stderr.startswith(f"error: {name}:2: not valid JSON")


@pytest.mark.parametrize(
    ("stdin", "options"),
    [(False, []), (False, ["--bulk", "--jobs", "1"]), (False, ["--bulk", "--jobs", "2"]), (True, ["--bulk"])],
)
def test_the_progress_on_a_terminal_says_bytes_requests_and_their_pace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdin: bool, options: list[str]
) -> None:
    """As an import's: the input's bytes read, MB/s and requests a second since the start,
    the time left while a file is read (nothing to say of a pipe's), then "stored"."""
    import io

    from rich.console import Console

    from web_index.cli import _app, _pace

    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=200, color_system=None)
    monkeypatch.setattr(_app, "err", terminal)
    monkeypatch.setattr(_pace, "err", terminal)
    count = 300
    text = b"".join(_dump(request(line_url(n))) + b"\n" for n in range(1, count + 1))
    args = ["insert", "--store", str(tmp_path / "s"), "--batch", "50", *options]
    if stdin:
        result = runner.invoke(app, [*args, "-"], input=text)
    else:
        (tmp_path / "in.jsonl").write_bytes(text)
        result = runner.invoke(app, [*args, str(tmp_path / "in.jsonl")])
    assert result.exit_code == 0, result.output
    label = "loading" if options else "inserting"
    frames = [line for line in screen.getvalue().replace("\r", "\n").splitlines() if label in line]
    assert frames
    last = frames[-1]
    assert last.rstrip().endswith("stored") and f"{count} requests" in last, last
    size = f"{len(text) / 1000:.1f}/{'?' if stdin else f'{len(text) / 1000:.1f}'} kB"
    assert size in last, last  # every byte read, of a size known unless piped
    speed = float(last.split(" MB/s")[0].split()[-1])
    assert 0 < speed <= len(text) / 1e6 / 0.001  # since the start: never the last update's
    rate = int(last.split("/s ")[-2].split()[-1].replace(",", ""))
    assert 0 < rate <= count / 0.001
    for frame in frames[:-1]:  # a file's time left, then what is written; a pipe's is not known
        assert ("left" not in frame) if stdin else ("left" in frame or "writing" in frame), frame
