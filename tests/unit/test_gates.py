"""A verdict is earned by measurement: unmeasured or non-finite metrics fail."""

from __future__ import annotations

from kiln.evidence.gates import judge
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


# ---------------------------------------------------------------- statistical gates

import pytest  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from kiln.evidence.gates import bound, z_test_bound  # noqa: E402


def test_z_test_reproduces_tensorrt_llm_published_numbers() -> None:
    # TensorRT-LLM accuracy suite: n=4096, sigma=50, alpha=0.05, beta=0.2
    b = z_test_bound(reference=0.0, n=4096, sigma=50, alpha=0.05, beta=0.2, higher=True)
    assert b.threshold == pytest.approx(-1.82, abs=5e-3)
    assert b.theta == pytest.approx(2.75, abs=5e-3)
    lower = z_test_bound(reference=0.0, n=4096, sigma=50, alpha=0.05, beta=0.2, higher=False)
    assert lower.threshold == pytest.approx(1.82, abs=5e-3)


def stat_gate(**kw: object) -> Gate:
    fields = {
        "metric": "next_token_agreement",
        "direction": "higher",
        "reference": 0.9,
        "n": 512,
        "sigma": 0.5,
        **kw,
    }
    return Gate.model_validate(fields)


def test_statistical_gate_derives_its_threshold_and_needs_its_sample_size() -> None:
    t = Thresholds(schema_version=1, description="t", gates=[stat_gate()])
    expected = 0.9 - 1.6448536 * (2 * 0.25 / 512) ** 0.5
    assert bound(t.gates[0], t).threshold == pytest.approx(expected)
    results, verdict, _ = judge(t, {"next_token_agreement": 0.87, "scored_positions": 512})
    assert verdict == "pass"
    r = results[0]
    assert (r.n, r.measured_n, r.sigma, r.alpha, r.beta) == (512, 512, 0.5, 0.05, 0.2)
    assert r.theta == pytest.approx((1.6448536 + 0.8416212) * (2 * 0.25 / 512) ** 0.5)
    _, verdict, reason = judge(t, {"next_token_agreement": 0.80, "scored_positions": 512})
    assert verdict == "quality-fail" and "next_token_agreement = 0.8" in reason
    # a good value measured on fewer samples than the bound assumes is not a pass
    _, verdict, reason = judge(t, {"next_token_agreement": 0.95, "scored_positions": 100})
    assert verdict == "quality-fail" and "n >= 512 samples (measured 100)" in reason


def test_family_alpha_is_split_over_the_statistical_gates_bonferroni() -> None:
    gates = [
        stat_gate(),
        stat_gate(metric="log_perplexity_ratio", direction="lower", reference=0.0, sigma=1.0),
        Gate(metric="tokenizer_match_rate", direction="higher", threshold=1.0),
    ]
    t = Thresholds(schema_version=1, description="t", family_alpha=0.05, gates=gates)
    assert [bound(g, t).alpha for g in gates] == [0.025, 0.025, None]


def test_threshold_only_gates_keep_working_and_mixing_kinds_is_an_error() -> None:
    assert Gate(metric="max_abs_logit_diff", direction="lower", threshold=1e-3).threshold == 1e-3
    with pytest.raises(ValidationError, match="not both"):
        stat_gate(threshold=0.5)
    with pytest.raises(ValidationError, match=r"reference, n and sigma \(sigma\)"):
        Gate.model_validate(
            {"metric": "next_token_agreement", "direction": "higher", "reference": 1, "n": 5}
        )
    with pytest.raises(ValidationError, match="has no sample size"):
        stat_gate(metric="max_abs_logit_diff")


def test_an_unproved_determinism_fails_a_verdict_its_gates_passed() -> None:
    """Issue 39: the determinism feature is the one that enters the verdict (kiln/
    evidence/record.py REQUIRED_FEATURES); the others are recorded beside it."""
    from kiln.evidence.record import _required

    differs = {"proved": False, "check": "5 fresh processes: 5 distinct outputs"}
    same = {"proved": True, "check": "the same tokens in every one"}
    other = {"proved": False, "check": "prefix reuse did not hold"}
    assert _required({"determinism": same, "prefix_reuse": other}, "pass", "") == ("pass", "")
    verdict, reason = _required({"determinism": differs}, "pass", "")
    assert (
        verdict == "quality-fail" and reason == "determinism: 5 fresh processes: 5 distinct outputs"
    )
    verdict, reason = _required({"determinism": differs}, "quality-fail", "agreement = 0.5")
    assert verdict == "quality-fail" and reason.startswith("agreement = 0.5; determinism: ")
    assert _required({}, "pass", "") == ("pass", "")
