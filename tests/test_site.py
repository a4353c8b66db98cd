"""The site shows what manifests prove, escapes what recipes say, and stays in sync."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml
from conftest import ROOT, World, heavy

from kiln import catalog, editor_schema, sitegen


@heavy
def test_recipe_page_shows_checkpoint_lock_commands_gates_and_evidence(built: World) -> None:
    built.doit("site", check=True)
    page = (built.root / "_site" / "recipes" / "tiny-llama.html").read_text()
    m = built.manifest("tiny-llama")
    assert m["lock"]["model"]["revision"] in page
    for f in m["lock"]["model"]["files"]:
        assert f["sha256"] in page
    assert "doit build recipe=tiny-llama" in page
    assert 'doit run recipe=tiny-llama prompt="Hello"' in page
    assert "max_abs_logit_diff" in page and "evidence-0" in page
    index = (built.root / "_site" / "index.html").read_text()
    assert 'href="recipes/tiny-llama.html"' in index and ">pass<" in index


def test_a_recipe_without_evidence_is_shown_as_not_built(tmp_path: Path) -> None:
    root = tmp_path / "cat"
    for folder in ("recipes", "thresholds", "prompts"):
        (root / folder).mkdir(parents=True)
        for f in (ROOT / folder).glob("*.yaml"):
            (root / folder / f.name).write_text(f.read_text())
    (root / "manifests").mkdir()
    sitegen.build(catalog.load(catalog.Paths(root)), tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "not built" in index and ">pass<" not in index


def test_recipe_strings_are_escaped(tmp_path: Path) -> None:
    root = tmp_path / "cat"
    for folder in ("thresholds", "prompts"):
        (root / folder).mkdir(parents=True)
        for f in (ROOT / folder).glob("*.yaml"):
            (root / folder / f.name).write_text(f.read_text())
    (root / "recipes").mkdir()
    (root / "manifests").mkdir()
    data = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    data["description"] = '<script>alert(1)</script><img src=x onerror="alert(2)">'
    (root / "recipes" / "evil.yaml").write_text(yaml.safe_dump(data))
    sitegen.build(catalog.load(catalog.Paths(root)), tmp_path / "site")
    page = (tmp_path / "site" / "recipes" / "evil.html").read_text()
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_committed_json_schemas_are_current() -> None:
    for name, data in editor_schema.render().items():
        path = ROOT / "schema" / name
        assert path.read_bytes() == data, f"{path} is stale: run `doit schema`"


def test_shipped_recipes_validate_against_the_editor_schema() -> None:
    schema = json.loads((ROOT / "schema" / "recipe.schema.json").read_text())
    recipes = sorted((ROOT / "recipes").glob("*.yaml"))
    assert recipes
    for path in recipes:
        assert path.read_text().startswith(
            "# yaml-language-server: $schema=../schema/recipe.schema.json"
        )
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
