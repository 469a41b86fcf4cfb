"""Where the browser fetcher's Chromium is and how it is started; no
Playwright here, so that a light install can ask whether a browser is there."""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["CHROMIUM_ARGS", "DEFAULT_CHROMIUM", "chromium_available"]

DEFAULT_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    # WebRTC sends its UDP (STUN, TURN) straight to the address a page names, around the
    # proxy that checks every other connection against the address policy: none but what
    # the proxy carries.
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
)


def chromium_available(executable_path: str | Path = DEFAULT_CHROMIUM) -> bool:
    """Whether the browser fetcher can run here: an executable Chromium at
    ``executable_path`` and the ``browser`` extra (Playwright) installed."""
    if importlib.util.find_spec("playwright") is None:
        return False
    path = Path(executable_path)
    return path.is_file() and path.stat().st_mode & 0o111 != 0
