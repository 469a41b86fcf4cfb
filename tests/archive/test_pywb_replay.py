"""pywb 2.10 (the real one, its own venv) replays what export-warc writes, through
the CDXJ index export writes beside the WARCs: every stored response comes back
with its status and body, revisits included, and pywb's CDX API lists them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from tests.archive.pywb import running_pywb
from web_index import WebIndex
from web_index.archive import export_warcs
from web_index.models import AttemptMetadata, Page, Response
from web_index.urls import url_key

T0 = datetime(2024, 8, 1, 12, 0, 0, tzinfo=UTC)
HTML = "<html><body><h1>H\u00e9llo</h1></body></html>".encode()
BINARY = bytes(range(256)) * 40


def _attempt(
    url: str, at: datetime, hops: list[tuple[str, int, dict[str, str], bytes]]
) -> tuple[object, ...]:
    meta = AttemptMetadata(
        state="success", url=url, fetcher_name="t", fetcher_version="1", fetcher_calibre=10
    )
    responses = [
        Response(
            url=url,
            request_url=hop_url,
            status_code=status,
            headers=headers,
            timestamp=at + timedelta(milliseconds=300 * i),
            data=body,
            is_final=i == len(hops) - 1,
            fetcher_name="t",
            fetcher_version="1",
            fetcher_calibre=10,
        )
        for i, (hop_url, status, headers, body) in enumerate(hops)
    ]
    return ("get", url, at, meta, responses)


def test_pywb_replays_the_export(tmp_path: Path) -> None:
    html = {"content-type": "text/html; charset=utf-8"}
    with WebIndex(tmp_path / "s", create=True) as index:
        index.insert_many(
            [
                _attempt("http://example.com/", T0, [("http://example.com/", 200, html, HTML)]),
                # A body the fetcher decoded, under the headers as sent (gzip, chunked).
                _attempt(
                    "https://example.org/img.bin",
                    T0 + timedelta(minutes=1),
                    [
                        (
                            "https://example.org/img.bin",
                            200,
                            {
                                "content-type": "application/octet-stream",
                                "content-encoding": "gzip",
                                "transfer-encoding": "chunked",
                            },
                            BINARY,
                        )
                    ],
                ),
                _attempt(
                    "http://example.com/gone?x=1&y=2",
                    T0 + timedelta(minutes=2),
                    [("http://example.com/gone?x=1&y=2", 404, {"content-type": "text/plain"}, b"no\n")],
                ),
                # A redirect chain: each hop its own capture.
                _attempt(
                    "http://example.com/old",
                    T0 + timedelta(minutes=3),
                    [
                        ("http://example.com/old", 301, {"location": "http://example.com/new"}, b""),
                        ("http://example.com/new", 200, html, b"<p>new</p>"),
                    ],
                ),
                # An IRI: written (and replayed) in its normal, percent-encoded form.
                _attempt(
                    "http://example.com/caf\u00e9 menu?a=1&b=\u00fc",
                    T0 + timedelta(minutes=4),
                    [("http://example.com/caf\u00e9 menu?a=1&b=\u00fc", 200, html, b"<p>menu</p>")],
                ),
                # The same payload again a day later: written as a revisit.
                _attempt(
                    "http://example.com/", T0 + timedelta(days=1), [("http://example.com/", 200, html, HTML)]
                ),
            ]
        )
        index.flush()
        report = export_warcs(index, tmp_path / "out", max_file_bytes=2000)  # several files
        pages = [p for p in index.scan() if isinstance(p, Page)]
    assert report.revisits == 1 and len(report.files) > 1 and report.cdxj is not None
    expected = [
        (url_key(r.request_url), r.timestamp, r.status_code, r.data) for p in pages for r in p.responses
    ]
    assert "http://example.com/caf%C3%A9%20menu?a=1&b=%C3%BC" in [e[0] for e in expected]
    with running_pywb(report.files, report.cdxj, tmp_path / "pywb") as pywb:
        for url, when, status, body in expected:
            stamp = when.strftime("%Y%m%d%H%M%S")
            got = pywb.replay_raw(url, stamp)
            assert got.status_code == status, (url, stamp, got.status_code, pywb.log_tail())
            assert got.content == body, (url, stamp)
            assert got.headers["memento-datetime"] == when.strftime("%a, %d %b %Y %H:%M:%S GMT")
        listed = pywb.cdx("http://example.com/")
        assert [(c["timestamp"], c["status"]) for c in listed] == [
            ("20240801120000", "200"),
            ("20240802120000", "200"),
        ]
        assert {c["mime"] for c in listed} == {"text/html", "warc/revisit"}
        assert pywb.replay_raw("http://example.com/never", "20240801120000").status_code == 404
