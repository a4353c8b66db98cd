"""Which recipes a replay runs, and what each recipe's chain asks of a cluster.
Light: no builds, real catalogs on disk, real git."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from kiln import catalog as catalog_mod
from kiln.errors import KilnError
from kiln.replay.jobs import resources
from kiln.replay.ray_executor import _missing
from kiln.replay.select import changed_files, select, shard_of


def _catalog(root: Path, names: list[str]) -> catalog_mod.Catalog:
    for folder in ("thresholds", "prompts"):
        if not (root / folder).exists():
            shutil.copytree(ROOT / folder, root / folder)
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    for name in names:
        data = dict(base, tags=[name.split("-")[0]])
        (root / "recipes" / f"{name}.yaml").write_text(yaml.safe_dump(data))
    return catalog_mod.load(catalog_mod.Paths(root))


def _git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args],
        cwd=root,
        check=True,
        capture_output=True,
    )


def test_shards_partition_the_catalog_and_adding_a_recipe_moves_no_other(tmp_path: Path) -> None:
    names = [f"r{i:03d}" for i in range(60)]
    cat = _catalog(tmp_path, names)
    shards = [select(cat, shard=f"{i}/4") for i in range(4)]
    assert sorted(n for s in shards for n in s) == names
    assert all(shards), "every shard of 60 recipes gets some"
    grown = _catalog(tmp_path, ["zz-new"])
    after = [select(grown, shard=f"{i}/4") for i in range(4)]
    for before, now in zip(shards, after, strict=True):
        assert [n for n in now if n != "zz-new"] == before
    assert shard_of("zz-new", 4) == next(i for i, s in enumerate(after) if "zz-new" in s)


@pytest.mark.parametrize("bad", ["4/4", "-1/4", "1/0", "a/b", "1"])
def test_a_bad_shard_is_one_clear_error(tmp_path: Path, bad: str) -> None:
    cat = _catalog(tmp_path, ["a-1"])
    with pytest.raises(KilnError) as err:
        select(cat, shard=bad)
    assert "shard=" in str(err.value) and "Traceback" not in str(err.value)


def test_recipes_and_tags_filters_combine(tmp_path: Path) -> None:
    cat = _catalog(tmp_path, ["gpu-a", "gpu-b", "cpu-c"])
    assert select(cat, tags="gpu") == ["gpu-a", "gpu-b"]
    assert select(cat, recipes="cpu-c,gpu-a", tags="gpu") == ["gpu-a"]
    with pytest.raises(KilnError, match="did you mean 'cpu-c'"):
        select(cat, recipes="cpu-x")


def test_changed_since_follows_extends_thresholds_and_prompts(tmp_path: Path) -> None:
    cat = _catalog(tmp_path, ["base-a", "other-b"])
    (tmp_path / "recipes" / "child-c.yaml").write_text(
        yaml.safe_dump({"schema_version": 1, "extends": "base-a", "description": "a child"})
    )
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "base")
    cat = catalog_mod.load(catalog_mod.Paths(tmp_path))
    assert select(cat, changed_since="HEAD") == []

    parent = tmp_path / "recipes" / "base-a.yaml"
    parent.write_text(parent.read_text().replace("max_seq_len: 256", "max_seq_len: 128"))
    cat = catalog_mod.load(catalog_mod.Paths(tmp_path))
    assert changed_files(tmp_path, "HEAD") == {"recipes/base-a.yaml"}
    assert select(cat, changed_since="HEAD") == ["base-a", "child-c"]

    _git(tmp_path, "commit", "-qam", "parent")
    gates = tmp_path / "thresholds" / "fp32-exact.yaml"
    gates.write_text(gates.read_text() + "\n")
    assert select(cat, changed_since="HEAD") == ["base-a", "child-c", "other-b"]
    assert select(cat, changed_since="HEAD~1", shard="0/1", tags="other") == ["other-b"]

    _git(tmp_path, "checkout", "-q", "--", ".")
    (tmp_path / "recipes" / "new-d.yaml").write_text(parent.read_text())  # untracked
    cat = catalog_mod.load(catalog_mod.Paths(tmp_path))
    assert select(cat, changed_since="HEAD") == ["new-d"]


def test_a_recipe_depends_on_the_code_its_steps_import() -> None:
    from kiln.replay.select import recipe_files

    cat = catalog_mod.load(catalog_mod.Paths(ROOT))
    llama, bert = recipe_files(cat, "tiny-llama"), recipe_files(cat, "tiny-bert-classifier")
    assert {"builders/causal_lm/export.py", "builders/common/hf.py", "runtime/causal_lm.py"} < llama
    assert "builders/data/texts/eval.txt" in llama  # the reference reads it
    assert not any(f.startswith("builders/classify/") for f in llama)
    assert {"builders/classify/export.py", "builders/common/encoder.py"} < bert
    assert "builders/fetch.py" in llama & bert  # the shared step
    assert "builders/causal_lm/quantize.py" in recipe_files(cat, "tiny-llama-fp8")
    assert "builders/causal_lm/quantize.py" not in llama


def test_changed_since_an_unknown_revision_is_one_clear_error(tmp_path: Path) -> None:
    cat = _catalog(tmp_path, ["a-1"])
    _git(tmp_path, "init", "-q")
    with pytest.raises(KilnError, match="changed_since=origin/main"):
        select(cat, changed_since="no-such-rev")


def test_resources_follow_the_recipe_target_and_tensor_parallelism(tmp_path: Path) -> None:
    cat = _catalog(tmp_path, ["a-1"])
    cpu = cat.recipes["a-1"]
    assert resources(cpu).as_ray() == {"CPU": 1.0}
    gpu = cpu.model_copy(
        update={"build": cpu.build.model_copy(update={"target": "sm90", "tensor_parallel": 2})}
    )
    need = resources(gpu).as_ray()
    assert need == {"CPU": 1.0, "GPU": 2.0, "sm90": 2.0}
    # A cluster without such a node is named, instead of a task pending forever.
    assert _missing(need, {"CPU": 8.0, "GPU": 8.0, "sm80": 8.0}) == "sm90=2"
    assert _missing(need, {"CPU": 8.0, "GPU": 1.0, "sm90": 1.0}) == "GPU=2, sm90=2"
    assert _missing(need, {"CPU": 1.0, "GPU": 8.0, "sm90": 8.0}) == ""
