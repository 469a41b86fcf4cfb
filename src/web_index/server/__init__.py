"""The HTTP face of web-index: an ASGI app (Starlette, served by uvicorn).

One module per resource the user sees; :func:`create_app` puts them
together and :func:`serve` runs it. It talks to the store and the pipeline
through their public API only, and binds 127.0.0.1 unless told otherwise.
Needs the ``server`` extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from web_index._extras import lazy_names

if TYPE_CHECKING:
    from web_index.server._app import create_app, serve
    from web_index.server._saving import SaveJob, SaveRefusedError, Saves

__all__ = ["SaveJob", "SaveRefusedError", "Saves", "create_app", "serve"]

__getattr__ = lazy_names(
    __name__,
    {
        "create_app": ("web_index.server._app", "server"),
        "serve": ("web_index.server._app", "server"),
        # The saves the app runs (app.state.saves), which the web pages start and follow.
        "SaveJob": ("web_index.server._saving", "server"),
        "SaveRefusedError": ("web_index.server._saving", "server"),
        "Saves": ("web_index.server._saving", "server"),
    },
)
