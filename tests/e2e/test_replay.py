"""`doit replay` as a nightly job runs it (a subprocess, its exit code, its files):
real re-measurements, real comparisons, real reports."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT, SLOW, World, heavy
from replaying import copy_world, junit, outcome, recipes

from kiln.canonical import pretty

pytestmark = heavy


@pytest.fixture
def replay_world(tmp_path: Path, built: World) -> World:
    return copy_world(built, tmp_path)


def tree_digest(root: Path, folders: tuple[str, ...]) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for folder in folders
        for p in sorted((root / folder).rglob("*"))
        if p.is_file()
    }


def test_replay_without_changes_remeasures_and_only_appends_evidence(replay_world: World) -> None:
    w = replay_world
    before = {
        n: (w.root / "manifests" / f"{n}.json").read_bytes() for n in ("tiny-llama", "tiny-qwen3")
    }
    data_before = tree_digest(w.root, ("recipes", "thresholds", "prompts"))
    proc = w.doit("replay")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all good (exit 0)" in proc.stdout
    for name, old_bytes in before.items():
        old = json.loads(old_bytes)
        new = w.manifest(name)
        assert len(new["evidence"]) == len(old["evidence"]) + 1
        record = new["evidence"].pop()
        # Everything but the appended record is byte-identical (lock included).
        assert pretty(new) == old_bytes
        # A re-measurement, not a copy: a new date, the attempt, every step's duration.
        assert record["date"] != old["evidence"][-1]["date"]
        assert record["attempt"] == 1
        assert set(record["durations"]) == {s["kind"] for s in new["lock"]["steps"]}
        assert record["scope"] == "nightly"  # the replay says which run made it
        assert record["verdict"] == "pass"
        for metric in ("token_match_rate", "max_abs_logit_diff", "min_logit_cosine"):
            assert record["metrics"][metric] == old["evidence"][-1]["metrics"][metric]
    assert tree_digest(w.root, ("recipes", "thresholds", "prompts")) == data_before
    # Steps already in the store were not rebuilt; only validate measured again.
    assert {n: r["built"] for n, r in recipes(w).items()} == {
        "tiny-llama": ["validate"],
        "tiny-qwen3": ["validate"],
    }
    suite = junit(w)
    assert [outcome(suite, n) for n in ("tiny-llama", "tiny-qwen3")] == ["passed", "passed"]
    md = (w.root / ".kiln/replay/report.md").read_text()
    assert "| tiny-llama | pass | pass | - | 1 |" in md


def test_a_quality_regression_exits_1_and_a_fix_is_reported(replay_world: World) -> None:
    w = replay_world
    gates = w.root / "thresholds" / "fp32-exact.yaml"
    original = gates.read_text()
    gates.write_text(original.replace("threshold: 1.0e-3", "threshold: 1.0e-9"))
    proc = w.doit("replay", "recipes=tiny-llama")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    r = recipes(w)["tiny-llama"]
    assert (r["verdict"], r["previous"], r["change"], r["regression"]) == (
        "quality-fail",
        "pass",
        "new failure",
        True,
    )
    assert "max_abs_logit_diff" in r["reason"]
    assert outcome(junit(w), "tiny-llama") == "failure"
    md = (w.root / ".kiln/replay/report.md").read_text()
    assert "- tiny-llama: pass -> quality-fail" in md.split("### New failures")[0]
    assert w.manifest("tiny-llama")["evidence"][-1]["verdict"] == "quality-fail"

    gates.write_text(original)
    proc = w.doit("replay", "recipes=tiny-llama")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert recipes(w)["tiny-llama"]["change"] == "fix"
    assert "### Fixes\n\n- tiny-llama" in (w.root / ".kiln/replay/report.md").read_text()


def test_a_metric_move_beyond_theta_is_a_regression(replay_world: World) -> None:
    w = replay_world
    data = w.recipe("tiny-qwen3")
    data["validation"]["max_new_tokens"] = 24  # greedy output stops earlier: a real move
    w.write_recipe("tiny-qwen3", data)
    proc = w.doit("replay", "tags=none,", "recipes=tiny-qwen3")
    assert proc.returncode == 0 and recipes(w) == {}, "tags=none selects nothing"
    proc = w.doit("replay", "recipes=tiny-qwen3")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    r = recipes(w)["tiny-qwen3"]
    assert r["verdict"] == "pass" and r["regression"]
    assert r["moves"] == ["first_divergence: 32 -> 24 (worse; θ 0)"]
    assert r["built"] == ["reference", "validate"]
    md = (w.root / ".kiln/replay/report.md").read_text()
    assert "- tiny-qwen3: first_divergence: 32 -> 24 (worse; θ 0)" in md


def test_one_recipe_failing_never_stops_the_others(replay_world: World) -> None:
    w = replay_world
    broken = w.recipe("tiny-llama")
    broken["model"]["revision"] = "0" * 40  # the mirror has no such revision
    w.write_recipe("tiny-gone", broken)
    w.write_recipe(
        "tiny-trt",
        {
            "schema_version": 1,
            "extends": "tiny-llama",
            "description": "TensorRT on an H100.",
            "build": {"backend": "tensorrt", "target": "sm90"},
        },
    )
    (w.root / "recipes" / "tiny-bad.yaml").write_text("schema_version: 1\nmodle: {}\n")
    shutil.copy(ROOT / "recipes" / "real-phi-4.yaml", w.root / "recipes")  # no Hub here
    proc = w.doit("replay")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    r = recipes(w)
    assert r["tiny-llama"]["verdict"] == r["tiny-qwen3"]["verdict"] == "pass"
    assert r["tiny-gone"]["verdict"] == "build-fail" and r["tiny-gone"]["change"] == "new failure"
    assert "0000000" in r["tiny-gone"]["reason"]
    assert r["tiny-bad"]["verdict"] == "build-fail" and "modle" in r["tiny-bad"]["reason"]
    trt = r["tiny-trt"]
    assert trt["verdict"] == "unsupported-here" and not trt["regression"]
    # A GPU recipe cannot run on this CPU host with the local executor, and says why.
    assert "sm90" in trt["reason"] and "executor=ray" in trt["reason"]
    suite = junit(w)
    assert [outcome(suite, n) for n in ("tiny-bad", "tiny-gone", "tiny-llama", "tiny-trt")] == [
        "failure",
        "failure",
        "passed",
        "skipped",
    ]
    # A checkpoint missing from the hub cache fails, as `doit build` does (issue 43): a
    # nightly that lost its cache goes red; unsupported-here is for the host's limits.
    real = r["real-phi-4"]
    assert real["verdict"] == "build-fail" and real["change"] == "new failure", real
    assert "is not in the hub cache" in real["reason"] and "KILN_HUB_ONLINE" in real["reason"]
    md = (w.root / ".kiln/replay/report.md").read_text()
    assert "- tiny-trt: unsupported-here: " in md.split("### Could not run here")[1]
    assert "real-phi-4" not in md.split("### Could not run here")[1]
    assert not (w.root / "manifests" / "tiny-gone.json").exists()  # nothing measured


def test_a_step_past_its_timeout_is_an_infrastructure_failure_exit_2(replay_world: World) -> None:
    w = replay_world
    before = (w.root / "manifests" / "tiny-llama.json").read_bytes()
    proc = w.doit("replay", "recipes=tiny-llama", "timeout=0.05", "retries=1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    r = recipes(w)["tiny-llama"]
    assert r["infra"] and r["verdict"] == "not-run"
    assert (
        r["reason"] == "validate tiny-llama: validate timed out after 0.05 s; gave up after 2 tries"
    )
    assert outcome(junit(w), "tiny-llama") == "error"
    assert (w.root / "manifests" / "tiny-llama.json").read_bytes() == before


def test_bad_arguments_exit_2_with_one_clear_error_and_write_nothing(replay_world: World) -> None:
    w = replay_world
    for args, message in (
        (("shard=4/4",), "shard='4/4': need 0 <= i < n"),
        (("recipes=tiny-lama",), "did you mean 'tiny-llama'"),
        (("executor=k8s",), "executor='k8s'"),
    ):
        proc = w.doit("replay", *args)
        assert proc.returncode == 2, args
        assert message in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    assert not (w.root / ".kiln/replay").exists()


def _step_children(parent: int) -> list[int]:
    """Pids of `python -m kiln.replay.step` processes descending from `parent`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if b"kiln.replay.step" in cmd and _descends(int(entry.name), parent, stat):
            found.append(int(entry.name))
    return found


