"""The site rendered by `doit site` from freshly built recipes: recipe pages, the JSON
API and the matrix agree with the manifests the build wrote."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import World, heavy
from site_api import api_validator, record_at

pytestmark = heavy


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


def test_json_api_validates_against_its_schema_and_matches_the_manifests(
    built: World, built_site: Path
) -> None:
    listing = json.loads((built_site / "api" / "recipes.json").read_text())
    api_validator("RecipeList").validate(listing)
    assert [r["name"] for r in listing["recipes"]] == ["tiny-llama", "tiny-qwen3"]
    for summary in listing["recipes"]:
        detail = json.loads((built_site / summary["api"]).read_text())
        api_validator("RecipeDetail").validate(detail)
        m = built.manifest(summary["name"])
        assert detail["lock"] == m["lock"]
        assert [h["record"] for h in detail["history"]] == m["evidence"]
        assert summary["verdict"] == m["evidence"][-1]["verdict"]
        assert summary["architecture"] == m["lock"]["model"]["architecture"]
        assert record_at(built_site, summary["evidence"]) == m["evidence"][-1]
    matrix = json.loads((built_site / "api" / "matrix.json").read_text())
    api_validator("Matrix").validate(matrix)
    assert matrix["rows"] and matrix["not_built"] == []


def test_every_matrix_cell_is_decided_by_the_evidence_it_links_to(built_site: Path) -> None:
    matrix = json.loads((built_site / "api" / "matrix.json").read_text())
    html = (built_site / "matrix.html").read_text()
    decided = 0
    for row in matrix["rows"]:
        for cell in row["cells"]:
            if cell["evidence"] is None:
                assert cell["verdict"] == "untested" and cell["recipes"] == []
                continue
            record = record_at(built_site, cell["evidence"])
            assert record["verdict"] == cell["verdict"] or (
                cell["verdict"] == "untested" and record["verdict"] == "not-run"
            )
            assert f'href="{cell["evidence"]}"' in html
            decided += 1
    assert decided == 2  # the two tiny recipes, one architecture each
