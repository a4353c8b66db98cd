"""The nightly replay workflow cannot run here; it must at least be a valid GitHub
Actions workflow (the public schema, vendored by check-jsonschema, offline)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, SLOW

WORKFLOW = ROOT / ".github" / "workflows" / "nightly-replay.yml"


def check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("needs the dev extra (check-jsonschema)")
    return subprocess.run(
        [exe, "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=SLOW,
    )


def test_nightly_workflow_validates_against_the_public_schema() -> None:
    proc = check_jsonschema(WORKFLOW)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path: Path) -> None:
    """The check above can fail: a typo'd key is caught."""
    data = yaml.safe_load(WORKFLOW.read_text())
    data["jobs"]["replay"]["runs_on"] = data["jobs"]["replay"].pop("runs-on")
    broken = tmp_path / "broken.yml"
    broken.write_text(yaml.safe_dump(data))
    proc = check_jsonschema(broken)
    assert proc.returncode != 0 and "runs_on" in proc.stdout + proc.stderr


def test_the_workflow_replays_every_shard_and_publishes_the_report() -> None:
    data = yaml.safe_load(WORKFLOW.read_text())
    on = data[True]  # YAML 1.1 reads the key `on` as a boolean
    assert on["schedule"][0]["cron"]
    job = data["jobs"]["replay"]
    shards = job["strategy"]["matrix"]["shard"]
    runs = " ".join(step.get("run", "") for step in job["steps"])
    assert f"shard=${{{{ matrix.shard }}}}/{len(shards)}" in runs
    assert shards == list(range(len(shards)))  # shards are 0-based, i/n with i < n
    assert "make install" in runs
    uses = [step.get("uses", "") for step in job["steps"]]
    assert any(u.startswith("actions/setup-python") for u in uses)
    python = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/setup-python"))
    assert python["with"]["python-version"] == "3.11"
    assert any(u.startswith("actions/upload-artifact") for u in uses)
    assert any("junit" in u for u in uses)