def _descends(pid: int, ancestor: int, stat: str) -> bool:
    while pid > 1:
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == ancestor:
            return True
        try:
            stat = Path(f"/proc/{ppid}/stat").read_text()
        except OSError:
            return False
        pid = ppid
    return False


def test_a_killed_step_is_retried_and_the_evidence_says_which_attempt(replay_world: World) -> None:
    w = replay_world
    driver = subprocess.Popen(
        w.argv("replay", "recipes=tiny-llama"),
        env=w.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killed = None
    deadline = time.monotonic() + SLOW
    while killed is None and driver.poll() is None and time.monotonic() < deadline:
        children = _step_children(driver.pid)
        if children:
            killed = children[0]
            os.kill(killed, signal.SIGKILL)  # what the OOM killer does to a worker
        time.sleep(0.01)
    out, _ = driver.communicate(timeout=SLOW)
    assert killed is not None, "the step was never seen running: the test proved nothing"
    assert driver.returncode == 0, out
    assert "was killed by signal 9 (attempt 1)" in out
    record = w.manifest("tiny-llama")["evidence"][-1]
    assert record["attempt"] == 2 and record["verdict"] == "pass"
    assert recipes(w)["tiny-llama"]["attempt"] == 2


def test_a_lock_from_an_older_toolchain_is_refreshed_and_history_kept(replay_world: World) -> None:
    w = replay_world
    path = w.root / "manifests" / "tiny-llama.json"
    old = json.loads(path.read_text())
    current_numpy = old["lock"]["toolchain"]["numpy"]
    old["lock"]["toolchain"]["numpy"] = "1.0.0"  # what last night's runner had
    path.write_bytes(pretty(old))
    proc = w.doit("replay", "recipes=tiny-llama")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    new = w.manifest("tiny-llama")
    assert new["lock"]["toolchain"]["numpy"] == current_numpy
    assert new["evidence"][:-1] == old["evidence"]


def test_a_manifest_that_cannot_be_updated_stops_only_its_recipe(replay_world: World) -> None:
    w = replay_world
    (w.root / "manifests" / "tiny-qwen3.json").write_text('{"schema_version": 1}\n')
    proc = w.doit("replay")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    r = recipes(w)
    assert r["tiny-llama"]["verdict"] == "pass"
    assert w.manifest("tiny-llama")["evidence"][-1]["attempt"] == 1
    assert r["tiny-qwen3"]["infra"]
    assert r["tiny-qwen3"]["reason"].startswith("measured, but its manifest could not be updated")
    assert outcome(junit(w), "tiny-qwen3") == "error"
