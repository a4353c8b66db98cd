"""`doit new` on a tiny checkpoint the hub cache does not hold yet: tinyhub writes it
into the mirror (parameter names come from transformers, hence the build extra), and
the revision asked for must be the one it makes."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml
from conftest import ROOT, heavy, make_world

import tinyhub

LLAMA_REVISION = "86b0c016f94ff17585b315e24e0f72b043294bed"  # recipes/tiny-llama.yaml
LLAVA_REVISION = "c592177fbb45e7fff447617306d7611822a8cac5"  # recipes/tiny-llava.yaml


@heavy
def test_a_tiny_repo_is_written_into_the_mirror_and_its_revision_checked(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ())
    (world.root / "catalog").mkdir()
    shutil.copy(ROOT / "catalog" / "architectures.yaml", world.root / "catalog")
    wrong = world.doit("new", "name=tiny", "model=kiln-tiny/llama@" + "1" * 40)
    assert wrong.returncode != 0
    assert f"kiln-tiny/llama has no revision {'1' * 40}" in wrong.stdout
    assert f"pin kiln-tiny/llama@{LLAMA_REVISION}" in wrong.stdout
    assert not (world.root / "recipes" / "tiny.yaml").exists()
    world.doit("new", "name=tiny", f"model=kiln-tiny/llama@{LLAMA_REVISION}", check=True)
    data = yaml.safe_load((world.root / "recipes" / "tiny.yaml").read_text())
    assert data["model"]["revision"] == LLAMA_REVISION
    assert (tinyhub.repo_dir(world.hub, "kiln-tiny/llama") / "snapshots" / LLAMA_REVISION).is_dir()
    check = world.doit("check")
    assert check.returncode == 0, check.stdout + check.stderr


@heavy
def test_a_vision_language_checkpoint_gets_a_vlm_recipe_that_builds(tmp_path: Path) -> None:
    world = make_world(tmp_path, tmp_path / "hub", ())
    (world.root / "catalog").mkdir()
    for name in ("architectures.yaml", "rules.yaml"):
        shutil.copy(ROOT / "catalog" / name, world.root / "catalog")
    world.doit("new", "name=my-llava", f"model=kiln-tiny/llava@{LLAVA_REVISION}", check=True)
    data = yaml.safe_load((world.root / "recipes" / "my-llava.yaml").read_text())
    assert data["task"] == "image-text-to-text"
    assert data["validation"]["thresholds"] == "vlm-fp32"  # catalog/rules.yaml's vlm-gates
    assert data["validation"]["prompts"] == "images"
    build = world.doit("build", "recipe=my-llava")
    assert build.returncode == 0, build.stdout + build.stderr
    assert "my-llava: pass" in build.stdout
