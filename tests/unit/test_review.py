"""Review tooling: rules as data, extends, editor schema agreement, plan/diff explanations,
and a fuzz test proving no recipe text can produce a traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from conftest import ROOT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln import catalog
from kiln.catalog.yaml import load_yaml_model
from kiln.commands import diffing
from kiln.commands.diff import markdown
from kiln.errors import KilnError
from kiln.schema import Recipe

BASE: dict[str, Any] = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())


def make_catalog(root: Path, recipes: dict[str, dict[str, Any] | str]) -> catalog.Catalog:
    for folder in ("thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder, dirs_exist_ok=True)
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    (root / "manifests").mkdir(exist_ok=True)
    for name, data in recipes.items():
        text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
        (root / "recipes" / f"{name}.yaml").write_text(text)
    return catalog.load(catalog.Paths(root))


def edited(**changes: Any) -> dict[str, Any]:
    """BASE with dotted-path edits, e.g. edited(**{"build.target": "sm90"})."""
    data = json.loads(json.dumps(BASE))
    for dotted, value in changes.items():
        *parents, last = dotted.split(".")
        node = data
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return data


def messages(cat: catalog.Catalog) -> str:
    return "\n".join(p.render() for p in cat.all_problems())


DRAFT = {"repo": "kiln-tiny/qwen3", "revision": "8c0453fc635cbc01885554be7a5f6b71998ad301"}


@pytest.mark.parametrize(
    ("changes", "rule"),
    [
        ({"execution": {"variant": "draft"}}, "draft-needs-draft-companion"),
        ({"execution": {"variant": "lora"}}, "lora-needs-adapter-companion"),
        ({"companions": {"draft": DRAFT}}, "draft-companion-needs-draft-variant"),
        (
            {"precision.weights": "nvfp4", "build.backend": "tensorrt", "build.target": "sm90"},
            "nvfp4-tensorrt-needs-blackwell",
        ),
        ({"precision.weights": "fp8", "build.target": "sm80"}, "fp8-gpu-needs-sm89"),
        ({"precision.kv_cache": "fp8", "build.target": "sm86"}, "fp8-kv-cache-gpu-needs-sm89"),
        (
            {
                "execution": {"variant": "draft"},
                "companions": {"draft": DRAFT},
                "build.prefill_chunk_len": 64,
            },
            "chunked-prefill-excludes-external-draft",
        ),
        ({"execution": {"variant": "mtp"}}, "mtp-needs-mtp-architecture"),
        (
            {"execution": {"variant": "mtp"}, "companions": {"draft": DRAFT}},
            "mtp-assistant-needs-gemma4",
        ),
        (
            {"execution": {"variant": "dspark"}, "model.architecture": "GptOssForCausalLM"},
            "drafter-needs-supported-architecture",
        ),
        ({"trust_remote_code": True}, "remote-code-needs-allowlist"),
        ({"build.backend": "tensorrt"}, "tensorrt-needs-gpu-target"),
        ({"build.tensor_parallel": 2}, "tensor-parallel-needs-inductor"),
    ],
)
def test_each_rule_fires_cites_its_id_and_points_at_a_line(
    tmp_path: Path, changes: dict[str, Any], rule: str
) -> None:
    cat = make_catalog(tmp_path, {"r": edited(**changes)})
    assert "r" not in cat.recipes
    text = messages(cat)
    assert f"rule {rule}:" in text
    assert text.startswith("recipes/r.yaml:") and "^" in text


def test_a_recipe_that_satisfies_every_rule_passes(tmp_path: Path) -> None:
    ok = edited(
        **{"execution": {"variant": "draft", "max_draft_len": 3}, "companions": {"draft": DRAFT}}
    )
    cat = make_catalog(tmp_path, {"ok": ok})
    assert messages(cat) == "" and "ok" in cat.recipes


def test_extends_deep_merges_one_chain(tmp_path: Path) -> None:
    child = {"extends": "base", "description": "child", "build": {"max_seq_len": 128}}
    grandchild = {"extends": "child", "build": {"max_batch_size": 2}}
    cat = make_catalog(tmp_path, {"base": BASE, "child": child, "grandchild": grandchild})
    assert messages(cat) == ""
    g = cat.recipes["grandchild"]
    assert (g.build.max_seq_len, g.build.max_batch_size, g.description) == (128, 2, "child")
    assert g.model == cat.recipes["base"].model


@pytest.mark.parametrize(
    ("recipes", "expected"),
    [
        ({"a": {"extends": "b"}, "b": {"extends": "a"}}, "extends cycle: a -> b -> a"),
        ({"a": {"extends": "nope"}}, "parent recipe 'nope' does not exist"),
        ({"a": {"extends": "a"}}, "extends cycle"),
    ],
)
def test_extends_errors_point_at_the_extends_line(
    tmp_path: Path, recipes: dict[str, Any], expected: str
) -> None:
    cat = make_catalog(tmp_path, recipes)
    text = messages(cat)
    assert expected in text
    assert "recipes/a.yaml:1:10: extends" in text


def test_extends_deeper_than_8_is_an_error(tmp_path: Path) -> None:
    chain: dict[str, Any] = {"r0": BASE}
    for i in range(1, 11):
        chain[f"r{i}"] = {"extends": f"r{i - 1}"}
    cat = make_catalog(tmp_path, chain)
    assert "r8" in cat.recipes and "r10" not in cat.recipes
    assert "extends chain deeper than 8" in messages(cat)


def test_an_inherited_error_is_located_in_the_parent(tmp_path: Path) -> None:
    parent = edited(**{"build.max_batch_size": 0})
    cat = make_catalog(tmp_path, {"parent": parent, "child": {"extends": "parent"}})
    child_problems = "\n".join(p.render() for p in cat.problems["recipes/child.yaml"])
    assert "recipes/parent.yaml:" in child_problems and "build -> max_batch_size" in child_problems


def test_a_parameter_of_another_variant_says_whose_it_is(tmp_path: Path) -> None:
    cat = make_catalog(tmp_path, {"r": edited(execution={"variant": "draft", "block_length": 4})})
    assert (
        "'block_length' is not a parameter of variant 'draft'; it belongs to dflash, dspark"
        in messages(cat)
    )


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        (16, True),
        (32, True),
        (128, True),
        (192, True),
        (48, False),
        (100, False),
        (65, False),
    ],
)
def test_prefill_chunk_len_is_0_a_small_power_of_two_or_a_multiple_of_64(
    value: int, ok: bool
) -> None:
    data = edited(**{"build.prefill_chunk_len": value})
    try:
        Recipe.model_validate(data)
        assert ok
    except Exception:
        assert not ok


# ---------------------------------------------------------------- editor schema


def invalid_recipes() -> list[dict[str, Any]]:
    return [
        edited(**{"precision.weights": "fp9"}),
        edited(**{"build.max_seq_len": 1}),
        edited(**{"model.revision": "main"}),
        edited(**{"colour": "blue"}),
        edited(execution={"variant": "draft", "block_length": 4}),
        edited(execution={"variant": "dflash", "block_length": 9}),
        {k: v for k, v in BASE.items() if k != "model"},
        edited(**{"build.target": "sm75"}),
        edited(**{"tags": ["Not A Tag"]}),
    ]


def test_jsonschema_and_pydantic_agree() -> None:
    schema = json.loads((ROOT / "schema" / "recipe.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid(BASE)
    Recipe.model_validate(BASE)
    for data in invalid_recipes():
        assert not validator.is_valid(data), data
        with pytest.raises(Exception):  # noqa: B017 - pydantic's ValidationError
            Recipe.model_validate(data)


def test_a_child_recipe_validates_in_the_editor_without_inherited_keys() -> None:
    schema = json.loads((ROOT / "schema" / "recipe.schema.json").read_text())
    assert jsonschema.Draft202012Validator(schema).is_valid(
        {"schema_version": 1, "extends": "tiny-llama"}
    )


# ---------------------------------------------------------------- fuzz: never a traceback

VALID = (ROOT / "recipes" / "tiny-llama.yaml").read_text()
YAMLISH = st.sampled_from(
    [
        *list(":-[]{}&*!|>'\"#%@`,?\t\n "),
        "\x00",
        "\ufeff",
        "<<",
        "yes",
        "0x1f",
        "~",
        "!!python/object:os.system",
        "  ",
        "\n  - ",
    ]
)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = VALID
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["insert", "delete", "replace", "swap"]))
        i = draw(st.integers(0, len(text)))
        if op == "insert":
            text = text[:i] + draw(st.one_of(YAMLISH, st.text(max_size=8))) + text[i:]
        elif op == "delete":
            text = text[:i] + text[i + draw(st.integers(1, 20)) :]
        elif op == "replace":
            text = text[:i] + draw(st.text(max_size=5)) + text[i + 5 :]
        else:
            lines = text.splitlines()
            a, b = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
    return text


FUZZ_CASES = 1500


@settings(max_examples=FUZZ_CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated())
def test_no_mutated_recipe_produces_anything_but_a_located_error(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.getbasetemp() / "fuzz.yaml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    try:
        load_yaml_model(Recipe, path, "recipes/fuzz.yaml")
    except KilnError as exc:
        for p in exc.problems:
            assert p.location is not None and p.location.file == "recipes/fuzz.yaml"
            assert p.render()


# ---------------------------------------------------------------- diff and stale locks


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_diff_reports_added_changed_removed_rebuilds_and_new_violations(tmp_path: Path) -> None:
    other = edited(description="another")
    make_catalog(tmp_path, {"tiny-llama": BASE, "gone": other})
    shutil.copytree(ROOT / "kiln", tmp_path / "kiln", ignore=shutil.ignore_patterns("__pycache__"))
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    make_catalog(
        tmp_path,
        {
            "tiny-llama": edited(**{"build.max_seq_len": 128}),
            "new": edited(**{"build.max_batch_size": 1}),
            "broken": edited(**{"build.backend": "tensorrt"}),
        },
    )
    (tmp_path / "recipes" / "gone.yaml").unlink()
    md = markdown(diffing.compare("HEAD", tmp_path, tmp_path))
    # "broken" is added but invalid: counted apart from the valid additions.
    assert "**1 added, 1 changed, 1 removed, 1 invalid**" in md
    assert "- engine (model) " in md and "options.max_seq_len: 256 -> 128" in md
    assert "- bundle (model) " in md and "- validate (model) " in md
    assert "- export (model) " not in md
    assert "### Added (invalid): `broken`" in md
    assert "### Added: `new`" in md and "Builds engine, bundle, validate" in md
    assert "### Removed: `gone`" in md
    assert "rule tensorrt-needs-gpu-target" in md and "### New problems: 1" in md


def test_diff_of_an_unknown_revision_is_a_clean_error(tmp_path: Path) -> None:
    make_catalog(tmp_path, {"tiny-llama": BASE})
    git(tmp_path, "init", "-q")
    with pytest.raises(KilnError, match="base: 'nope' names no tree"):
        diffing.compare("nope", tmp_path, tmp_path)
