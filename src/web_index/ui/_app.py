"""The UI's routes, put in front of the server's own."""

from __future__ import annotations

from importlib import resources

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from web_index.ui import _capture, _compare, _history, _home, _overview, _replay, _save, _search
from web_index.ui._charts import states_css
from web_index.ui._render import UI_PREFIX, UiError, history_path, page_error, target_url
from web_index.ui._session import Sessions

__all__ = ["add_ui"]


def add_ui(app: Starlette, *, save_form: bool = True) -> Starlette:
    """``app`` (from :func:`web_index.server.create_app`) with the UI's pages:
    ``/`` and the pages under ``/ui/``. Read-only unless the app has a write
    token: then a person signed in with it can save a page now (fetched into
    the store, the only page that reaches the live web), unless not
    ``save_form``. Sessions and saves in progress live in this process: an app
    served by several processes leaves the form off."""
    if UI_PREFIX.strip("/") in app.state.collections:
        raise ValueError(f"a collection named {UI_PREFIX.strip('/')!r} would be hidden by the UI's pages")
    routes = [
        Route("/", _home.home, methods=["GET"]),
        Route("/lookup", _home.lookup, methods=["GET"]),
        Route("/favicon.ico", _favicon, methods=["GET"]),
        Route(f"{UI_PREFIX}/search", _search.search, methods=["GET"]),
        Route(f"{UI_PREFIX}/states.css", _states_css, methods=["GET"]),
        Mount(f"{UI_PREFIX}/static", StaticFiles(packages=[("web_index.ui", "static")]), name="static"),
        Route(f"{UI_PREFIX}/{{coll}}/", _overview.overview, methods=["GET"]),
        Route(f"{UI_PREFIX}/{{coll}}/domain", _overview.domain, methods=["GET"]),
        Route(f"{UI_PREFIX}/{{coll}}/history", _history.history, methods=["GET"]),
        Route(f"{UI_PREFIX}/{{coll}}/compare", _compare.compare, methods=["GET"]),
        Route(f"{UI_PREFIX}/{{coll}}/save", _save.save, methods=["POST"]),
        Route(f"{UI_PREFIX}/{{coll}}/save/{{id}}", _save.status, methods=["GET"]),
        Route(f"{UI_PREFIX}/signout", _save.sign_out, methods=["POST"]),
        Route(f"{UI_PREFIX}/{{coll}}/{{stamp}}/{{url:path}}", _by_stamp, methods=["GET"]),
    ]
    # Before the server's own: /{coll}/{stamp}/{url} would take /ui/... for a memento's path.
    app.router.routes[0:0] = routes
    on = save_form and app.state.saves is not None
    app.state.ui_sessions = Sessions(app.state.write_token) if on else None
    app.add_exception_handler(UiError, page_error)
    return app


async def _favicon(request: Request) -> Response:
    # The icon every browser asks for at this address: the pages' own, an SVG (browsers take one here).
    icon = resources.files("web_index.ui").joinpath("static/icon.svg").read_bytes()
    return Response(icon, media_type="image/svg+xml", headers={"cache-control": "max-age=86400"})


async def _states_css(request: Request) -> Response:
    return Response(states_css(), media_type="text/css", headers={"cache-control": "max-age=3600"})


async def _by_stamp(request: Request) -> Response:
    """``*``: a URL's history (the Wayback Machine's form: redirected to its
    page); ``<digits>``: a capture's page; ``<digits>if_``: the archived page
    itself, for the capture page's frame."""
    stamp: str = request.path_params["stamp"]
    if stamp == "*":
        coll = request.path_params["coll"]
        url = target_url(request, f"{UI_PREFIX}/{coll}/*/")
        return RedirectResponse(history_path(coll, url), status_code=302)
    if stamp.endswith("if_") and stamp[:-3].isdigit() and len(stamp) <= 17:
        return await _replay.replay(request)
    if stamp.isdigit() and len(stamp) <= 14:
        return await _capture.capture(request)
    raise UiError(404, f"not a page: {stamp!r} is neither * nor a timestamp of 1 to 14 digits")
