"""Geometry for the small metric plots on recipe pages (server-rendered inline SVG).

One small plot per metric, because metrics live on unrelated scales (|delta logit|
~1e-6, tokens/s ~1e4). A plot tells the truth about its numbers, and says what they
are (issue 44: "plots are walls"):

* its scale is labelled on the plot, rounded: the scale runs between the values
  rounded outward to a tenth of the spread's order of magnitude (two significant
  digits of the spread: 29564.4 - 52559 tokens/s is drawn on 29k - 53k), so each tick
  label is exactly the value its tick stands for, in the metric's unit (`UNITS`) with
  an SI prefix, or in short scientific notation for a unitless value far from 1
  ("2.63e-6"); the gutter is as wide as the longest label, so no label leaves the card;
* a change below the page's precision (`DIGITS` significant digits, the `num` filter)
  is drawn as a flat line (the values print the same, so they are drawn the same),
  and the caption says so;
* one series per host class (kiln.hostinfo) and scope: a 2-core CPU's tokens/s and an
  H200's are two lines, and so are a nightly replay's and a person's build;
* a series' line does not join across a change of build (another validate step key)
  or of gates; each such change is drawn once, as a marker at the top of the plot
  where the new build was first validated, whichever series showed it first;
* the headline value (the record that decides the recipe's verdict,
  kiln.evidence.manifest.headline) is named with its host class, scope and date.

x is the run's date (evenly spaced when the dates cannot be told apart). A plot's
runs are the recipe's history (the capped lines ci and nightly runs append to
manifests/history/<recipe>.jsonl) and its manifest's records (at most one per host
class and scope: kiln/evidence/manifest.py), merged by date (`runs`). The template
draws the SVG; this module only computes coordinates, so the page needs no
JavaScript.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from typing import Any

from kiln.evidence.manifest import scope as scope_of
from kiln.hostinfo import HostClass, host_class
from kiln.schema import METRICS, UNITS, Evidence

WIDTH, HEIGHT, PAD = 240.0, 64.0, 7.0
CHAR = 5.6  # one tick-label character: 9 px monospace (style.css), 0.62 em
DIGITS = 6  # significant digits, as the page prints values (the `num` filter)
PREFIXES = {9: "G", 6: "M", 3: "k", 0: ""}


def shown(value: float) -> str:
    """A value as the page prints it."""
    return f"{value:.{DIGITS}g}"


def _exponent(value: float) -> int:
    return math.floor(math.log10(abs(value))) if value else 0


def label(value: float, step: float, unit: str = "") -> str:
    """`value` (a multiple of `step`, a power of ten) printed to `step`'s precision:
    with an SI prefix and the unit when the metric has one (29k tokens/s), plain near
    1 (0.768), else in short scientific notation (2.63e-6)."""
    e, big = _exponent(step), _exponent(value) if value else _exponent(step)
    if unit:
        p = max(0, min(9, 3 * (big // 3)))
        text = f"{value / 10**p:.{max(0, p - e)}f}{PREFIXES[p]}"
        return f"{text} {unit}"
    if -3 <= big < 4:
        return f"{value:.{max(0, -e)}f}"
    mantissa = value / 10**big
    return f"{mantissa:.{max(0, big - e)}f}e{big}"


def flat_label(value: float, unit: str = "") -> str:
    """The one value of a flat plot, to 3 significant digits (the exact value is in the
    dot's tooltip and the evidence table)."""
    if not value:
        return f"0 {unit}".strip()
    rounded = float(f"{value:.3g}")
    text = label(rounded, 10.0 ** (_exponent(rounded) - 2), unit)
    number, _, rest = text.partition(" ")
    if "e" not in number and "." in number:  # 1.00 -> 1, 0.500 -> 0.5: no false precision
        number = number.rstrip("0").rstrip(".")
    elif "e" in number:
        mantissa, _, exp = number.partition("e")
        number = f"{mantissa.rstrip('0').rstrip('.') if '.' in mantissa else mantissa}e{exp}"
    return f"{number} {rest}".strip()


def rounded_scale(low: float, high: float) -> tuple[float, float, float]:
    """(bottom, top, step): low and high rounded outward to a tenth of the spread's
    order of magnitude, so the scale keeps two significant digits of what changed."""
    step = 10.0 ** (_exponent(high - low) - 1)
    bottom = math.floor(low / step + 1e-9) * step
    top = math.ceil(high / step - 1e-9) * step
    places = max(0, -_exponent(step))  # k * 0.01 is 0.29000000000000004 in binary
    return round(bottom, places), round(top, places), step


@dataclass(frozen=True)
class Run:
    """One validation a plot shows: a manifest record, or a line of the history."""

    date: str
    host: Mapping[str, Any]
    metrics: Mapping[str, float]
    build: tuple[str, str | None]  # what a line may join across: the build and its gates
    label: str  # "#3" (the page's record 3) or "history"
    scope: str

    @classmethod
    def of(cls, e: Evidence, label: str) -> Run:
        gates = e.thresholds.sha256[:16] if e.thresholds else None
        host = e.host.model_dump(mode="json")
        return cls(e.date, host, e.metrics, (e.step_key, gates), label, scope_of(e))


def runs(records: Sequence[Evidence], history: Sequence[Mapping[str, Any]] = ()) -> list[Run]:
    """The manifest's records (labelled by their number on the page) and the history's
    lines (kiln.evidence.manifest.history_line) that are not those records, by date."""
    out = [Run.of(e, f"#{i}") for i, e in enumerate(records)]
    seen = {(r.date, host_class(r.host).key, r.scope) for r in out}
    for line in history:
        try:
            run = Run(
                str(line["date"]),
                dict(line["host"]),
                {k: float(v) for k, v in dict(line["metrics"]).items()},
                (str(line["step_key"]), line.get("thresholds")),
                "history",
                str(line.get("scope") or "local"),
            )
        except (KeyError, TypeError, ValueError):
            continue  # a damaged line is left out of a plot (the file is a plot's data)
        if (run.date, host_class(run.host).key, run.scope) not in seen:
            out.append(run)
    return sorted(out, key=lambda r: r.date)


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    index: int  # the run's position in the plot
    label: str  # "#3": the recipe page's record 3; else "history"
    date: str
    value: float


@dataclass(frozen=True)
class Series:
    host: HostClass
    scope: str
    number: int  # which of the plot's series (its colour and dash pattern)
    segments: list[list[Point]]  # runs of points of one build

    @property
    def name(self) -> str:
        return f"{self.host.short} · {self.scope}"

    @property
    def polylines(self) -> list[str]:
        return [
            " ".join(f"{p.x:.1f},{p.y:.1f}" for p in seg) for seg in self.segments if len(seg) > 1
        ]

    @property
    def points(self) -> list[Point]:
        return [p for seg in self.segments for p in seg]


@dataclass(frozen=True)
class Change:
    """A build (or its gates) validated for the first time: one marker per build."""

    x: float
    date: str
    rebuilt: bool  # the step keys changed; else the same build was judged by other gates

    @property
    def title(self) -> str:
        what = "rebuilt (the build's step keys changed)" if self.rebuilt else "re-judged"
        return f"{what}; first validated {self.date[:10]}: lines do not join across it"


@dataclass(frozen=True)
class Headline:
    point: Point
    series: Series
    decides: bool  # the record that decides the verdict; else the newest run


@dataclass(frozen=True)
class Plot:
    metric: str
    points: list[Point]  # every point, in run order
    low: float  # the scale's bottom and top (rounded outward; the one value when flat)
    high: float
    series: list[Series]
    changes: list[Change]
    flat: bool  # every value prints the same: drawn as a flat line
    headline: Headline
    ticks: list[tuple[float, str]]  # (y, label) of the labelled scale
    gutter: float  # left of the plot area: as wide as the longest tick label

    @property
    def unit(self) -> str:
        return UNITS.get(self.metric, "")

    @property
    def meaning(self) -> str:
        return METRICS.get(self.metric, "")

    @property
    def latest(self) -> float:
        return self.points[-1].value

    @property
    def scale(self) -> str:
        """The scale in words, for the caption and the plot's title."""
        if self.flat:
            same = "unchanged" if self.low == self.high else f"changes below {DIGITS} digits"
            return f"flat: {self.ticks[0][1]} ({same})"
        return f"scale {self.ticks[1][1]} – {self.ticks[0][1]}"


def _times(history: list[Run]) -> list[float]:
    try:
        return [datetime.fromisoformat(e.date).timestamp() for e in history]
    except ValueError:
        return []


def _xs(history: list[Run], left: float) -> list[float]:
    right, times = WIDTH - PAD, _times(history)
    span = (max(times) - min(times)) if times else 0.0
    if len(history) == 1:
        return [(left + right) / 2]
    if span <= 0:
        step = (right - left) / (len(history) - 1)
        return [left + i * step for i in range(len(history))]
    return [left + (t - min(times)) / span * (right - left) for t in times]


def _scale(metric: str, values: list[float]) -> tuple[bool, float, float, list[tuple[float, str]]]:
    """(flat, bottom, top, ticks) of one metric's values."""
    unit, low, high = UNITS.get(metric, ""), min(values), max(values)
    if shown(low) == shown(high):
        return True, low, high, [(HEIGHT / 2, flat_label(low, unit))]
    bottom, top, step = rounded_scale(low, high)
    return (
        False,
        bottom,
        top,
        [(PAD, label(top, step, unit)), (HEIGHT - PAD, label(bottom, step, unit))],
    )


def _y(value: float, flat: bool, bottom: float, top: float) -> float:
    if flat:
        return HEIGHT / 2
    return HEIGHT - PAD - (value - bottom) / (top - bottom) * (HEIGHT - 2 * PAD)


def _key(r: Run) -> tuple[HostClass, str]:
    return host_class(r.host), r.scope


def _series(history: list[Run], measured: list[tuple[Point, Run]]) -> list[Series]:
    """One series per host class and scope, split where the build changed; a series
    is numbered (coloured) alike in every plot of the page."""
    numbers = {k: n for n, k in enumerate(dict.fromkeys(_key(r) for r in history))}
    out = []
    for key in dict.fromkeys(_key(r) for _, r in measured):
        mine = [p for p, r in measured if _key(r) == key]
        segments: list[list[Point]] = [[mine[0]]]
        for prev, p in pairwise(mine):
            if history[prev.index].build != history[p.index].build:
                segments.append([p])
            else:
                segments[-1].append(p)
        out.append(Series(key[0], key[1], numbers[key], segments))
    return out


def _changes(history: list[Run], series: list[Series], points: list[Point]) -> list[Change]:
    """Each build a series changed to, once: just before the plot's first run of it."""
    first: dict[tuple[str, str | None], Change] = {}
    for s in series:
        for before, after in pairwise(s.segments):
            old, new = history[before[-1].index].build, history[after[0].index].build
            prev = max((p.x for p in points if p.index < after[0].index), default=after[0].x)
            x = (prev + after[0].x) / 2
            if new not in first or x < first[new].x:
                first[new] = Change(x, after[0].date, old[0] != new[0])
    return sorted(first.values(), key=lambda c: c.x)


def _headline(series: list[Series], decides: str | None) -> Headline:
    for s in series:
        for p in s.points:
            if decides is not None and p.label == decides:
                return Headline(p, s, True)
    newest = max((p.index, p, s) for s in series for p in s.points)
    return Headline(newest[1], newest[2], False)


def plots(given: Sequence[Run | Evidence], headline: str | None = None) -> list[Plot]:
    """One plot per metric measured in any run, sorted by metric name (records given
    as Evidence are labelled by their position; `headline` is the label of the record
    that decides the verdict)."""
    history = [r if isinstance(r, Run) else Run.of(r, f"#{i}") for i, r in enumerate(given)]
    out = []
    for metric in sorted({m for e in history for m in e.metrics}):
        measured_runs = [(i, e) for i, e in enumerate(history) if metric in e.metrics]
        values = [e.metrics[metric] for _, e in measured_runs]
        flat, bottom, top, ticks = _scale(metric, values)
        gutter = max(len(text) for _, text in ticks) * CHAR + 8
        xs = _xs(history, gutter)
        measured = [
            (Point(xs[i], _y(v, flat, bottom, top), i, e.label, e.date, v), e)
            for (i, e), v in zip(measured_runs, values, strict=True)
        ]
        series = _series(history, measured)
        out.append(
            Plot(
                metric,
                [p for p, _ in measured],
                bottom,
                top,
                series,
                _changes(history, series, [p for p, _ in measured]),
                flat,
                _headline(series, headline),
                ticks,
                gutter,
            )
        )
    return out
