"""How a replay classifies one recipe's new record against its previous one.
Records are real: the committed manifest's evidence, varied one field at a time."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from conftest import ROOT

from kiln.replay.compare import Outcome, Settings, classify, exit_code, previous
from kiln.replay.hostclass import host_class
from kiln.replay.report import junit, markdown
from kiln.schema import Evidence


def record(**changes: Any) -> Evidence:
    data = json.loads((ROOT / "manifests" / "tiny-llama.json").read_text())["evidence"][-1]
    for key, value in changes.items():
        if key in data and isinstance(value, dict) and isinstance(data[key], dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return Evidence.model_validate(data)


def judged(new: Evidence, old: Evidence | None, **settings: Any) -> Outcome:
    out = Outcome("tiny-llama", new.verdict, new.reason, evidence=new, previous=old)
    return classify(out, None, Settings(**settings))


def test_nothing_changed_is_nothing_to_report() -> None:
    out = judged(record(), record())
    assert (out.verdict_change, out.change, out.moves, out.slower) == ("", "", [], [])
    assert exit_code([out]) == 0


def test_metric_moves_beyond_theta_by_direction() -> None:
    worse = judged(record(metrics={"max_abs_logit_diff": 5e-4}), record())
    assert worse.regression and worse.worse == worse.moves
    assert (
        worse.moves[0].startswith("max_abs_logit_diff: ") and "(worse; θ 0.0001)" in worse.moves[0]
    )
    within = judged(record(metrics={"max_abs_logit_diff": 5e-5}), record())
    assert within.moves == [] and not within.regression
    better = judged(record(metrics={"first_divergence": 40.0}), record())
    assert better.moves and not better.regression
    timing = judged(record(metrics={"decode_tokens_per_s": 1.0}), record())
    assert timing.moves == []  # a timing is never a quality move


def test_slower_steps_need_both_the_ratio_and_the_floor() -> None:
    old = record(durations={"export": 4.0, "validate": 0.1})
    new = record(durations={"export": 9.0, "validate": 0.3})
    out = judged(new, old)
    assert out.slower == ["export: 4.00 s -> 9.00 s"]  # validate: 3x but only 0.2 s more
    assert not out.regression and exit_code([out]) == 0
    assert judged(new, old, slower=3.0).slower == []
    assert judged(new, old, slower_min_s=0.1).slower == [
        "export: 4.00 s -> 9.00 s",
        "validate: 0.10 s -> 0.30 s",
    ]


def test_new_failures_fixes_and_still_failing() -> None:
    fail = record(verdict="quality-fail", reason="max_abs_logit_diff too big")
    assert judged(fail, record()).change == "new failure"
    assert judged(fail, None).change == "new failure"  # first record here, failing
    assert judged(fail, fail).change == "still failing" and not judged(fail, fail).regression
    fixed = judged(record(), fail)
    assert (fixed.change, fixed.verdict_change, fixed.regression) == (
        "fix",
        "quality-fail -> pass",
        False,
    )


def test_previous_is_the_latest_record_of_the_same_host_class() -> None:
    here = record(date="2026-01-02T00:00:00+00:00")
    gpu = record(date="2026-01-03T00:00:00+00:00", host={"gpu": "NVIDIA H200"})
    history = [record(date="2026-01-01T00:00:00+00:00"), here, gpu]
    assert previous(history, host_class(here.host)) == here
    assert previous(history, host_class(gpu.host)) == gpu
    assert previous(history, "Other CPU + no GPU") is None
    assert host_class(gpu.host) == "NVIDIA H200"  # as the site and doit status name it


def test_exit_code_and_junit_agree() -> None:
    ok = judged(record(), record())
    ok.recipe = "tiny-ok"
    bad = judged(record(verdict="quality-fail", reason="r"), record())
    lost = Outcome("tiny-qwen3", "not-run", "validate timed out", infra=True)
    skip = Outcome("tiny-trt", "unsupported-here", "no builder for tensorrt")
    assert exit_code([ok, skip]) == 0
    assert exit_code([ok, bad, skip]) == 1
    assert exit_code([ok, bad, lost]) == 2
    suite = ET.fromstring(junit([ok, bad, lost, skip], "t", "h"))[0]
    tags = {c.get("name"): [x.tag for x in c if x.tag != "system-out"] for c in suite}
    assert tags == {
        "tiny-ok": [],
        "tiny-llama": ["failure"],
        "tiny-qwen3": ["error"],
        "tiny-trt": ["skipped"],
    }
    assert (
        suite.get("tests"),
        suite.get("failures"),
        suite.get("errors"),
        suite.get("skipped"),
    ) == ("4", "1", "1", "1")
    md = markdown([ok, bad, lost, skip], {"executor": "local"})
    assert md.startswith("## kiln replay: infrastructure failure (exit 2)")
    assert "- tiny-qwen3: not-run: validate timed out" in md
    assert "- tiny-trt: unsupported-here: no builder for tensorrt" in md
