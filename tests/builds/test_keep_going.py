"""A failed step stops its own recipe, not the others: `doit build` of a recipe whose
checkpoint cannot be read and of tiny-llama goes on after the failure, builds and
publishes tiny-llama, exits 1, and its summary says which recipe failed at which step
and what of it was not run (dodo.py: doit's `continue`; tasks.Run keeps the exit at
1, where doit says 2 for the skipped steps). Before, the first failure stopped the
whole build: on the GPU machine one Qwen3-VL recipe's failed export left four
independent recipes "not run" (bench/results/gpu_vlm_2026-12-07.txt). The torn file
is refused by its fetch, with a located error, not by a loader's traceback later."""

from __future__ import annotations

import shutil
from pathlib import Path

from conftest import World, heavy, make_world

pytestmark = heavy


def test_one_recipes_failed_step_does_not_stop_the_others(tmp_path: Path, hub: Path) -> None:
    world: World = make_world(tmp_path, hub, ("tiny-llama",))
    tiny = next((hub / "models--kiln-tiny--llama" / "snapshots").iterdir())
    folder = world.root / "checkpoints" / "torn-llama"
    shutil.copytree(tiny, folder)  # the snapshot's links copied as files
    (folder / "model.safetensors").write_bytes(b"torn" * 1000)  # no safetensors header
    data = world.recipe("tiny-llama")
    data["description"] = "The tiny Llama with its weights file torn: no step can read it."
    data["model"] = world.local_model(folder)
    world.write_recipe("torn-llama", data)
    out = world.doit("build", "recipe=torn-llama,tiny-llama", "publish=1")
    said = out.stdout + out.stderr
    assert out.returncode == 1, said  # a step failed (README), its dependents not run
    assert "Traceback" not in said, said  # a torn file is the user's input: a located error
    assert "checkpoints/torn-llama/model.safetensors is not a readable safetensors" in said
    assert world.last("tiny-llama")["verdict"] == "pass"
    assert not (world.root / "manifests" / "torn-llama.json").exists()
    summary = said[said.index("summary:") :]
    assert "tiny-llama: pass" in summary, summary
    assert "torn-llama: not validated" in summary and "failed" in summary, summary
