"""The names a server answers to (the ``Host`` header): a page elsewhere whose name its DNS
turns into 127.0.0.1 (DNS rebinding) is, to the browser, of the same origin as a server on
loopback, free to read the archive and save through it, unless the server refuses a name it
does not know. (Starlette's ``TrustedHostMiddleware`` does this too, but the oldest Starlette
this project allows reads ``[::1]:8080`` as ``[``.)"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["KnownHosts", "host_name"]

_REFUSED = b"unknown host: this server answers to its own names only (--allowed-host)\n"
_HEADERS = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(_REFUSED)).encode())]


def host_name(value: str) -> str:
    """A ``Host`` value, or a name given for one, as compared: lower-case, without its port,
    an IPv6 address in brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    if value.count(":") > 1:  # an IPv6 address given bare (a name has one ":" at most)
        try:
            return f"[{ipaddress.IPv6Address(value)}]"
        except ValueError:
            return value
    name, colon, port = value.rpartition(":")
    return name if colon and port.isdigit() else value


class KnownHosts:
    """An ASGI app that passes on only requests whose ``Host`` is one of ``names`` (a 400
    otherwise, as for a request without one)."""

    def __init__(self, app: ASGIApp, names: Iterable[str]) -> None:
        self.app = app
        self.names = frozenset(host_name(n) for n in names)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next((v for k, v in scope["headers"] if k == b"host"), b"")
            if host_name(host.decode("latin-1")) not in self.names:
                if scope["type"] == "websocket":
                    await send({"type": "websocket.close", "code": 1008})
                    return
                await send({"type": "http.response.start", "status": 400, "headers": _HEADERS})
                await send({"type": "http.response.body", "body": _REFUSED})
                return
        await self.app(scope, receive, send)
