"""The cached verdict of `doit check` (kiln/catalog/verdict.py): a clean, unchanged
catalog passes again without being loaded; any change to a file, to the set of
files, or to the code loads and judges it again, with the loader's own problems."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from kiln import catalog
from kiln.catalog import verdict
from kiln.commands import check, workspace
from kiln.errors import KilnError

GOOD = (ROOT / "recipes" / "tiny-llama.yaml").read_text()
RULES = len(yaml.safe_load((ROOT / "catalog" / "rules.yaml").read_text())["rules"])
OK = (
    "ok: 2 recipes, {t} thresholds, {p} prompt sets, 0 manifests, "
    + f"{RULES} rules; 0 stale manifests"
)


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "catalog"
    for folder in ("thresholds", "prompts"):
        shutil.copytree(ROOT / folder, root / folder)
    (root / "recipes").mkdir()
    (root / "manifests").mkdir()
    (root / "recipes" / "a.yaml").write_text(GOOD)
    (root / "recipes" / "b.yaml").write_text("schema_version: 1\nextends: a\n")
    monkeypatch.setenv("KILN_ROOT", str(root))
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    workspace._catalog.cache_clear()
    return root


def run(capsys: pytest.CaptureFixture[str]) -> tuple[str, bool]:
    """(what check printed, whether it loaded the catalog)."""
    workspace._catalog.cache_clear()
    check.check(False)
    return capsys.readouterr().out.strip(), workspace._catalog.cache_info().currsize == 1


def verdicts(root: Path) -> list[Path]:
    return sorted((root.parent / "store" / "cache" / "verdict").glob("*.json"))


def expected(root: Path) -> str:
    count = {f: len([*(root / f).glob("*.yaml")]) for f in ("thresholds", "prompts")}
    return OK.format(t=count["thresholds"], p=count["prompts"])


def test_a_fresh_catalog_records_no_verdict(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Files written this second may be edited again in the same clock tick, unseen by
    their stat: nothing is recorded until they are RACY_NS old."""
    assert run(capsys) == (expected(root), True)
    assert verdicts(root) == []
    assert verdict.inputs(catalog.Paths(root)).racy
    assert run(capsys) == (expected(root), True)


def test_an_unchanged_clean_catalog_passes_from_its_verdict(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verdict, "RACY_NS", 0)  # as if every file were old
    assert run(capsys) == (expected(root), True)
    assert len(verdicts(root)) == 1
    assert run(capsys) == (expected(root), False)  # not loaded: the same line

    # A same-size edit that breaks a recipe: loaded, and the loader's own problems.
    recipe = root / "recipes" / "a.yaml"
    broken = GOOD.replace("max_seq_len: 256", "max_seq_len: 2x6")
    assert len(broken) == len(GOOD)
    recipe.write_text(broken)
    with pytest.raises(KilnError) as failed:
        run(capsys)
    fresh = catalog.load(catalog.Paths(root), cache=False, save=False).all_problems()
    assert failed.value.problems == fresh and "max_seq_len" in str(failed.value)
    with pytest.raises(KilnError):  # a failing catalog is never recorded: judged again
        run(capsys)

    recipe.write_text(GOOD)
    assert run(capsys) == (expected(root), True)
    assert run(capsys) == (expected(root), False)

    # The set of files: one more, one fewer, a directory where a recipe was.
    (root / "recipes" / "c.yaml").write_text("schema_version: 1\nextends: a\n")
    assert run(capsys)[1] is True
    (root / "recipes" / "c.yaml").unlink()
    assert run(capsys) == (expected(root), True)
    (root / "thresholds" / "extra.yaml").write_bytes(
        (root / "thresholds" / "fp32-exact.yaml").read_bytes()
    )
    assert run(capsys) == (expected(root), True)
    (root / "thresholds" / "extra.yaml").unlink()
    (root / "recipes" / "b.yaml").unlink()
    (root / "recipes" / "b.yaml").mkdir()
    with pytest.raises(KilnError, match=r"recipes/b.yaml:1: is not a regular file"):
        run(capsys)
    (root / "recipes" / "b.yaml").rmdir()

    # Rules of its own: judged by them.
    (root / "recipes" / "b.yaml").write_text("schema_version: 1\nextends: a\n")
    assert run(capsys) == (expected(root), True)
    (root / "catalog").mkdir()
    rules = (ROOT / "catalog" / "rules.yaml").read_text()
    (root / "catalog" / "rules.yaml").write_text(
        rules.replace("remote_code: []", "remote_code: [x]")
    )
    assert run(capsys) == (expected(root), True)
    assert run(capsys) == (expected(root), False)


def test_a_manifest_is_always_checked(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verdict, "RACY_NS", 0)
    assert run(capsys) == (expected(root), True)
    assert run(capsys)[1] is False
    (root / "manifests" / "a.json").write_text("{not json")
    with pytest.raises(KilnError, match=r"manifests/a.json:1:2: invalid JSON"):
        run(capsys)


def test_the_key_follows_the_code_and_every_input(tmp_path: Path) -> None:
    """A .py file that changes (same size even) changes the key; so does the listing."""
    code = tmp_path / "code"
    (code / "sub").mkdir(parents=True)
    (code / "sub" / "m.py").write_text("x = 1\n")
    (code / "n.txt").write_text("not code\n")
    since = 0

    def key() -> list[object]:
        out: list[object] = []
        verdict._tree(str(code), since, out)
        return out

    before = key()
    (code / "sub" / "m.py").write_text("x = 2\n")
    assert key() != before
    after = key()
    (code / "n.txt").write_text("still not code\n")
    assert key() == after
    (code / "sub" / "o.py").write_text("")
    assert key() != after
    os.utime(code / "sub" / "m.py", ns=(0, 0))  # an mtime set back: its ctime moves on
    assert key() != after


def test_a_catalog_with_manifests_passes_from_its_verdict_with_what_was_stale(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43: the shipped catalog's check (83 manifests) is answered from its
    verdict while nothing it is a function of changed, stale lines included; an edited
    manifest, or a changed file of the code in step keys, judges it again."""
    root = tmp_path / "catalog"
    for folder in ("recipes", "thresholds", "prompts", "manifests"):
        shutil.copytree(ROOT / folder, root / folder)
    monkeypatch.setenv("KILN_ROOT", str(root))
    monkeypatch.setenv("KILN_STORE", str(tmp_path / "store"))
    monkeypatch.setattr(verdict, "RACY_NS", 0)
    first, loaded = run(capsys)
    assert loaded and "stale manifests" in first
    assert run(capsys) == (first, False)  # the same lines, stale ones too, not loaded
    manifest = root / "manifests" / "tiny-llama.json"
    manifest.write_text(manifest.read_text().replace('"pass"', '"quality-fail"', 1))
    assert run(capsys)[1] is True
    paths = catalog.Paths(root)
    code = [tmp_path / "code"]
    (code[0]).mkdir()
    (code[0] / "x.py").write_text("x = 1\n")
    before = verdict.inputs(paths, code, ("a-1.dist-info",)).key
    (code[0] / "x.py").write_text("x = 2\n")
    assert verdict.inputs(paths, code, ("a-1.dist-info",)).key != before
    assert verdict.inputs(paths, code, ("a-2.dist-info",)).key != before
