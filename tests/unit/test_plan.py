"""Keys hash exactly what decides a step's output: reordering YAML changes nothing,
changing an input that matters changes exactly the steps downstream of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT, copy_code
from samples import PROMPTS, base, quantized, steps

from kiln.catalog.yaml import load_yaml_model
from kiln.plan import plan
from kiln.plan.toolchain import current
from kiln.schema import Recipe


def keys(data: dict[str, Any], tmp_path: Path, name: str = "r") -> dict[str, str]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    recipe = load_yaml_model(Recipe, path)
    return {s.kind: s.key for s in plan(name, recipe, PROMPTS, current()).steps}


def reorder(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: reorder(obj[k]) for k in reversed(list(obj))}
    return obj


def test_reordering_yaml_keys_changes_no_key(tmp_path: Path) -> None:
    a = keys(base(), tmp_path)
    b = keys(reorder(base()), tmp_path)
    assert a == b
    assert len(set(a.values())) == len(a)  # every step has its own key


def test_max_seq_len_reruns_only_engine_bundle_and_validate(tmp_path: Path) -> None:
    data = base()
    before = keys(data, tmp_path)
    data["build"]["max_seq_len"] = 128
    after = keys(data, tmp_path)
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"engine", "bundle", "validate"}


def test_every_input_that_matters_changes_the_keys_downstream(tmp_path: Path) -> None:
    cases = {
        ("model", "revision"): (
            "0" * 40,
            {"fetch", "reference", "export", "onnx", "engine", "bundle", "validate"},
        ),
        ("validation", "max_new_tokens"): (8, {"reference", "validate"}),
        ("build", "max_batch_size"): (2, {"engine", "bundle", "validate"}),
    }
    original = keys(base(), tmp_path)
    for (section, key), (value, expected) in cases.items():
        data = base()
        data[section][key] = value
        after = keys(data, tmp_path)
        assert {k for k in original if original[k] != after[k]} == expected, (section, key)


def test_recipes_sharing_a_checkpoint_share_fetch_export_and_reference(tmp_path: Path) -> None:
    a = keys(base(), tmp_path, "a")
    other = base()
    other["build"]["max_batch_size"] = 1
    other["description"] = "another recipe on the same checkpoint"
    b = keys(other, tmp_path, "b")
    for kind in ("fetch", "reference", "export", "onnx"):
        assert a[kind] == b[kind]
    assert a["engine"] != b["engine"]


def test_description_changes_no_key(tmp_path: Path) -> None:
    data = base()
    before = keys(data, tmp_path)
    data["description"] = "reworded for the site"
    assert keys(data, tmp_path) == before


def test_code_version_is_in_the_key(tmp_path: Path) -> None:
    recipe = load_yaml_model(Recipe, ROOT / "recipes" / "tiny-llama.yaml")
    edited = copy_code(tmp_path / "edited")
    export = edited / "builders" / "causal_lm" / "export.py"
    export.write_text(export.read_text() + "\nEDITED = 1\n")
    a = {s.kind: s.key for s in plan("r", recipe, PROMPTS, current()).steps}
    b = {s.kind: s.key for s in plan("r", recipe, PROMPTS, current(edited)).steps}
    assert {k for k in a if a[k] != b[k]} == {"export", "onnx", "engine", "bundle", "validate"}


# ---------------------------------------------------------------- precisions and backends

import pytest  # noqa: E402

from kiln.errors import KilnError  # noqa: E402


def test_an_fp32_recipe_plans_no_quantize_step_and_writes_every_option(tmp_path: Path) -> None:
    got = steps(base(), tmp_path)
    assert list(got) == ["fetch", "reference", "export", "onnx", "engine", "bundle", "validate"]
    options = {kind: s.options for kind, s in got.items()}
    task = "text-generation"
    assert options["export"] == {
        "opset": 17,
        "exporter": "torchscript",
        "task": task,
        "hidden": "none",
        "attention": "onnxruntime",
    }
    assert options["onnx"] == {"optimize": True, "qdq": "none", "task": task, "lm_head": None}
    assert options["engine"] == {
        "task": task,
        "backend": "onnxruntime",
        "max_batch_size": 4,
        "max_seq_len": 256,
        "target": "cpu",
        "max_input_len": 256,
        "quantized": False,
        "compute": "fp32",
    }
    assert options["bundle"] == {
        "variant": "ordinary",
        "precision": {"weights": "fp32", "kv_cache": "auto", "compute": "fp32"},
        "task": task,
        "speculative": {},
        "prompt_policy": {},
        "prefill_chunk_len": 0,
    }
    checks = {"prompts", "max_new_tokens", "task", "scored_positions", "chat"}
    assert set(options["reference"]) == {*checks, "dtype"}
    assert set(options["validate"]) == checks
    # the engine's libraries are what its builder's code imports: onnxruntime, not torch
    libraries = got["engine"].material["libraries"]
    assert "onnxruntime" in libraries and "torch" not in libraries
    assert libraries["onnxruntime"] == current().version("onnxruntime")
    assert got["export"].inputs == {"checkpoint": got["fetch"].key}


def test_a_quantized_recipe_quantizes_before_export(tmp_path: Path) -> None:
    fp32 = steps(base(), tmp_path)
    got = steps(quantized(), tmp_path)
    assert list(got) == [
        "fetch",
        "reference",
        "quantize",
        "export",
        "onnx",
        "engine",
        "bundle",
        "validate",
    ]
    q = got["quantize"]
    assert q.options == {
        "weights": "fp8",
        "kv_cache": "auto",
        "samples": 32,
        "max_tokens": 64,
        "task": "text-generation",
        "block_size": None,
        "awq_alpha_step": None,
        "lm_head_outliers": None,
    }
    assert q.inputs == {"checkpoint": got["fetch"].key}
    assert "nvidia-modelopt" in q.material["libraries"]
    assert got["export"].inputs == {"checkpoint": got["fetch"].key, "quantized": q.key}
    assert got["export"].options["opset"] == 19
    assert got["onnx"].options == {
        "optimize": True,
        "qdq": "standard",
        "task": "text-generation",
        "lm_head": None,
    }
    assert got["engine"].options["quantized"] is True
    # the checkpoint is the same: fetch and the fp32 reference are shared
    assert got["fetch"].key == fp32["fetch"].key
    assert got["reference"].key == fp32["reference"].key


def test_calibration_samples_change_quantize_and_downstream_only(tmp_path: Path) -> None:
    before = {k: s.key for k, s in steps(quantized(), tmp_path).items()}
    data = quantized()
    data["calibration"] = {"samples": 8}
    after = {k: s.key for k, s in steps(data, tmp_path).items()}
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"quantize", "export", "onnx", "engine", "bundle", "validate"}


def test_tensorrt_keeps_tensorrt_form_and_aoti_skips_onnx(tmp_path: Path) -> None:
    trt = steps(quantized(backend="tensorrt", target="sm90"), tmp_path)
    assert trt["onnx"].options["qdq"] == "tensorrt"
    assert trt["engine"].options["target"] == "sm90"
    assert "tensorrt" in trt["engine"].material["libraries"]
    aoti = steps(quantized("fp32", backend="aoti"), tmp_path)
    assert list(aoti) == ["fetch", "reference", "engine", "bundle", "validate"]
    assert aoti["engine"].inputs == {"checkpoint": aoti["fetch"].key}
    assert "torch" in aoti["engine"].material["libraries"]


def test_quantized_aoti_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(KilnError, match=r"torch\.export fails on modelopt's fake-quantized"):
        steps(quantized("int8-sq", backend="aoti"), tmp_path)


def test_inductor_builds_fp8_for_gpus_from_the_quantize_step(tmp_path: Path) -> None:
    """The inductor engine reads the quantize step; whatever quantized precision a
    recipe names plans (the engine step records what it does not build as
    unsupported-here, tests/builds/test_inductor.py), while aoti refuses them all."""
    got = steps(quantized("fp8", backend="inductor", target="sm90"), tmp_path)
    assert list(got) == ["fetch", "reference", "quantize", "engine", "bundle", "validate"]
    assert got["engine"].inputs == {
        "checkpoint": got["fetch"].key,
        "quantized": got["quantize"].key,
    }
    for i, weights in enumerate(("int8-wo", "int4-awq")):
        other = steps(quantized(weights, backend="inductor", target="sm90"), tmp_path, f"r{i}")
        assert other["engine"].inputs["quantized"] == other["quantize"].key
    with pytest.raises(KilnError, match="aoti does not build int8-wo weights"):
        steps(quantized("int8-wo", backend="aoti"), tmp_path, "aoti")


def test_compile_mode_is_the_inductor_engines_none_unless_set(tmp_path: Path) -> None:
    data = base()
    data["build"].update(backend="inductor")
    plain = steps(data, tmp_path, "a")["engine"]
    data["build"]["compile_mode"] = "reduce-overhead"
    chosen = steps(data, tmp_path, "b")["engine"]
    assert plain.options["compile_mode"] is None  # unset: the runtime's default
    assert chosen.options == {**plain.options, "compile_mode": "reduce-overhead"}
    assert chosen.key != plain.key
    data["build"]["backend"] = "onnxruntime"
    with pytest.raises(KilnError, match="compiles nothing at load"):
        steps(data, tmp_path, "c")


def test_scored_positions_enter_reference_and_validate(tmp_path: Path) -> None:
    data = quantized()
    data["validation"]["scored_positions"] = 256
    got = steps(data, tmp_path)
    assert got["reference"].options["scored_positions"] == 256
    assert got["validate"].options["scored_positions"] == 256
