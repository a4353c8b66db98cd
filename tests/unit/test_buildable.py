"""kiln/catalog/buildable.py: `doit check` refuses what `doit plan` would refuse, and
gates a recipe's validation cannot feed, each located at the recipe line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, make_world

from kiln.catalog import buildable, load
from kiln.errors import KilnError
from kiln.paths import Paths
from kiln.plan import plan
from kiln.plan.toolchain import current
from kiln.schema import Recipe


def problems_of(
    tmp_path: Path, name: str, edit: dict[str, str], parents: tuple[str, ...] = ()
) -> list[str]:
    """The rendered problems `doit check` would report for recipe `name`, edited."""
    world = make_world(tmp_path, tmp_path / "hub", (name, *parents))
    path = world.root / "recipes" / f"{name}.yaml"
    text = path.read_text()
    for old, new in edit.items():
        assert old in text
        text = text.replace(old, new)
    path.write_text(text)
    cat = load(Paths(world.root), cache=False)
    return [p.render() for p in cat.problems.get(f"recipes/{name}.yaml", [])]


def test_check_refuses_a_variant_the_planner_refuses(tmp_path: Path) -> None:
    found = problems_of(tmp_path, "tiny-llama-ngram", {"weights: fp32": "weights: int8-wo"})
    assert any("speculative variants are built for fp32 onnxruntime" in p for p in found), found
    line = next(p for p in found if "speculative variants" in p)
    assert line.startswith("recipes/tiny-llama-ngram.yaml:") and "execution -> variant" in line


def test_plan_refuses_what_check_refuses_with_the_same_problem(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "recipes" / "tiny-llama-ngram.yaml").read_text())
    data["precision"] = {"weights": "int8-wo"}
    recipe = Recipe.model_validate(data)
    with pytest.raises(KilnError) as err:
        plan("x", recipe, load(Paths(ROOT), cache=False).prompts["default"], current())
    assert [p.cause for p in err.value.problems] == [p.cause for p in buildable.refusals(recipe)]


def test_a_statistical_gate_without_scored_positions_names_the_key(tmp_path: Path) -> None:
    found = problems_of(
        tmp_path, "tiny-llama-int8-wo", {"  scored_positions: 512\n": ""}, ("tiny-llama",)
    )
    text = "\n".join(found)
    assert "gates next_token_agreement over n >= " in text, text
    assert "validation.scored_positions is 0" in text
    assert "add 'scored_positions: " in text and "under validation:" in text


def test_a_gate_on_a_metric_the_task_never_measures_is_refused(tmp_path: Path) -> None:
    found = problems_of(
        tmp_path, "tiny-bert-classifier", {"thresholds: classifier-fp32": "thresholds: fp32-exact"}
    )
    text = "\n".join(found)
    assert "gates min_logit_cosine, unexplained_divergences, which a text-classification" in text
    assert "it measures class_match_rate" in text
    assert "validation -> thresholds" in text


def test_every_shipped_recipe_is_buildable_and_its_gates_are_fed() -> None:
    cat = load(Paths(ROOT), cache=False)
    assert not cat.problems
    for name, recipe in cat.recipes.items():
        which = recipe.validation.thresholds
        assert buildable.refusals(recipe) == [], name
        assert buildable.gate_problems(recipe, which, cat.thresholds[which]) == [], name


def test_measured_is_what_the_committed_manifests_recorded() -> None:
    """The table of what each validate step measures is pinned by real evidence: every
    committed manifest's latest measured record has exactly those metrics."""
    cat = load(Paths(ROOT), cache=False)
    checked = 0
    for path in sorted((ROOT / "manifests").glob("*.json")):
        data = json.loads(path.read_text())
        runs = [e for e in data["evidence"] if e["metrics"]]
        if path.stem not in cat.recipes or not runs:
            continue
        assert set(runs[-1]["metrics"]) == buildable.measured(cat.recipes[path.stem]), path.stem
        checked += 1
    assert checked >= 40


def refusal(folder: Path, edits: dict[str, str], message: str) -> str:
    """The problem `doit check` reports that says `message`, for tiny-llama-int8-wo with
    `edits` made to its recipe."""
    found = problems_of(folder, "tiny-llama-int8-wo", edits, ("tiny-llama",))
    line = next((p for p in found if message in p), None)
    assert line is not None, found
    return line


