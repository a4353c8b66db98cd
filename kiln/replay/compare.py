"""Compare a replay's outcome for one recipe with its previous evidence on the same
host class, and classify what changed.

Move thresholds (θ): the gates say what passes, not how far a metric may drift
between two nights; a metric "moves" when |new - old| > θ for that metric
(MOVE_THETA, overridable per replay). A move is a regression when it goes the
worse way (the direction of the metric's gate, else DIRECTION). Timings are noisy on
shared machines, so step durations are compared by ratio instead: a step is
"slower" when it took more than `slower` times as long, and at least `slower_min_s`
seconds more (the tiny models' steps take 0.01-0.3 s, where scheduling noise alone
doubles a time). The decode throughput metric is left to the validate step's
duration, which contains it. Slower steps are reported, but are not regressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kiln.replay.hostclass import host_class
from kiln.schema import Evidence, Thresholds

# θ per metric. fp32 noise measured on the tiny models is ~1e-6 in |Δlogit|
# (README, "Measured"); a tenth of the fp32-exact gate bound (1e-3) is a real move.
MOVE_THETA: dict[str, float] = {
    "token_match_rate": 0.0,
    "first_divergence": 0.0,
    "max_abs_logit_diff": 1e-4,
    "min_logit_cosine": 1e-6,
    "unexplained_divergences": 0.0,
    "tokenizer_match_rate": 0.0,
}
DIRECTION: dict[str, str] = {
    "token_match_rate": "higher",
    "first_divergence": "higher",
    "max_abs_logit_diff": "lower",
    "min_logit_cosine": "higher",
    "unexplained_divergences": "lower",
    "tokenizer_match_rate": "higher",
}
TIMING = "decode_tokens_per_s"  # a timing: never a "move" (see the module doc)
FAILED = ("quality-fail", "build-fail")


@dataclass(frozen=True)
class Settings:
    theta: dict[str, float] = field(default_factory=lambda: dict(MOVE_THETA))
    slower: float = 1.5
    slower_min_s: float = 0.5


@dataclass
class Outcome:
    """One recipe in the report."""

    recipe: str
    verdict: str  # pass, quality-fail, build-fail, unsupported-here, not-run
    reason: str = ""
    infra: bool = False  # could not be measured because of the infrastructure
    evidence: Evidence | None = None
    previous: Evidence | None = None
    attempt: int | None = None
    host_class: str = ""
    seconds: float = 0.0
    built: list[str] = field(default_factory=list)
    verdict_change: str = ""  # "pass -> quality-fail"
    change: str = ""  # "new failure", "fix", "still failing", ""
    moves: list[str] = field(default_factory=list)  # metric moves beyond θ
    worse: list[str] = field(default_factory=list)  # the moves that go the worse way
    slower: list[str] = field(default_factory=list)

    @property
    def regression(self) -> bool:
        return self.change == "new failure" or bool(self.worse)

    @property
    def unsupported(self) -> bool:
        return self.verdict == "unsupported-here"


def previous(history: list[Evidence], cls: str | None) -> Evidence | None:
    """The latest record on host class `cls` (any class when `cls` is None)."""
    for record in reversed(history):
        if cls is None or host_class(record.host) == cls:
            return record
    return None


def _direction(metric: str, thresholds: Thresholds | None) -> str:
    for gate in thresholds.gates if thresholds else []:
        if gate.metric == metric:
            return gate.direction
    return DIRECTION.get(metric, "higher")


def _moves(out: Outcome, thresholds: Thresholds | None, settings: Settings) -> None:
    assert out.evidence and out.previous
    new, old = out.evidence.metrics, out.previous.metrics
    for metric in sorted(set(new) & set(old) - {TIMING}):
        delta = new[metric] - old[metric]
        if abs(delta) <= settings.theta.get(metric, 0.0):
            continue
        better = (delta > 0) == (_direction(metric, thresholds) == "higher")
        text = (
            f"{metric}: {old[metric]:.6g} -> {new[metric]:.6g} "
            f"({'better' if better else 'worse'}; θ {settings.theta.get(metric, 0.0):g})"
        )
        out.moves.append(text)
        if not better:
            out.worse.append(text)


def _slower(out: Outcome, settings: Settings) -> None:
    assert out.evidence and out.previous
    new, old = out.evidence.durations or {}, out.previous.durations or {}
    for step in sorted(set(new) & set(old)):
        if (
            new[step] > old[step] * settings.slower
            and new[step] - old[step] > settings.slower_min_s
        ):
            out.slower.append(f"{step}: {old[step]:.2f} s -> {new[step]:.2f} s")


def classify(out: Outcome, thresholds: Thresholds | None, settings: Settings) -> Outcome:
    """Fill in the verdict change, new failure or fix, metric moves and slower steps."""
    old = out.previous.verdict if out.previous else None
    if old is not None and old != out.verdict:
        out.verdict_change = f"{old} -> {out.verdict}"
    if out.verdict in FAILED:
        out.change = "still failing" if old in FAILED else "new failure"
    elif out.verdict == "pass" and old in FAILED:
        out.change = "fix"
    if out.evidence and out.previous:
        _moves(out, thresholds, settings)
        _slower(out, settings)
    return out


def exit_code(outcomes: list[Outcome]) -> int:
    """0 all good, 1 regressions, 2 infrastructure failure (it wins: an incomplete
    replay cannot claim anything about what it did not measure)."""
    if any(o.infra for o in outcomes):
        return 2
    return 1 if any(o.regression for o in outcomes) else 0


def as_dict(out: Outcome) -> dict[str, Any]:
    return {
        "recipe": out.recipe,
        "verdict": out.verdict,
        "previous": out.previous.verdict if out.previous else None,
        "change": out.change,
        "regression": out.regression,
        "infra": out.infra,
        "reason": out.reason,
        "attempt": out.attempt,
        "host_class": out.host_class,
        "moves": out.moves,
        "slower": out.slower,
        "built": out.built,
    }
