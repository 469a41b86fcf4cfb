"""Building valid (and deliberately invalid) insertion requests for tests."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from web_index.crawl import SiteFiles
from web_index.models import AttemptMetadata, Response
from web_index.search import PageText, build_pack, compress_pack

T0 = datetime(2024, 8, 1, 12, 0, tzinfo=UTC)


def metadata(url: str, state: str = "success", calibre: int = 10, **extra: Any) -> AttemptMetadata:
    return AttemptMetadata(
        state=state, url=url, fetcher_name="test", fetcher_version="1.0", fetcher_calibre=calibre, **extra
    )


def chain(
    url: str,
    ts: datetime = T0,
    hops: int = 1,
    calibre: int = 10,
    body: bytes | None = b"<html>ok</html>",
    head: bool = False,
) -> list[Response]:
    out = []
    for i in range(hops):
        final = i == hops - 1
        out.append(
            Response(
                url=url,
                request_url=url if final else f"{url}?hop={i}",
                status_code=200 if final else 301,
                headers={"content-type": "text/html"} if final else {"location": url},
                timestamp=ts + timedelta(milliseconds=10 * i),
                data=None if head else (body if final else b""),
                is_final=final,
                fetcher_name="test",
                fetcher_version="1.0",
                fetcher_calibre=calibre,
            )
        )
    return out


def attempt(
    url: str,
    ts: datetime = T0,
    *,
    method: str = "get",
    state: str = "success",
    calibre: int = 10,
    hops: int = 1,
    body: bytes = b"<html>ok</html>",
) -> tuple[str, str, datetime, AttemptMetadata, list[Response]]:
    data = chain(url, ts, hops, calibre, body, head=method == "head") if state == "success" else []
    return (method, url, ts, metadata(url, state, calibre), data)


def judge_damage(ask: Any, expected: object, path: str, outcomes: dict[str, int], what: str) -> None:
    """A store with a damaged file must give the right answer or an error naming that
    file (``CorruptFileError``); ``outcomes`` counts which (``right``, ``error``)."""
    from web_index.errors import CorruptFileError

    try:
        got = ask()
    except CorruptFileError as exc:
        assert exc.path == path, f"{what}: error names {exc.path}"
        outcomes["error"] += 1
    else:
        assert got == expected, f"{what}: a wrong answer"
        outcomes["right"] += 1


def rewrite_store_file(path: Any, table: Any, **options: Any) -> None:
    """Replace a store file by a hand-made one, sealed as the store seals its
    files (a test that edits a file means to test what the edit says, not
    that the checksum catches it)."""
    from pathlib import Path

    from web_index.storage.backends import sealed_bytes

    Path(path).write_bytes(bytes(sealed_bytes(table, **options)))


def publish_pack(files: SiteFiles, tmp: Path, site: str, generation: int, words: dict[str, str]) -> None:
    """Publish generation ``generation`` of ``site``'s search database, whose page
    ``http://<site>/<name>`` (titled ``name``) holds the text ``words[name]``."""
    now = datetime.now(UTC)
    texts = [PageText(url=f"http://{site}/{n}", title=n, text=t, fetched=now) for n, t in words.items()]
    db, packed = tmp / f"{site}.{generation}.sqlite", tmp / f"{site}.{generation}.zst"
    build_pack(db, site, texts, watermark="")
    compress_pack(db, packed)
    files.publish(site, generation, packed)


def insertion_request(
    method: str, url: str, ts: datetime, meta: AttemptMetadata, data: list[Response]
) -> dict[str, Any]:
    """An attempt (as :func:`attempt` gives it) as an insertion request, the form
    ``web-index insert`` and ``POST /api/insert`` read (bodies in base64)."""
    out = {
        "type": method,
        "url": url,
        "timestamp": ts.isoformat(),
        "metadata": {k: v for k, v in meta.to_dict().items() if v is not None},
        "data": [{**r.to_dict(), "data": base64.b64encode(r.data or b"").decode()} for r in data],
    }
    for r in out["data"]:
        r.pop("request_id")
    return out


def browser_path(base: str, href: str) -> str:
    """The path a browser asks for when ``href`` is followed on the page at ``base``: joined
    as urljoin does, then its dot segments (``.``, ``..``, either as ``%2e``) and backslashes
    resolved as a browser resolves them in any URL, absolute ones included (urljoin does not)."""
    from urllib.parse import urljoin, urlsplit

    path = urlsplit(urljoin(base, href)).path.replace("\\", "/")
    out: list[str] = []
    for segment in path.split("/")[1:]:
        low = segment.lower()
        if low in (".", "%2e"):
            continue
        if low in ("..", ".%2e", "%2e.", "%2e%2e"):
            if out:
                out.pop()
            continue
        out.append(segment)
    trailing = path.split("/")[-1].lower() in (".", "..", "%2e", "%2e%2e", ".%2e", "%2e.")
    return "/" + "/".join(out) + ("/" if trailing and out else "")
