"""``POST /api/save``: record a page now, with its requisites, and answer where
its capture is. Only with a write token (``Authorization: Bearer``, as
``/api/insert``); the body is ``{"url": "..."}``. The answer comes when the save
has ended: 200 with the capture's address; 502 when the page could not be
fetched (its attempts are recorded: their state and reason say why); 504 when
the save's time limit ran out first."""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from web_index.archive import url_for_path
from web_index.server._api import authorize
from web_index.server._body import read_body
from web_index.server._errors import ApiError, bad_parameter
from web_index.server._saving import SaveJob, SaveRefusedError, Saves

__all__ = ["save"]

_MAX_BODY = 64 * 1024  # a URL and nothing else


async def save(request: Request) -> Response:
    authorize(request)
    body = await read_body(request, _MAX_BODY, too_large=f"more than {_MAX_BODY:,} bytes: send one URL")
    try:
        asked = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError):
        raise bad_parameter("body", 'expected a JSON object: {"url": "https://..."}') from None
    if not isinstance(asked, dict) or not isinstance(asked.get("url"), str):
        raise bad_parameter("url", 'expected a JSON object with a "url" string')
    saves: Saves = request.app.state.saves
    try:
        url = await saves.check(asked["url"])
        job = saves.start(url)
    except SaveRefusedError as exc:
        named = "url" if exc.status in (400, 403) else None
        raise ApiError(exc.status, exc.message, named, exc.headers) from None
    assert job.task is not None
    await job.task
    return JSONResponse(_answer(job, request.app.state.store_collection), status_code=_status(job))


def _status(job: SaveJob) -> int:
    if job.capture is not None:
        return 200
    return 504 if job.page is None or job.problem else 502


def _answer(job: SaveJob, coll: str) -> dict[str, Any]:
    saved = job.saved
    out: dict[str, Any] = {"url": job.url, "state": job.state}
    if job.capture is not None:
        stamp, url = job.capture["timestamp"], job.capture["url"]
        memento = f"/{coll}/{stamp}id_/{url_for_path(url)}"
        out["capture"] = {"timestamp": stamp, "url": url, "memento": memento}
    else:
        out["reason"] = job.reason
    if saved is not None:
        out["attempts"] = [
            {"fetcher": a.fetcher_name, "calibre": a.fetcher_calibre, "state": str(a.state), "why": a.why}
            for a in saved.page.attempts
        ]
        out["requisites"] = {
            "fetched": len(saved.requisites),
            "failed": job.requisites_failed,
            "skipped": saved.skipped,
        }
    return out
