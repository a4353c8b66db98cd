"""`doit plan format=json` is one document a bot can read (the keys themselves:
tests/unit/test_plan.py)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import make_world


def test_doit_plan_format_json_is_one_document_for_a_bot(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    proc = world.doit("plan", "recipe=tiny-llama", "format=json", check=True)
    (found,) = json.loads(proc.stdout)  # stdout is only the document
    assert found["recipe"] == "tiny-llama" and found["manifest"] == "manifests/tiny-llama.json"
    assert found["steps"][0]["kind"] == "fetch"
    assert {s["state"] for s in found["steps"]} == {"will run"}
    assert all(len(s["key"]) == 64 for s in found["steps"])
    bad = world.doit("plan", "format=yaml")
    assert bad.returncode != 0 and "'yaml' is not one of text, json" in bad.stdout + bad.stderr
