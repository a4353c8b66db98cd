"""Gates -> verdict. A verdict is earned by measurement, never assumed.

A metric that was not measured fails its gate: a missing number is not a pass.
"""

from __future__ import annotations

import math

from kiln.schema import GateResult, Thresholds, Verdict


def judge(
    thresholds: Thresholds, metrics: dict[str, float]
) -> tuple[list[GateResult], Verdict, str]:
    results = []
    for gate in thresholds.gates:
        value = metrics.get(gate.metric)
        measured = value is not None and math.isfinite(value)
        results.append(
            GateResult(
                metric=gate.metric,
                direction=gate.direction,
                threshold=gate.threshold,
                value=value if measured else None,
                passed=measured and gate.passes(value),  # type: ignore[arg-type]
            )
        )
    failed = [r for r in results if not r.passed]
    if not failed:
        return results, "pass", ""
    reason = "; ".join(
        f"{r.metric} = {'not measured' if r.value is None else f'{r.value:.6g}'}, "
        f"needs {'>=' if r.direction == 'higher' else '<='} {r.threshold:g}"
        for r in failed
    )
    return results, "quality-fail", reason
