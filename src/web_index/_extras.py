"""The optional extras: the parts of web-index that import a dependency a
local store does not need, loaded on first use (PEP 562 ``__getattr__``), so
``pip install web-index`` stays small and a missing extra is one clear line."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from web_index.errors import MissingExtraError

__all__ = ["EXTRAS", "import_extra", "lazy_names"]

# extra -> (the distribution it installs, the top-level module, what needs it)
EXTRAS: Mapping[str, tuple[str, str, str]] = {
    "s3": ("obstore", "obstore", "an s3:// store"),
    "postgres": ("psycopg", "psycopg", "a PostgreSQL buffer"),
    "browser": ("playwright", "playwright", "the browser fetcher"),
    "redis": ("redis", "redis", "a Redis queue"),
    "server": ("starlette", "starlette", "web-index serve"),
    "dask": ("distributed", "distributed", "a Dask cluster (--scheduler)"),
}


def import_extra(module: str, extra: str) -> ModuleType:
    """Import ``module``, which needs ``extra``; if the extra's
    dependency is missing, a :class:`MissingExtraError` saying how to install it."""
    dist, top, what = EXTRAS[extra]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != top:
            raise
        raise MissingExtraError(
            f"{what} needs {dist}, which is not installed: pip install 'web-index[{extra}]'"
        ) from None


def lazy_names(package: str, names: Mapping[str, tuple[str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each of ``names`` (name ->
    (module, extra)) is imported from its module when first asked for."""

    def load(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, extra = names[name]
        return getattr(import_extra(module, extra), name)

    return load
