"""How ``web-index -h`` shows the commands: in groups, in the order a newcomer
meets them (docs/cli.md, README's first hour), each description in paragraphs
that the terminal wraps, not lines broken where the source file broke them."""

from __future__ import annotations

import inspect

import typer
from typer.models import CommandInfo

__all__ = ["arrange"]

# Group, then its commands, in the order -h lists them.
_GROUPS = {
    "Make and fill a store": ("init", "insert", "import-warc", "import-wacz", "demo"),
    "Ask the store": ("query", "presence", "lookup", "search"),
    "Fetch and crawl": ("fetch", "crawl", "worker"),
    "Look after a store": ("stats", "flush", "compact", "verify"),
    "Serve and export": ("serve", "export-warc", "export-wacz"),
}
_ORDER = {name: n for n, name in enumerate(name for names in _GROUPS.values() for name in names)}
_GROUP = {name: group for group, names in _GROUPS.items() for name in names}


def arrange(app: typer.Typer) -> None:
    """Put each command of ``app`` in its group, in order, its help unwrapped; a
    command no group names fails here, at import, so none is left ungrouped."""
    for info in app.registered_commands:
        name = _name(info)
        if name not in _GROUP:
            raise LookupError(f"command {name!r} is in no help group: add it to {__name__}._GROUPS")
        info.rich_help_panel = _GROUP[name]
        info.help = _unwrapped(info.help or inspect.getdoc(info.callback) or "")
    app.registered_commands.sort(key=lambda info: _ORDER[_name(info)])


def _name(info: CommandInfo) -> str:
    """The command's name as typed: given, or its function's, with dashes."""
    return info.name or getattr(info.callback, "__name__", "").replace("_", "-")


def _unwrapped(text: str) -> str:
    """Each paragraph on one line (blank lines still part them)."""
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(text).split("\n\n"))