def test_block_size_and_awq_step_reach_the_quantize_step_and_only_their_precisions_take_them(
    tmp_path: Path,
) -> None:
    data = yaml.safe_load((ROOT / "recipes" / "smollm2-135m-instruct-int4-awq.yaml").read_text())
    assert data["precision"]["block_size"] == 32
    found = problems_of(
        tmp_path / "a",
        "tiny-llama-int4-awq",
        {"weights: int4-awq": "weights: int4-awq\n  block_size: 48"},
        ("tiny-llama",),
    )
    assert any("block_size" in p and "32, 64" in p for p in found), found
    line = refusal(
        tmp_path / "b",
        {"weights: int8-wo": "weights: int8-wo\n  block_size: 32"},
        "block_size applies to blocked int4",
    )
    assert "set precision.weights to int4-awq or w4a8-awq" in line
    found = problems_of(
        tmp_path / "c",
        "tiny-llama-int8-wo",
        {"max_tokens: 64": "max_tokens: 64\n  awq_alpha_step: 0.25"},
        ("tiny-llama",),
    )
    assert any("awq_alpha_step applies to the AWQ precisions" in p for p in found), found
    cat = load(Paths(ROOT), cache=False)
    for name, size, step in (
        ("smollm2-135m-instruct-int4-awq", 32, 0.25),
        ("tiny-llama-int4-awq", None, None),
    ):
        steps = plan(name, cat.recipes[name], cat.prompts["default"], current()).steps
        quantize = next(s for s in steps if s.kind == "quantize")
        assert quantize.options.get("block_size") == size, quantize.options
        assert quantize.options.get("awq_alpha_step") == step, quantize.options


def test_a_quantized_lm_head_reaches_the_onnx_step_for_weight_only_onnxruntime_recipes_only(
    tmp_path: Path,
) -> None:
    """precision.lm_head: the SmolLM2 weight-only recipes ask for int8, and the onnx
    step gets the width (int4 also its block); other precisions and backends are
    refused by the catalog's rules, with the fix."""
    cat = load(Paths(ROOT), cache=False)
    for name, expected in (
        ("smollm2-135m-instruct-int4-awq", {"bits": 8}),
        ("smollm2-135m-instruct-int8-wo", {"bits": 8}),
        ("smollm2-135m-instruct-int4-awq-head4", {"bits": 4, "block_size": 32}),
        (
            "smollm2-135m-instruct-int4-awq-head4-outliers",
            {"bits": 4, "block_size": 32, "outliers": 8},
        ),
        ("tiny-llama-int4-awq", None),
    ):
        steps = plan(name, cat.recipes[name], cat.prompts["default"], current()).steps
        onnx_step = next(s for s in steps if s.kind == "onnx")
        assert onnx_step.options.get("lm_head") == expected, (name, onnx_step.options)
        # the channels kept fp32 are ranked by the quantize step, which is asked for them
        quantize = next(s for s in steps if s.kind == "quantize")
        wanted = (expected or {}).get("outliers")
        assert quantize.options.get("lm_head_outliers") == wanted, quantize.options
    found = problems_of(
        tmp_path / "a",
        "tiny-llama-fp8",
        {"weights: fp8": "weights: fp8\n  lm_head: int8"},
        ("tiny-llama",),
    )
    line = next(p for p in found if "lm_head applies to the weight-only" in p)
    assert "set precision.weights to int8-wo or int4-awq" in line, found
    found = problems_of(
        tmp_path / "b",
        "tiny-llama-int8-wo",
        {
            "weights: int8-wo": "weights: int8-wo\n  lm_head: int4",
            "backend: onnxruntime": "backend: tensorrt",
        },
        ("tiny-llama",),
    )
    assert any("lm_head is an onnxruntime MatMulNBits rewrite" in p for p in found), found
    line = refusal(
        tmp_path / "c",
        {"weights: int8-wo": "weights: int8-wo\n  lm_head_outliers: 4"},
        "lm_head_outliers keeps channels",
    )
    assert "set precision.lm_head to int4 or int8" in line


def test_prefill_chunk_len_is_planned_for_onnxruntime_and_refused_where_unread() -> None:
    """An onnxruntime causal-LM recipe's chunk reaches its bundle step (bundle.json's
    limits, read by runtime/causal_lm.py); aoti, a seq2seq task or a drafting variant
    would ignore it, so check refuses them at the key."""
    cat = load(Paths(ROOT), cache=False)
    prompts = cat.prompts["default"]

    def recipe(name: str, **build: object) -> Recipe:
        shipped = cat.recipe(name)
        return shipped.model_copy(update={"build": shipped.build.model_copy(update=build)})

    chunked = plan("x", recipe("tiny-llama", prefill_chunk_len=64), prompts, current())
    assert chunked.step("bundle").options["prefill_chunk_len"] == 64
    plain = plan("x", recipe("tiny-llama"), prompts, current())
    assert plain.step("bundle").options["prefill_chunk_len"] == 0  # one pass
    for name, build, said in [
        ("tiny-llama-aoti", {"prefill_chunk_len": 64}, "honoured by the inductor and onnxruntime"),
        ("tiny-t5", {"prefill_chunk_len": 64}, "not text2text-generation (ordinary)"),
        ("tiny-llama-ngram", {"prefill_chunk_len": 64}, "not text-generation (ngram)"),
    ]:
        found = buildable.refusals(recipe(name, **build))
        assert [p.location.key_path for p in found if p.location] == [
            ("build", "prefill_chunk_len")
        ]
        assert said in found[0].cause


