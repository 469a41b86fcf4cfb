"""``web-index serve``: the HTTP server over a store (and a pipeline's searchers)."""

from __future__ import annotations

import ipaddress
from typing import Annotated

import typer

from web_index.cli._app import (
    EXIT_OK,
    EXIT_USAGE,
    StoreOption,
    app,
    cli_errors,
    fail,
    open_index,
    say,
    store_location,
)

__all__ = ["serve"]


@app.command("serve")
def serve(
    store: StoreOption = "",
    host: Annotated[
        str, typer.Option(help="Address to listen on; anything but loopback is reachable by others.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    queue: Annotated[
        str | None,
        typer.Option(
            help="Route searches through this broker's orchestrator to its searchers"
            " [default: answer from the store's published databases].",
            show_default=False,
        ),
    ] = None,
    search_timeout: Annotated[float, typer.Option(min=0.1, help="Seconds a routed search may take.")] = 10.0,
) -> None:
    """Serve the store over HTTP until SIGINT or SIGTERM: GET /search?site=&q= (see docs/server.md)."""
    from web_index.server import create_app
    from web_index.server import serve as run

    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise fail(EXIT_USAGE, f"--host {host!r}: give an IP address (127.0.0.1, ::1, 0.0.0.0)") from None
    location = store_location(store)
    with cli_errors(location), open_index(location, None, read_only=True) as index:
        try:
            application = create_app(index, queue=queue, search_timeout=search_timeout)
        except ValueError as exc:  # a queue URL of neither form
            raise fail(EXIT_USAGE, str(exc)) from None
        say("", f"serving {location} on http://{host}:{port}" + (f" (searches via {queue})" if queue else ""))
        run(application, host=host, port=port)
    raise typer.Exit(EXIT_OK)
