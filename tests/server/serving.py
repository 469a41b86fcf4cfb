"""The server's app on uvicorn on a free loopback port, for a test."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn

from tests.servers import free_port, wait_port
from web_index import WebIndex
from web_index.server import create_app
from web_index.server._writes import OneWriteProtocol
from web_index.ui import add_ui


@contextmanager
def serving(index: WebIndex, *, ui: bool = False, **options: object) -> Iterator[httpx.Client]:
    """``create_app(index, **options)`` served (with the web pages, ``ui``); a
    client with its base URL."""
    port = free_port()
    app = create_app(index, **options)  # type: ignore[arg-type]
    if ui:
        add_ui(app)
    # The protocol ``serve`` runs with: every test over HTTP goes through its writes.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", http=OneWriteProtocol)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_port(port)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
            yield client
    finally:
        server.should_exit = True
        thread.join(timeout=10)