def test_half_compute_is_the_onnxruntime_engines_compute_option(tmp_path: Path) -> None:
    """precision.compute fp16|bf16 on onnxruntime: the engine step alone differs, in its
    `compute` option, which every text-generation engine writes (fp32 by default), and
    its one builder module converts the fp32 graph. Other backends, quantized
    precisions, variants and tasks are refused at the key."""
    from kiln.plan.toolchain import builder_module

    cat = load(Paths(ROOT), cache=False)
    prompts = cat.prompts["default"]
    fp32 = plan("tiny-llama", cat.recipes["tiny-llama"], prompts, current())
    fp16 = plan("tiny-llama-fp16", cat.recipes["tiny-llama-fp16"], prompts, current())
    bf16 = plan("tiny-llama-bf16", cat.recipes["tiny-llama-bf16"], prompts, current())
    assert fp32.step("engine").options["compute"] == "fp32"
    for half, dtype in ((fp16, "fp16"), (bf16, "bf16")):
        engine = half.step("engine")
        assert engine.options == {**fp32.step("engine").options, "compute": dtype}
        assert builder_module("engine", engine.options) == builder_module(
            "engine", fp32.step("engine").options
        )
        assert "onnx" in engine.material["libraries"]
        for kind in ("fetch", "export", "onnx"):  # the fp32 graph is converted, not re-exported
            assert half.step(kind).key == fp32.step(kind).key
    assert len({p.step("engine").key for p in (fp32, fp16, bf16)}) == 3
    inductor = plan("tiny-llama-inductor", cat.recipes["tiny-llama-inductor"], prompts, current())
    assert inductor.step("engine").options["compute"] == "fp32"
    found = problems_of(
        tmp_path / "a",
        "tiny-llama-aoti",
        {"backend: aoti": "backend: aoti\nprecision:\n  compute: fp16"},
        ("tiny-llama",),
    )
    line = next(p for p in found if "built by the inductor and onnxruntime backends only" in p)
    assert "precision -> compute" in line, found
    found = problems_of(
        tmp_path / "b",
        "tiny-llama-int8-wo",
        {"kv_cache: auto": "kv_cache: auto\n  compute: fp16"},
        ("tiny-llama",),
    )
    line = next(p for p in found if "quantized weights or KV cache keep fp32" in p)
    assert "precision -> compute" in line, found
    found = problems_of(
        tmp_path / "c",
        "tiny-llama-ngram",
        {"kv_cache: auto": "kv_cache: auto\n  compute: fp16"},
        ("tiny-llama",),
    )
    assert any("speculative variants are built for fp32 onnxruntime" in p for p in found), found
    found = problems_of(
        tmp_path / "d",
        "tiny-bert-classifier",
        {"kv_cache: auto": "kv_cache: auto\n  compute: bf16"},
    )
    assert any("recipes are built as fp32 onnxruntime bundles only" in p for p in found), found


def test_ngram_drafts_on_inductor_and_its_engine_alone_gets_a_verify_length() -> None:
    """The inductor backend builds the ngram variant (its runtime verifies through the
    device cache) and, of the model drafters, DFlash and DSpark only (below): the
    others are refused at execution.variant; the engine step of a drafting recipe gets
    verify_len = max_draft_len + 1, an ordinary one's is 0."""
    cat = load(Paths(ROOT), cache=False)
    prompts = cat.prompts["default"]
    ngram = cat.recipe("tiny-llama-ngram-inductor")
    assert buildable.refusals(ngram) == []
    engine = plan("x", ngram, prompts, current()).step("engine").options
    assert engine["backend"] == "inductor" and engine["verify_len"] == 5
    ordinary = plan("x", cat.recipe("tiny-llama-inductor"), prompts, current())
    assert ordinary.step("engine").options["verify_len"] == 0
    onnx = plan("x", cat.recipe("tiny-llama-ngram"), prompts, current())
    assert "verify_len" not in onnx.step("engine").options  # onnxruntime's has no programs
    for name in ("tiny-llama-draft", "tiny-qwen3-eagle3"):
        shipped = cat.recipe(name)
        recipe = shipped.model_copy(
            update={"build": shipped.build.model_copy(update={"backend": "inductor"})}
        )
        found = buildable.refusals(recipe)
        assert [p.location.key_path for p in found if p.location] == [("execution", "variant")]
        assert "inductor backend builds the ordinary, ngram, dflash, dspark variants only" in (
            found[0].cause
        )
        assert shipped.execution.variant in found[0].cause


