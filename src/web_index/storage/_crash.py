"""Fault injection for the crash tests."""

from __future__ import annotations

import os

__all__ = ["crash_point"]


def crash_point(name: str) -> None:
    """With ``WEB_INDEX_CRASH_AT=<name>``, kill the process at this step as SIGKILL would,
    leaving whatever is on disk."""
    if os.environ.get("WEB_INDEX_CRASH_AT") == name:
        os._exit(137)
