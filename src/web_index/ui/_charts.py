"""Charts drawn on the server as SVG: stacked bars of counts by category, and
horizontal bars of shares. Numbers go in a table beside each chart (the
templates'), so the chart adds a picture, not information only it holds."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["STATE_COLOURS", "Bar", "Stack", "Tick", "bars", "stacks", "states_css"]

# The standard's states, coloured as the pages' state labels are.
STATE_COLOURS = {
    "success": "#1a6b2f",
    "timeout": "#8a5300",
    "unreachable": "#6f4700",
    "retryable-error": "#5c5200",
    "escalate": "#3f5a00",
    "low-quality": "#5b3a8a",
    "blocked": "#a11d1d",
    "unauthorised": "#7c1f4f",
    "ssl-error": "#8f2a52",
    "error": "#6e0f0f",
}
_OTHER = "#5f6b7a"


@dataclass(frozen=True, slots=True)
class Rect:
    x: float
    y: float
    width: float
    height: float
    fill: str
    label: str


@dataclass(frozen=True, slots=True)
class Stack:
    """One column of a stacked bar chart: its label, its rectangles, its total."""

    label: str
    x: float
    rects: tuple[Rect, ...]
    total: int
    labelled: bool = True  # whether its label is drawn: not where labels would overlap


@dataclass(frozen=True, slots=True)
class Tick:
    """A value on a chart's axis and where it is drawn."""

    value: int
    y: float


@dataclass(frozen=True, slots=True)
class Bar:
    """One row of a horizontal bar chart."""

    label: str
    value: int
    width: float
    share: float


def ticks(top: int, most: int = 4) -> list[int]:
    """Round values from 0 to at least ``top`` for an axis: at most ``most``
    steps of 1, 2 or 5 times a power of ten."""
    raw = max(top, 1) / most
    power = 10 ** math.floor(math.log10(raw))
    step = max(1, int(next(m * power for m in (1, 2, 5, 10) if m * power >= raw)))
    return [i * step for i in range(math.ceil(max(top, 1) / step) + 1)]


def stacks(
    columns: Sequence[tuple[str, Mapping[str, int]]],
    *,
    height: float = 160.0,
    width: float = 600.0,
    label_width: float = 60.0,
    colours: Mapping[str, str] = STATE_COLOURS,
) -> tuple[list[Stack], float, list[Tick]]:
    """The columns (a label and its counts by category) as stacked bars that
    share one scale, every column's label drawn that has ``label_width`` free;
    the width of a column; and the scale's ticks."""
    scale = ticks(max((sum(counts.values()) for _, counts in columns), default=0))
    top = scale[-1]
    step = width / max(len(columns), 1)
    every = math.ceil(label_width / step)
    out = []
    for i, (label, counts) in enumerate(columns):
        y = height
        rects = []
        for name in sorted(counts, key=lambda n: (n != "success", n)):
            h = height * counts[name] / top
            y -= h
            rects.append(
                Rect(i * step, y, step * 0.8, h, colours.get(name, _OTHER), f"{name}: {counts[name]}")
            )
        out.append(Stack(label, i * step, tuple(rects), sum(counts.values()), i % every == 0))
    return out, step, [Tick(v, height - height * v / top) for v in scale]


def bars(counts: Mapping[str, int], *, width: float = 320.0, most: int = 12) -> list[Bar]:
    """The ``most`` largest counts as bars on one scale, largest first."""
    total = sum(counts.values()) or 1
    ordered = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:most]
    top = ordered[0][1] if ordered else 1
    return [Bar(label, n, width * n / top, n / total) for label, n in ordered]


def states_css() -> str:
    """The state labels' colours, the charts' own (white text on each: contrast 4.5:1 or more)."""
    rules = [f".state-{name} {{ background: {colour}; }}" for name, colour in STATE_COLOURS.items()]
    return "\n".join(rules) + "\n"