def inductor_copy(recipe: Recipe, **build: object) -> Recipe:
    """`recipe` on the inductor backend, its build edited."""
    return recipe.model_copy(
        update={"build": recipe.build.model_copy(update={"backend": "inductor", **build})}
    )


def test_dspark_and_dflash_drafters_are_programs_of_the_inductor_engine() -> None:
    """On the inductor backend a DFlash/DSpark drafter is no step of its own: the
    target's engine step takes the drafter's checkpoint and names the drafter (its
    programs are the engine's, builders/causal_lm/backends/_drafter.py); the verify
    length is block_length + 1. onnxruntime's plan keeps its drafter step."""
    cat = load(Paths(ROOT), cache=False)
    prompts = cat.prompts["default"]
    recipe = cat.recipe("tiny-qwen3-dspark-inductor")
    assert buildable.refusals(recipe) == []
    made = plan("x", recipe, prompts, current())
    engine = made.step("engine")
    assert engine.options["drafter"] == "dspark" and engine.options["verify_len"] == 5
    draft = cat.recipe("tiny-qwen3-dspark")
    assert engine.inputs["drafter"] == made.step("fetch", "draft").key
    assert "drafter" not in {s.kind for s in made.steps}
    assert "drafter" in {s.kind for s in plan("x", draft, prompts, current()).steps}
    ordinary = plan("x", cat.recipe("tiny-qwen3-inductor"), prompts, current())
    assert "drafter" not in ordinary.step("engine").options  # keys as they were
    dflash = inductor_copy(cat.recipe("tiny-qwen3-dflash"), max_batch_size=1)
    assert buildable.refusals(dflash) == []
    assert plan("x", dflash, prompts, current()).step("engine").options["drafter"] == "dflash"


def test_an_inductor_dspark_recipe_computes_in_bf16_but_is_refused_split_or_quantized() -> None:
    """bf16 compute is the 8B geometry's headline (bench/shape.py); a split engine and
    quantized weights are not built with a drafter yet, each refused where it is set."""
    cat = load(Paths(ROOT), cache=False)
    recipe = cat.recipe("tiny-qwen3-dspark-inductor")
    half = recipe.model_copy(
        update={"precision": recipe.precision.model_copy(update={"compute": "bf16"})}
    )
    assert buildable.refusals(half) == []
    split = inductor_copy(recipe, tensor_parallel=2)
    found = [p for p in buildable.refusals(split) if "drafter's programs" in p.cause]
    assert [p.location.key_path for p in found if p.location] == [("build", "tensor_parallel")]
    fp8 = recipe.model_copy(
        update={"precision": recipe.precision.model_copy(update={"weights": "fp8"})}
    )
    found = [p for p in buildable.refusals(fp8) if "dspark inductor engine" in p.cause]
    assert [p.location.key_path for p in found if p.location] == [("precision", "weights")]


@pytest.mark.parametrize(
    ("architecture", "why"),
    [
        ("Qwen2_5_VLForConditionalGeneration", ""),
        ("Qwen2VLForConditionalGeneration", ""),
        ("Qwen3VLForConditionalGeneration", ""),
        ("Gemma3ForConditionalGeneration", "attend each other both ways"),
        ("Idefics3ForConditionalGeneration", ""),
        ("InternVLForConditionalGeneration", ""),
        ("LlavaForConditionalGeneration", ""),
    ],
)
def test_an_inductor_vlm_is_refused_where_its_programs_cannot_say_the_models_attention(
    architecture: str, why: str
) -> None:
    """Read off the fetched config.json: the inductor programs take 1-D or M-RoPE
    positions and DeepStack rows, and a causal mask over slots (tiny-llava-inductor,
    tiny-qwen2.5-vl-inductor, tiny-qwen3-vl-inductor, tiny-idefics3-inductor and
    tiny-internvl-inductor build)."""
    data = yaml.safe_load((ROOT / "recipes" / "tiny-qwen2.5-vl.yaml").read_text())
    data["build"] = {**data["build"], "backend": "inductor", "prefill_chunk_len": 8}
    recipe = Recipe.model_validate(data)
    found = buildable.image_attention_problems(recipe, {"architectures": [architecture]})
    if not why:
        assert found == []
        return
    (problem,) = found
    assert why in problem.cause and problem.location is not None
    assert problem.location.key_path == ("build", "backend")
