"""Geometry for the small metric plots on recipe pages (server-rendered inline SVG).

One small plot per metric, because metrics live on unrelated scales (|delta logit|
~1e-6, tokens/s ~1e4). A plot tells the truth about its numbers:

* its scale is labelled on the plot: the top and bottom ticks print the values
  they stand for, at the precision the page prints values (`DIGITS` significant
  digits), so a small wiggle is never read as a large one;
* a change below that precision is drawn as a flat line (the values print the same,
  so they are drawn the same), and the caption says so;
* one series per host class (kiln.hostinfo): a 2-core CPU's tokens/s and an H200's
  are two lines, never one V;
* a dashed break where the recipe's build changed (another validate step key) or
  its verdict was judged under other gates: the line does not join across it.

x is the run's date (evenly spaced when the dates cannot be told apart). A plot's
runs are the recipe's history (the capped lines ci and nightly runs append to
manifests/history/<recipe>.jsonl) and its manifest's records (at most one per host
class and scope: kiln/evidence/manifest.py), merged by date (`runs`). The template
draws the SVG; this module only computes coordinates, so the page needs no
JavaScript.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

from kiln.hostinfo import HostClass, host_class
from kiln.schema import Evidence

WIDTH, HEIGHT, PAD = 240.0, 64.0, 7.0
GUTTER = 58.0  # left of the plot area: the tick labels
DIGITS = 6  # significant digits, as the page prints values (the `num` filter)


def shown(value: float) -> str:
    """A value as the page prints it."""
    return f"{value:.{DIGITS}g}"


@dataclass(frozen=True)
class Run:
    """One validation a plot shows: a manifest record, or a line of the history."""

    date: str
    host: Mapping[str, Any]
    metrics: Mapping[str, float]
    build: tuple[str, str | None]  # what a line may join across: the build and its gates
    label: str  # "#3" (the page's record 3) or the scope of a history line

    @classmethod
    def of(cls, e: Evidence, label: str) -> Run:
        gates = e.thresholds.sha256[:16] if e.thresholds else None
        host = e.host.model_dump(mode="json")
        return cls(e.date, host, e.metrics, (e.step_key, gates), label)


def runs(records: Sequence[Evidence], history: Sequence[Mapping[str, Any]] = ()) -> list[Run]:
    """The manifest's records (labelled by their number on the page) and the history's
    lines (kiln.evidence.manifest.history_line) that are not those records, by date."""
    out = [Run.of(e, f"#{i}") for i, e in enumerate(records)]
    seen = {(r.date, host_class(r.host).key) for r in out}
    for line in history:
        try:
            run = Run(
                str(line["date"]),
                dict(line["host"]),
                {k: float(v) for k, v in dict(line["metrics"]).items()},
                (str(line["step_key"]), line.get("thresholds")),
                str(line.get("scope", "")),
            )
        except (KeyError, TypeError, ValueError):
            continue  # a damaged line is left out of a plot (the file is a plot's data)
        if (run.date, host_class(run.host).key) not in seen:
            out.append(run)
    return sorted(out, key=lambda r: r.date)


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    index: int  # the run's position in the plot
    label: str  # "#3": the recipe page's record 3; else the history line's scope
    date: str
    value: float


@dataclass(frozen=True)
class Series:
    host: HostClass
    number: int  # which of the plot's series (its colour and dash pattern)
    segments: list[list[Point]]  # runs of points no break separates

    @property
    def polylines(self) -> list[str]:
        return [
            " ".join(f"{p.x:.1f},{p.y:.1f}" for p in seg) for seg in self.segments if len(seg) > 1
        ]

    @property
    def points(self) -> list[Point]:
        return [p for seg in self.segments for p in seg]


@dataclass(frozen=True)
class Plot:
    metric: str
    points: list[Point]  # every point, in record order
    low: float
    high: float
    series: list[Series]
    breaks: list[float]  # x of each dashed break
    flat: bool  # every value prints the same: drawn as a flat line

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)

    @property
    def latest(self) -> float:
        return self.points[-1].value

    @property
    def ticks(self) -> list[tuple[float, str]]:
        """(y, label) of the labelled scale: top and bottom, or the one flat value."""
        if self.flat:
            return [(HEIGHT / 2, shown(self.low))]
        return [(PAD, shown(self.high)), (HEIGHT - PAD, shown(self.low))]

    @property
    def scale(self) -> str:
        """The scale in words, for the caption and the plot's title."""
        if self.flat:
            same = "unchanged" if self.low == self.high else f"changes below {DIGITS} digits"
            return f"flat: {shown(self.low)} ({same})"
        return f"scale {shown(self.low)} – {shown(self.high)}"


def _xs(history: list[Run]) -> list[float]:
    left, right = GUTTER, WIDTH - PAD
    try:
        times = [datetime.fromisoformat(e.date).timestamp() for e in history]
    except ValueError:
        times = []
    span = (max(times) - min(times)) if times else 0.0
    if len(history) == 1:
        return [(left + right) / 2]
    if span <= 0:
        step = (right - left) / (len(history) - 1)
        return [left + i * step for i in range(len(history))]
    return [left + (t - min(times)) / span * (right - left) for t in times]


def _ys(values: list[float], flat: bool) -> list[float]:
    low, high = min(values), max(values)
    if flat or high == low:
        return [HEIGHT / 2] * len(values)
    return [HEIGHT - PAD - (v - low) / (high - low) * (HEIGHT - 2 * PAD) for v in values]


def breaks(history: list[Run]) -> list[int]:
    """Indexes i where run i was made of another build (or gates) than run i-1."""
    return [i for i in range(1, len(history)) if history[i].build != history[i - 1].build]


def plots(given: Sequence[Run | Evidence]) -> list[Plot]:
    """One plot per metric measured in any run, sorted by metric name (records given
    as Evidence are labelled by their position)."""
    history = [r if isinstance(r, Run) else Run.of(r, f"#{i}") for i, r in enumerate(given)]
    xs = _xs(history)
    cut = breaks(history)
    cut_x = [(xs[i - 1] + xs[i]) / 2 for i in cut]
    hosts = list({host_class(e.host).key: host_class(e.host) for e in history}.values())
    out = []
    for metric in sorted({m for e in history for m in e.metrics}):
        measured = [(i, e) for i, e in enumerate(history) if metric in e.metrics]
        values = [e.metrics[metric] for _, e in measured]
        flat = shown(min(values)) == shown(max(values))
        ys = _ys(values, flat)
        points = [
            Point(xs[i], y, i, e.label, e.date, v)
            for (i, e), y, v in zip(measured, ys, values, strict=True)
        ]
        series = []
        for number, host in enumerate(hosts):
            mine = [
                p for p, (_, e) in zip(points, measured, strict=True) if host_class(e.host) == host
            ]
            if not mine:
                continue
            segments: list[list[Point]] = [[mine[0]]]
            for prev, p in pairwise(mine):
                if any(prev.index < i <= p.index for i in cut):
                    segments.append([p])
                else:
                    segments[-1].append(p)
            series.append(Series(host, number, segments))
        first, last = points[0].index, points[-1].index
        shown_breaks = [x for i, x in zip(cut, cut_x, strict=True) if first < i <= last]
        out.append(Plot(metric, points, min(values), max(values), series, shown_breaks, flat))
    return out
