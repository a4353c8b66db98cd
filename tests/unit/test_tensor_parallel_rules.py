"""build.tensor_parallel without a build (issue 42): `doit check` refuses a split the
checkpoint's head counts do not divide, at the recipe's line, once its config.json is
in the hub cache; TP is the inductor backend's; and `doit diff` reports a change of
tensor_parallel as rebuilding the engine, the bundle and the validation, nothing
before them."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from test_review import BASE, edited, make_catalog, messages

from kiln import catalog
from kiln.catalog import verdict
from kiln.commands import diffing
from kiln.commands.diff import markdown

LLAMA = BASE["model"]
# kiln-tiny/llama's geometry (tinyhub): 4 heads, 2 key/value heads, 128 MLP channels
CONFIG = {"num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128}


def split(tp: int, **more: Any) -> dict[str, Any]:
    """tiny-llama on the inductor backend, split `tp` ways."""
    return edited(
        **{
            "build.backend": "inductor",
            "build.max_batch_size": 2,
            "build.prefill_chunk_len": 16,
            "build.tensor_parallel": tp,
            "validation.thresholds": "tensor-parallel" if tp > 1 else "fp32-exact",
            **more,
        }
    )


def fetched(hub: Path, config: dict[str, Any]) -> None:
    """The checkpoint's config.json in the hub cache's layout, as a fetch leaves it."""
    folder = hub / ("models--" + LLAMA["repo"].replace("/", "--")) / "snapshots"
    (folder / LLAMA["revision"]).mkdir(parents=True)
    (folder / LLAMA["revision"] / "config.json").write_text(json.dumps(config))


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "hub"
    monkeypatch.setenv("KILN_HUB_CACHE", str(path))
    return path


def test_a_split_the_heads_do_not_divide_is_refused_at_its_line(tmp_path: Path, hub: Path) -> None:
    fetched(hub, CONFIG)
    cat = make_catalog(tmp_path / "c", {"r": split(4)})
    text = messages(cat)
    assert "r" not in cat.recipes
    line = next(
        i
        for i, ln in enumerate((tmp_path / "c/recipes/r.yaml").read_text().splitlines(), 1)
        if "tensor_parallel" in ln
    )
    assert text.startswith(f"recipes/r.yaml:{line}:"), text
    assert "build -> tensor_parallel" in text
    assert "tensor_parallel 4 does not divide num_key_value_heads 2" in text
    assert "num_attention_heads" not in text.split("does not divide")[1].split("of kiln")[0]
    assert "use a tensor_parallel that divides them all: 1, 2" in text


def test_a_split_that_divides_passes_and_one_not_fetched_waits_for_the_engine(
    tmp_path: Path, hub: Path
) -> None:
    cat = make_catalog(tmp_path / "a", {"r": split(4)})
    assert messages(cat) == "" and "r" in cat.recipes  # no config here: not judged yet
    before = verdict.inputs(catalog.Paths(tmp_path / "a")).key
    fetched(hub, CONFIG)
    assert verdict.inputs(catalog.Paths(tmp_path / "a")).key != before  # judged again
    cat = make_catalog(tmp_path / "b", {"r": split(2)})
    assert messages(cat) == "" and cat.recipes["r"].build.tensor_parallel == 2


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"build.tensor_parallel": 2}, "rule tensor-parallel-needs-inductor:"),
        (
            {"build.backend": "inductor", "build.tensor_parallel": 2},
            "rule tensor-parallel-gates:",
        ),
        (
            {
                "build.backend": "inductor",
                "build.tensor_parallel": 2,
                "precision.weights": "fp8",
                "build.target": "sm90",
                "validation.thresholds": "quantized-fp8",
            },
            "tensor_parallel 2 splits plain weights; fp8 weights are not split yet",
        ),
    ],
)
def test_what_tensor_parallelism_is_built_for(
    tmp_path: Path, changes: dict[str, Any], expected: str
) -> None:
    cat = make_catalog(tmp_path, {"r": edited(**changes)})
    assert expected in messages(cat)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def test_diff_of_tensor_parallel_rebuilds_engine_bundle_and_validate(tmp_path: Path) -> None:
    make_catalog(tmp_path, {"r": split(1)})
    shutil.copytree(ROOT / "kiln", tmp_path / "kiln", ignore=shutil.ignore_patterns("__pycache__"))
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    make_catalog(tmp_path, {"r": split(2)})
    report = diffing.compare("HEAD", tmp_path, tmp_path)
    [r] = report.recipes
    assert "build.tensor_parallel: 1 -> 2" in [str(c) for c in r.fields]
    assert [(b.step.kind, b.step.role) for b in r.steps] == [
        ("engine", "model"),
        ("bundle", "model"),
        ("validate", "model"),
    ]
    assert any("tensor_parallel" in reason for reason in r.steps[0].reasons)
    md = markdown(report)
    assert "- engine (model) " in md and "- fetch (model) " not in md
    assert "- reference (model) " not in md


def test_the_matrix_and_catalog_show_the_world_size_in_the_backend_column(
    tmp_path: Path,
) -> None:
    from kiln.evidence.cells import cell
    from kiln.site.view import _backend

    cat = make_catalog(tmp_path, {"one": split(1), "two": split(2)})
    assert cell(cat.recipes["one"]).column == ("fp32", "ordinary", "inductor")
    assert cell(cat.recipes["two"]).column == ("fp32", "ordinary", "inductor tp2")
    assert _backend(cat.recipes["two"]) == "inductor tp2"
    assert _backend(cat.recipes["one"]) == "inductor"
