"""Geometry for the small metric plots on recipe pages (server-rendered inline SVG).

One small plot per metric, because metrics live on unrelated scales (|delta logit|
~1e-6, tokens/s ~1e4). x is the evidence date (evenly spaced when the dates cannot
be told apart), y the metric within its own range. The template draws the SVG; this
module only computes coordinates, so the page needs no JavaScript.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kiln.schema import Evidence

WIDTH, HEIGHT, PAD = 240.0, 56.0, 6.0


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    index: int  # evidence record number (the recipe page's #evidence-<index>)
    date: str
    value: float


@dataclass(frozen=True)
class Plot:
    metric: str
    points: list[Point]
    low: float
    high: float

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)

    @property
    def latest(self) -> float:
        return self.points[-1].value


def _xs(history: list[Evidence]) -> list[float]:
    try:
        times = [datetime.fromisoformat(e.date).timestamp() for e in history]
    except ValueError:
        times = []
    span = (max(times) - min(times)) if times else 0.0
    if len(history) == 1:
        return [WIDTH / 2]
    if span <= 0:
        step = (WIDTH - 2 * PAD) / (len(history) - 1)
        return [PAD + i * step for i in range(len(history))]
    return [PAD + (t - min(times)) / span * (WIDTH - 2 * PAD) for t in times]


def _ys(values: list[float]) -> list[float]:
    low, high = min(values), max(values)
    if high == low:
        return [HEIGHT / 2] * len(values)
    return [HEIGHT - PAD - (v - low) / (high - low) * (HEIGHT - 2 * PAD) for v in values]


def plots(history: list[Evidence]) -> list[Plot]:
    """One plot per metric measured in any record, sorted by metric name."""
    xs = _xs(history)
    out = []
    for metric in sorted({m for e in history for m in e.metrics}):
        measured = [(i, e) for i, e in enumerate(history) if metric in e.metrics]
        values = [e.metrics[metric] for _, e in measured]
        ys = _ys(values)
        points = [
            Point(xs[i], y, i, e.date, v) for (i, e), y, v in zip(measured, ys, values, strict=True)
        ]
        out.append(Plot(metric, points, min(values), max(values)))
    return out
