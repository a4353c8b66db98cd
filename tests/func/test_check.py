"""kiln/commands/check.py: errors first, one line per stale manifest, one summary line
for those recorded on GPU hosts, and the same as one JSON document."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest
from conftest import copy_catalog, shipped_gpu

from kiln import hostinfo

GPU_MANIFESTS = ("tiny-llama-fp8-h200", "tiny-llama-nvfp4-h200")


@pytest.mark.skipif(bool(hostinfo.gpu_name()), reason="this host has a GPU")
def test_gpu_host_manifests_are_one_summary_line_and_all_are_in_json(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    doc = json.loads(world.doit("check", "format=json", check=True).stdout)
    stale = {x["recipe"]: x for x in doc["stale"]}
    assert doc["ok"] and doc["problems"] == [] and doc["counts"]["manifests"] >= 50
    for name in GPU_MANIFESTS:
        assert stale[name]["gpu"] == shipped_gpu(), stale.get(name)
        assert stale[name]["cause"] == "toolchain"  # the recipe file is the one recorded
        assert stale[name]["steps"] and all(s["reasons"] for s in stale[name]["steps"])
    out = world.doit("check", check=True).stdout
    lines = out.splitlines()
    gpu_lines = [line for line in lines if "recorded on GPU hosts" in line]
    gpu = sorted(n for n, x in stale.items() if x["gpu"])
    assert len(gpu_lines) == 1 and sum(n in gpu_lines[0] for n in gpu) == 1  # one named, a count
    assert f"stale: {sum(1 for x in stale.values() if x['gpu'])} manifests recorded" in gpu_lines[0]
    assert not any(f"manifests/{n}.json" in line for n in GPU_MANIFESTS for line in lines)
    assert all(len(line) <= 200 for line in lines), max(lines, key=len)
    full = world.doit("check", "verbose=1", check=True).stdout
    assert all(f"stale: manifests/{n}.json: " in full for n in GPU_MANIFESTS)
    # a code digest taken under another Python's `ast` differs from this one's even
    # where the code does not: the reason says so
    lock = json.loads((world.root / "manifests" / f"{GPU_MANIFESTS[0]}.json").read_text())["lock"]
    here = ".".join(platform.python_version_tuple()[:2])
    fetch = next(s for s in stale[GPU_MANIFESTS[0]]["steps"] if s["kind"] == "fetch")
    if lock["toolchain"]["python"] != here:
        assert (
            f"builder code for fetch changed, or only Python did (digested under Python "
            f"{lock['toolchain']['python']}; this host runs {here})"
        ) in fetch["reasons"]


def test_errors_come_first_and_alone(tmp_path: Path) -> None:
    world = copy_catalog(tmp_path)
    (world.root / "recipes" / "tiny-llama-draft.yaml").write_text("schema_version: 2\n")
    proc = world.doit("check")
    assert proc.returncode == 1
    assert "stale:" not in proc.stdout  # nothing hides the error
    assert "recipes/tiny-llama-draft.yaml:1:17: schema_version" in proc.stdout + proc.stderr
    doc = json.loads(world.doit("check", "format=json").stdout)
    assert not doc["ok"] and doc["problems"][0]["file"] == "recipes/tiny-llama-draft.yaml"
    assert doc["problems"][0]["line"] == 1
