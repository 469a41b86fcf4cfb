"""The lookups' short way in: ``GET /{coll}/cdx``, ``/{coll}/index`` and
``/{coll}/resource`` of a collection this server has go straight to their
handlers, past Starlette's exception middleware, router and route wrappers.

A lookup is the server's busiest request and its cheapest: on the server bench's
store a CDX closest answer cost 108 us of the process's CPU in process through that
stack, 100 past it (docs/performance.md, "Past the router"). The
handlers are the routes' own, given the request the router would have made, so
both ways answer alike. Anything else, and any answer that raises (a 400, a
store's error), goes down the whole stack, which answers it as it always has:
the handler runs again there, so an error is said in one place only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Lookups"]

Handler = Callable[[Request], Awaitable[Response]]


class Lookups:
    """ASGI middleware answering the lookups of ``handlers`` (the last path segment
    to its handler) for the app's collections; the rest goes on to ``app``."""

    def __init__(self, app: ASGIApp, handlers: Mapping[str, Handler]) -> None:
        self.app = app
        self.handlers = dict(handlers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self._handler(scope)
        if handler is not None:
            try:
                response = await handler(Request(scope, receive))
            except Exception:  # noqa: S110 - said by the whole stack below, as a route's error is
                pass
            else:
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _handler(self, scope: Scope) -> Handler | None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope.get("root_path"):
            return None  # mounted under a prefix: the router knows how to take it off
        _, coll, last = [*scope["path"].split("/", 2), "", ""][:3]
        handler = self.handlers.get(last)
        collections: dict[str, Any] = scope["app"].state.collections
        if handler is None or coll not in collections:
            return None
        scope["path_params"] = {"coll": coll}  # as the router's match sets it
        return handler
