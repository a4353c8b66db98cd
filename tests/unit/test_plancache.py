"""The plan cache (kiln/commands/plancache.py), in-process.

A hit gives back exactly the plans planning gives; any change to what planning reads
is a miss; a catalog with a problem is never cached. What doit does with it (read-only
commands write no cache; a no-op `doit build` imports no catalog):
tests/func/test_plancache_doit.py."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import PLANNED, ROOT, World, new_process

from kiln import catalog
from kiln.commands import build, plancache, workspace
from kiln.paths import Paths
from kiln.plan import toolchain

RECIPES = PLANNED


@pytest.fixture
def world(planning_world: World) -> World:
    return planning_world


def _planned(world: World) -> list[build.Plan]:
    cat = catalog.load(Paths(world.root), cache=False)
    return [workspace.plan_in(cat, name) for name in sorted(cat.recipes)]


def test_a_hit_gives_back_the_plans_planning_gives(world: World) -> None:
    paths = Paths(world.root)
    assert plancache.lookup(paths, None) is None  # nothing cached yet
    build.targets(None)  # plans, and caches
    new_process()
    hit = plancache.lookup(paths, None)
    assert hit is not None
    cached, plans = hit
    assert plans == _planned(world)  # every step: options, inputs, material, key, origin
    assert cached.tags == {n: list(catalog.load(paths).recipe(n).tags) for n in RECIPES}
    one = plancache.lookup(paths, ["tiny-t5"])
    assert one is not None and one[1] == [p for p in plans if p.recipe == "tiny-t5"]
    assert plancache.lookup(paths, ["tiny-missing"]) is None


def test_a_step_whose_key_does_not_come_out_is_a_miss(world: World) -> None:
    build.targets(None)
    (path,) = (world.store / "cache" / "plans").glob("*.json")
    body = path.read_bytes().partition(b"\n")[2]
    entry = json.loads(body)
    key = next(iter(entry["steps"]))
    entry["steps"][key][4]["options"] = {"tampered": True}  # the material, not the key
    body = json.dumps(entry).encode()
    meta = {"format": plancache.FORMAT, "sha256": hashlib.sha256(body).hexdigest()}
    path.write_bytes(json.dumps(meta).encode() + b"\n" + body)
    new_process()
    assert plancache.lookup(Paths(world.root), None) is None


@pytest.mark.parametrize(
    "edit",
    ["recipe", "thresholds", "prompts", "new recipe", "folder named like a recipe"],
)
def test_a_change_to_what_planning_reads_is_a_miss(world: World, edit: str) -> None:
    paths = Paths(world.root)
    build.targets(None)
    new_process()
    assert plancache.lookup(paths, None) is not None
    if edit == "recipe":
        f = world.root / "recipes" / "tiny-llama.yaml"
        f.write_text(f.read_text().replace("max_seq_len: 256", "max_seq_len: 128"))
    elif edit == "thresholds":
        f = next((world.root / "thresholds").glob("*.yaml"))
        f.write_text(f.read_text() + "\n# edited\n")
    elif edit == "prompts":
        f = next((world.root / "prompts").glob("*.yaml"))
        f.write_text(f.read_text() + "\n# edited\n")
    elif edit == "new recipe":
        shutil.copy(ROOT / "recipes" / "tiny-mistral.yaml", world.root / "recipes")
    else:
        (world.root / "recipes" / "x.yaml").mkdir()
    new_process()
    assert plancache.lookup(paths, None) is None
    if edit == "recipe":  # and the build plans the edit
        planned = {p.recipe: p for p in build.targets(None).plans}
        assert planned["tiny-llama"] == {p.recipe: p for p in _planned(world)}["tiny-llama"]


def test_the_inputs_cover_the_code_and_the_versions(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    for folder in plancache.CODE:
        shutil.copytree(ROOT / folder, code / folder, ignore=shutil.ignore_patterns("__pycache__"))
    paths = Paths(world.root)
    keys = {plancache.inputs(paths, code)}
    edits = [
        code / "kiln" / "plan" / "__init__.py",  # the planner
        code / "builders" / "common" / "hf.py",  # a builder: in step keys
        code / "builders" / "data" / "texts" / "new.txt",  # a data file, added
        code / "catalog" / "rules.yaml",  # the default rules
    ]
    for f in edits:
        f.write_text((f.read_text() if f.exists() else "") + "\n# edited\n")
        plancache.inputs.cache_clear()
        keys.add(plancache.inputs(paths, code))
    installed = toolchain.installed()  # an upgrade renames a distribution's metadata folder
    monkeypatch.setattr(toolchain, "installed", lambda: (*installed, "pyyaml-9.9.dist-info"))
    plancache.inputs.cache_clear()
    keys.add(plancache.inputs(paths, code))
    assert len(keys) == len(edits) + 2


def test_a_catalog_with_a_problem_is_never_cached(world: World) -> None:
    (world.root / "recipes" / "broken.yaml").write_text("schema_version: 1\nmodel: [unclosed\n")
    out = build.targets(None)
    assert [name for name, _ in out.failures] == ["catalog"]
    assert not (world.store / "cache" / "plans").exists()
