"""The command line's reference, rendered from the app itself.

docs/cli.md holds it between cog markers: ``cog -r docs/cli.md`` rewrites it
after a change, and tests/test_docs.py fails while it is out of date, so the
page cannot drift from the options the commands really take.
"""

from __future__ import annotations

import typer.main
from typer.core import TyperArgument, TyperGroup, TyperOption

__all__ = ["reference"]


def reference() -> str:
    """Markdown: per command, its usage, what it does and a table of its options."""
    from web_index.cli import app

    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    parts = []
    for name, command in group.commands.items():
        arguments = [p for p in command.params if isinstance(p, TyperArgument)]
        usage = " ".join(_argument(p) for p in arguments)
        help_text = (command.help or "").strip()
        summary, _, rest = help_text.partition("\n\n")
        parts.append(f"### `web-index {name}{' ' + usage if usage else ''}`\n")
        parts.append(" ".join(summary.split()) + "\n")
        if rest:
            parts.append(
                "\n".join(" ".join(p.split()) for p in rest.split("\n\n")).replace("\n", "\n\n") + "\n"
            )
        parts.append("| option | env | default | what |\n|---|---|---|---|")
        for param in command.params:
            if isinstance(param, TyperOption):
                parts.append(_option_row(param))
        parts.append("")
    # The help texts are plain: "<domain>.parquet" must not read as an HTML tag.
    return "\n".join(parts).replace("<", "&lt;")


def _argument(param: TyperArgument) -> str:
    shown = (param.name or "").upper()
    shown += "..." if param.nargs == -1 else ""
    return shown if param.required else f"[{shown}]"


def _option_row(param: TyperOption) -> str:
    names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
    env = f"`{param.envvar}`" if isinstance(param.envvar, str) else ""
    default = param.default
    hidden = default is None or default is False or default == "" or callable(default)
    shown = "" if hidden else f"`{default}`"
    what = " ".join((param.help or "").split()).replace("|", "\\|")
    return f"| {names} | {env} | {shown} | {what} |"
