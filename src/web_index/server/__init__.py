"""The HTTP face of web-index: an ASGI app (Starlette, served by uvicorn).

One module per resource the user sees; :func:`create_app` puts them
together and :func:`serve` runs it. It talks to the store and the pipeline
through their public API only, and binds 127.0.0.1 unless told otherwise.
Needs the ``server`` extra.
"""

from __future__ import annotations

from web_index._extras import lazy_names

__all__ = ["create_app", "serve"]

__getattr__ = lazy_names(
    __name__,
    {"create_app": ("web_index.server._app", "server"), "serve": ("web_index.server._app", "server")},
)
