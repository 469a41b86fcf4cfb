"""The web interface: a URL's history with every attempt, failures included, its
captures replayed from the archive, and the store at a glance; pages of the
server's app (:func:`add_ui`), reading the store only through the public calls
the server uses. No page writes, and none reaches the live web. Needs the
``server`` extra.

``__all__`` is the public API.
"""

from __future__ import annotations

from web_index._extras import lazy_names

__all__ = ["add_ui"]

__getattr__ = lazy_names(__name__, {"add_ui": ("web_index.ui._app", "server")})
