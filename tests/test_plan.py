"""Keys hash exactly what decides a step's output: reordering YAML changes nothing,
changing an input that matters changes exactly the steps downstream of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT

from kiln.load import load_yaml_model
from kiln.plan import plan
from kiln.schema import PromptSet, Recipe
from kiln.toolchain import current

PROMPTS = load_yaml_model(PromptSet, ROOT / "prompts" / "default.yaml")


def keys(data: dict[str, Any], tmp_path: Path, name: str = "r") -> dict[str, str]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    recipe = load_yaml_model(Recipe, path)
    return {s.kind: s.key for s in plan(name, recipe, PROMPTS, current()).steps}


def base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    return data


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
    from dataclasses import replace

    from kiln.canonical import key_of

    recipe = load_yaml_model(Recipe, ROOT / "recipes" / "tiny-llama.yaml")
    tools = current()
    edited = replace(tools, code={**tools.code, "export": key_of("edited export.py")})
    a = {s.kind: s.key for s in plan("r", recipe, PROMPTS, tools).steps}
    b = {s.kind: s.key for s in plan("r", recipe, PROMPTS, edited).steps}
    assert {k for k in a if a[k] != b[k]} == {"export", "onnx", "engine", "bundle", "validate"}
