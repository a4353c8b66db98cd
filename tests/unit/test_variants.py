"""What each execution variant adds to a plan, without building anything: companions
get their own steps, drafters read the target's hidden states, ordinary graphs share
their keys, and a checkpoint's MTP engines are built only when asked for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import ROOT
from samples import shipped_plan

from kiln.catalog.yaml import load_yaml_model
from kiln.errors import KilnError
from kiln.plan import plan
from kiln.plan.step import Plan
from kiln.plan.toolchain import current
from kiln.schema import PromptSet, Recipe

PROMPTS = load_yaml_model(PromptSet, ROOT / "prompts" / "default.yaml")


def recipe_data(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "recipes" / f"{name}.yaml").read_text())
    return data


def plan_of(data: dict[str, Any], tmp_path: Path, name: str = "r") -> Plan:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return plan(name, load_yaml_model(Recipe, path), PROMPTS, current())


def kinds(p: Plan) -> list[tuple[str, str]]:
    return [(s.kind, s.role) for s in p.steps]


def test_a_draft_model_has_its_own_pinned_engine_chain(tmp_path: Path) -> None:
    p = plan_of(recipe_data("tiny-llama-draft"), tmp_path)
    assert [(k, r) for k, r in kinds(p) if r == "draft"] == [
        ("fetch", "draft"),
        ("export", "draft"),
        ("onnx", "draft"),
        ("engine", "draft"),
    ]
    bundle = p.step("bundle")
    assert bundle.inputs["draft"] == p.step("engine", "draft").key
    assert bundle.options["speculative"] == {"max_draft_len": 4}
    assert p.step("fetch", "draft").options["repo"] == "kiln-tiny/llama-draft"


def test_a_draft_models_chain_is_the_one_its_own_recipe_plans(tmp_path: Path) -> None:
    """Equal options give equal keys: a model used as a draft and built alone is
    exported and optimized once."""
    data = recipe_data("tiny-llama-draft")
    p = plan_of(data, tmp_path, "a")
    alone = dict(data, model=data["companions"]["draft"], execution={"variant": "ordinary"})
    del alone["companions"]
    q = plan_of(alone, tmp_path, "b")
    for kind in ("fetch", "export", "onnx", "engine"):
        assert p.step(kind, "draft").key == q.step(kind).key, kind


def test_ordinary_graphs_output_no_hidden_states_and_share_their_keys(tmp_path: Path) -> None:
    ordinary = plan_of(recipe_data("tiny-llama"), tmp_path, "a")
    ngram = plan_of(recipe_data("tiny-llama-ngram"), tmp_path, "b")
    assert ordinary.step("export").options == {
        "opset": 17,
        "exporter": "torchscript",
        "task": "text-generation",
        "hidden": "none",
        "attention": "onnxruntime",
    }
    for kind in ("fetch", "reference", "export", "onnx", "engine"):
        assert ordinary.step(kind).key == ngram.step(kind).key  # n-gram drafts need no model


@pytest.mark.parametrize("recipe", ["tiny-qwen3-eagle3", "tiny-qwen3-dflash", "tiny-qwen3-dspark"])
def test_drafters_read_hidden_states_named_by_their_own_config(recipe: str, tmp_path: Path) -> None:
    p = plan_of(recipe_data(recipe), tmp_path)
    export = p.step("export")
    variant = recipe.rsplit("-", 1)[1]
    assert export.options["hidden"] == variant
    assert export.inputs["drafter"] == p.step("fetch", "draft").key
    drafter = p.step("drafter", "draft")
    assert drafter.inputs == {
        "checkpoint": p.step("fetch", "draft").key,
        "target": p.step("fetch").key,
    }
    assert p.step("bundle").inputs["drafter"] == drafter.key


def test_mtp_engines_are_built_only_when_asked_for(tmp_path: Path) -> None:
    data = recipe_data("tiny-deepseek-v3-mtp")
    assert ("drafter", "model") in kinds(plan_of(data, tmp_path, "mtp"))
    data["execution"] = {"variant": "ordinary"}
    ordinary = plan_of(data, tmp_path, "ordinary")
    assert "drafter" not in [k for k, _ in kinds(ordinary)]
    assert ordinary.step("export").options["hidden"] == "none"
    data["build"]["mtp_engines"] = True
    with_mtp = plan_of(data, tmp_path, "with-mtp")
    assert with_mtp.step("drafter").options["variant"] == "mtp"
    assert with_mtp.step("export").options["hidden"] == "mtp"
    assert with_mtp.step("bundle").options["speculative"] == {}  # still decodes plainly


def test_a_lora_adapter_is_merged_at_export_and_referenced_by_peft(tmp_path: Path) -> None:
    p = plan_of(recipe_data("tiny-qwen3-lora"), tmp_path)
    adapter = p.step("fetch", "adapter").key
    assert p.step("export").inputs["adapter"] == adapter
    assert p.step("reference").inputs["adapter"] == adapter
    assert "engine" not in [k for k, r in kinds(p) if r == "adapter"]


def test_a_companion_the_variant_does_not_use_is_a_located_error(tmp_path: Path) -> None:
    data = recipe_data("tiny-llama-draft")
    data["execution"] = {"variant": "ngram"}
    with pytest.raises(KilnError) as err:
        plan_of(data, tmp_path)
    problem = err.value.problems[0]
    assert "does not use a 'draft' companion" in problem.cause
    assert problem.location is not None and problem.location.key_path == ("companions", "draft")


def test_real_pairs_plan_with_pinned_revisions(tmp_path: Path) -> None:
    for name in ("qwen3_8-dspark", "qwen3_8-dflash", "qwen3_8-draft", "deepseek_v3-mtp"):
        p = plan_of(recipe_data(name), tmp_path, name)
        for step in p.steps:
            if step.kind == "fetch":
                assert len(step.options["revision"]) == 40
    dspark = recipe_data("qwen3_8-dspark")
    assert dspark["companions"]["draft"]["repo"] == "deepseek-ai/dspark_qwen3_8b_block7"
    assert any("not in shared/reference/hf_revisions.tsv" in x for x in dspark["known_limitations"])


def test_drafting_rules_apply_to_the_catalog(tmp_path: Path) -> None:
    from kiln.catalog import rules

    table = rules.load()
    data = recipe_data("tiny-qwen3-eagle3")
    del data["companions"]
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    found = {v.rule.id for v in table.check(load_yaml_model(Recipe, path))}
    assert "drafter-needs-draft-companion" in found
    data = recipe_data("tiny-qwen3")
    data["build"]["mtp_engines"] = True
    data["model"]["architecture"] = "Qwen3ForCausalLM"
    path.write_text(yaml.safe_dump(data))
    found = {v.rule.id for v in table.check(load_yaml_model(Recipe, path))}
    assert "mtp-engines-need-mtp-architecture" in found


@pytest.mark.parametrize(
    ("recipe", "form"),
    [
        ("tiny-llama", "onnxruntime"),  # an onnxruntime CPU engine computing fp32
        ("tiny-llama-int4-awq", "onnxruntime"),  # weight-only: activations stay fp32
        ("tiny-llama-fp16", "onnxruntime"),  # the same graph, converted to fp16
        ("tiny-llama-aoti", None),  # it compiles the checkpoint: no export step
        ("tiny-llama-fp8-tensorrt", "standard"),  # TensorRT has no com.microsoft ops
    ],
)
def test_the_export_writes_onnxruntimes_fused_attention_only_for_an_onnxruntime_cpu_engine(
    recipe: str, form: str | None
) -> None:
    exports = [s for s in shipped_plan(recipe).steps if s.kind == "export"]
    assert [s.options["attention"] for s in exports] == ([form] if form else [])
