"""The field names of the model classes, computed once (below every model module:
records and queries both need them, and records build query keys)."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["field_names", "required_names"]

_FIELD_NAMES: dict[type, frozenset[str]] = {}
_REQUIRED: dict[type, tuple[str, ...]] = {}


def field_names(cls: type[Any]) -> frozenset[str]:
    """The field names of a model class, computed once: ``msgspec.structs.fields``
    evaluates the annotations on every call (a ``compile()`` per field), which
    was 60% of the time to read a file of queries."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in msgspec.structs.fields(cls))
    return names


def required_names(cls: type[Any]) -> tuple[str, ...]:
    """The fields of a model class without a default, sorted, computed once (as :func:`field_names`)."""
    names = _REQUIRED.get(cls)
    if names is None:
        names = _REQUIRED[cls] = tuple(sorted(f.name for f in msgspec.structs.fields(cls) if f.required))
    return names
