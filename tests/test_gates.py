"""A verdict is earned by measurement: unmeasured or non-finite metrics fail."""

from __future__ import annotations

from kiln.gates import judge
from kiln.schema import Gate, Thresholds

T = Thresholds(
    schema_version=1,
    description="t",
    gates=[
        Gate(metric="max_abs_logit_diff", direction="lower", threshold=1e-3),
        Gate(metric="token_match_rate", direction="higher", threshold=0.9),
    ],
)


def test_all_gates_met_is_a_pass() -> None:
    results, verdict, reason = judge(T, {"max_abs_logit_diff": 1e-6, "token_match_rate": 1.0})
    assert verdict == "pass" and reason == ""
    assert all(r.passed for r in results)


def test_bounds_are_inclusive_and_directional() -> None:
    assert judge(T, {"max_abs_logit_diff": 1e-3, "token_match_rate": 0.9})[1] == "pass"
    _, verdict, reason = judge(T, {"max_abs_logit_diff": 2e-3, "token_match_rate": 0.9})
    assert verdict == "quality-fail" and "max_abs_logit_diff = 0.002, needs <= 0.001" in reason


def test_a_missing_or_nan_metric_fails_its_gate() -> None:
    _, verdict, reason = judge(T, {"max_abs_logit_diff": float("nan")})
    assert verdict == "quality-fail"
    assert "max_abs_logit_diff = not measured" in reason
    assert "token_match_rate = not measured" in reason
