"""Gates -> verdict. A verdict is earned by measurement, never assumed.

A metric that was not measured fails its gate: a missing number is not a pass.

A statistical gate derives its threshold with the one-sided z-test of TensorRT-LLM's
accuracy suite (tests/integration/defs/accuracy/accuracy_core.py, `compute_threshold`
and `compute_theta`): with per-sample standard deviation sigma over n samples, the
difference of two means has standard error sqrt(2 sigma^2 / n), so

    threshold = reference + z(alpha) * sqrt(2 sigma^2 / n)      (higher is better)
    threshold = reference - z(alpha) * sqrt(2 sigma^2 / n)      (lower is better)
    theta     = -(z(alpha) + z(beta)) * sqrt(2 sigma^2 / n)

where z = Phi^-1 (statistics.NormalDist: no scipy in the core). A bundle as good as
the reference fails with probability alpha; one worse by theta fails with
probability 1 - beta. The suite's published example: n=4096, sigma=50, alpha=0.05,
beta=0.2 gives an offset of -1.82 and theta = 2.75 (tests/unit/test_gates.py).

Many gates at once: each statistical gate that runs adds its own alpha of false
failures. A thresholds file may set `family_alpha`; each of its k statistical gates
then runs at family_alpha / k (Bonferroni), which bounds the chance that any of them
fails a bundle as good as the reference by family_alpha, whatever their correlation.
Threshold-only gates are deterministic bounds and spend no alpha.

A verdict is only as current as the gates it was judged by: every evidence record
names its thresholds file and the digest of what judging reads from it (`ref`: the
gates and family_alpha, not the prose), so an edited gate re-judges the recorded
metrics and `doit check` calls a verdict judged under other gates stale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from kiln.canonical import key_of
from kiln.schema import SAMPLE_SIZE, Gate, GateResult, GatesRef, Thresholds, Verdict

DEFAULT_ALPHA = 0.05


@dataclass(frozen=True)
class Bound:
    threshold: float
    alpha: float | None = None
    theta: float | None = None


def z_test_bound(
    reference: float, n: int, sigma: float, alpha: float, beta: float, higher: bool
) -> Bound:
    """TensorRT-LLM's one-sided z-test: the threshold, and the smallest effect it detects."""
    scale = math.sqrt(2 * sigma**2 / n)
    z_alpha = NormalDist().inv_cdf(alpha)
    z_beta = NormalDist().inv_cdf(beta)
    offset = z_alpha * scale
    return Bound(
        threshold=reference + offset if higher else reference - offset,
        alpha=alpha,
        theta=-(z_alpha + z_beta) * scale,
    )


def gate_alpha(gate: Gate, thresholds: Thresholds) -> float:
    """This gate's share of the false-failure rate (Bonferroni over the file's k gates)."""
    if gate.alpha is not None:
        return gate.alpha
    if thresholds.family_alpha is not None:
        k = sum(g.statistical for g in thresholds.gates)
        return thresholds.family_alpha / k
    return DEFAULT_ALPHA


def bound(gate: Gate, thresholds: Thresholds) -> Bound:
    if not gate.statistical:
        assert gate.threshold is not None  # the schema requires one or the other
        return Bound(gate.threshold)
    assert gate.reference is not None and gate.n is not None and gate.sigma is not None
    return z_test_bound(
        gate.reference,
        gate.n,
        gate.sigma,
        gate_alpha(gate, thresholds),
        gate.beta,
        gate.direction == "higher",
    )


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _judge_one(gate: Gate, b: Bound, metrics: dict[str, float]) -> GateResult:
    value = metrics.get(gate.metric)
    measured = _finite(value)
    passes = measured and (
        value >= b.threshold if gate.direction == "higher" else value <= b.threshold  # type: ignore[operator]
    )
    stats: dict[str, Any] = {}
    if gate.statistical:
        size = metrics.get(SAMPLE_SIZE[gate.metric])
        measured_n = int(size) if size is not None and math.isfinite(size) else None
        # fewer samples than the bound assumes make it too tight to mean anything
        passes = passes and measured_n is not None and measured_n >= (gate.n or 0)
        stats = {
            "reference": gate.reference,
            "n": gate.n,
            "measured_n": measured_n,
            "sigma": gate.sigma,
            "alpha": b.alpha,
            "beta": gate.beta,
            "theta": b.theta,
        }
    return GateResult(
        metric=gate.metric,
        direction=gate.direction,
        threshold=b.threshold,
        value=value if measured else None,
        passed=bool(passes),
        **stats,
    )


def _why(r: GateResult) -> str:
    value = "not measured" if r.value is None else f"{r.value:.6g}"
    text = (
        f"{r.metric} = {value}, needs {'>=' if r.direction == 'higher' else '<='} {r.threshold:g}"
    )
    if r.n is not None and (r.measured_n is None or r.measured_n < r.n):
        text += f" over n >= {r.n} samples (measured {r.measured_n or 0})"
    return text


def shown(r: GateResult) -> str:
    """One gate as the console shows what decided a verdict:
    `next_token_agreement 0.768 >= 0.739 (n 512): pass`."""
    value = "not measured" if r.value is None else f"{r.value:.6g}"
    op = ">=" if r.direction == "higher" else "<="
    got = r.measured_n or 0
    n = "" if not r.n else f" (n {got})" if got >= r.n else f" (n {got}, needs {r.n})"
    return f"{r.metric} {value} {op} {r.threshold:.6g}{n}: {'pass' if r.passed else 'FAIL'}"


def judge(
    thresholds: Thresholds, metrics: dict[str, float]
) -> tuple[list[GateResult], Verdict, str]:
    results = [_judge_one(g, bound(g, thresholds), metrics) for g in thresholds.gates]
    failed = [r for r in results if not r.passed]
    if not failed:
        return results, "pass", ""
    return results, "quality-fail", "; ".join(_why(r) for r in failed)


def material(thresholds: Thresholds) -> dict[str, object]:
    """What a verdict depends on: the gates and family_alpha; descriptions, `why` and
    `why_by_family` are for reviewers and re-judge nothing."""
    return {
        "family_alpha": thresholds.family_alpha,
        "gates": [
            g.model_dump(mode="json", exclude={"why", "why_by_family"}) for g in thresholds.gates
        ],
    }


def ref(name: str, thresholds: Thresholds) -> GatesRef:
    """The thresholds a verdict is judged under, as its evidence record names them."""
    return GatesRef(name=name, sha256=key_of(material(thresholds)))
