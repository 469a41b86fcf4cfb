"""Save a page now: ``POST /ui/{coll}/save`` records a URL with what it needs to
render, then ``/ui/{coll}/save/{id}`` follows the save, refreshing itself (no
JavaScript) until it ends on the new capture's page or says why there is none.
Only on a server with a write token, into its own store; the form signs the
visitor in (:mod:`web_index.ui._session`); ``POST /ui/signout`` signs out."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from web_index.server import SaveJob, SaveRefusedError, Saves
from web_index.ui._render import UI_PREFIX, UiError, capture_path, history_path, page, served
from web_index.ui._session import SESSION_COOKIE, SaveForm, Sessions, read_form, set_cookie

__all__ = ["save", "save_form", "sign_out", "status"]

REFRESH_SECONDS = 1


def save_form(request: Request, coll: str) -> SaveForm | None:
    """The save form of a page of ``coll``: only on a server with a write token,
    for its own store."""
    sessions: Sessions | None = request.app.state.ui_sessions
    if sessions is None or coll != served(request).store:
        return None
    return sessions.form(request)


def _saving(request: Request, coll: str) -> tuple[Saves, Sessions]:
    saves: Saves | None = request.app.state.saves
    sessions: Sessions | None = request.app.state.ui_sessions
    if saves is None:
        raise UiError(
            404,
            "saving is off: this server was started without a write token"
            " (--write-token-file or WEB_INDEX_WRITE_TOKEN)",
        )
    if sessions is None:
        raise UiError(
            404, "saving from these pages is off here (several server processes): use POST /api/save"
        )
    store = served(request).store
    if coll != store:
        raise UiError(404, f"pages are saved into this server's own store, {store}, not {coll}")
    return saves, sessions


async def save(request: Request) -> Response:
    coll = request.path_params["coll"]
    saves, sessions = _saving(request, coll)
    fields = await read_form(request)
    sessions.check_request(request, fields)  # before the token is even looked at
    asked = fields.get("url", "")
    session = sessions.current(request)
    new_session = None
    if session is None:
        signed = sessions.sign_in(fields.get("token", ""))
        if signed is None:
            wrong = "token: not this server's write token: nothing was saved"
            return _refused(request, coll, asked, 401, wrong)
        new_session, session = signed
    try:
        running = saves.job(session.save) if session.save else None
        if running is not None and not running.done:
            raise SaveRefusedError(
                429, f"your save of {running.url} is still running: one save at a time", {"retry-after": "5"}
            )
        url = await saves.check(asked)
        job = saves.start(url)
    except SaveRefusedError as exc:
        response = _refused(request, coll, asked, exc.status, exc.message, exc.headers)
    else:
        session.save = job.id
        response = RedirectResponse(f"{UI_PREFIX}/{coll}/save/{job.id}", status_code=303)
    if new_session is not None:
        set_cookie(request, response, SESSION_COOKIE, new_session)
    return response


def _refused(
    request: Request, coll: str, asked: str, status: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    """The save form again, saying why nothing was saved."""
    form = save_form(request, coll)
    response = page(
        request,
        "save.html",
        status=status,
        title="Not saved · web-index",
        coll=coll,
        url=asked,
        message=message,
        job=None,
        refresh=None,
        save=form,
        history=history_path(coll, asked) if asked.strip() else None,
    )
    response.headers.update(headers or {})
    return form.remembered(request, response) if form is not None else response


async def status(request: Request) -> Response:
    coll, job_id = request.path_params["coll"], request.path_params["id"]
    saves, _ = _saving(request, coll)
    job = saves.job(job_id)
    if job is None:
        raise UiError(404, f"no save {job_id!r} here: saves are kept an hour, and not past a restart")
    if job.done and job.capture is not None:
        return RedirectResponse(capture_path(coll, job.capture), status_code=303)
    return page(
        request,
        "save.html",
        title=f"{'Not saved' if job.done else 'Saving'} {job.url} · web-index",
        coll=coll,
        url=job.url,
        message=None,
        job=job,
        progress=_progress(job),
        refresh=None if job.done else REFRESH_SECONDS,
        save=save_form(request, coll) if job.done else None,
        history=history_path(coll, job.url),
    )


def _progress(job: SaveJob) -> str:
    step = job.step
    if job.done or step is None:
        return ""
    if step.phase == "page":
        return f"Fetching the page {step.url}"
    done = f"{step.done} of {step.total} done"
    return f"Fetching what the page needs to render: {done} (the latest: {step.url})"


async def sign_out(request: Request) -> Response:
    _, sessions = _saving(request, served(request).store)
    sessions.check_request(request, await read_form(request))
    sessions.sign_out(request)
    response = RedirectResponse("/", status_code=303)
    set_cookie(request, response, SESSION_COOKIE, "", max_age=0)
    return response
