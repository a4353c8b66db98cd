"""`doit diff base=REV`: real git repositories holding a copy of the catalog (recipes,
thresholds, prompts, the committed manifests and the code the step keys hash), edited
the way a PR edits them, compared in-process and through doit as a user runs it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, World, copy_code

from kiln.commands import diffing
from kiln.commands.diff import markdown
from kiln.evidence import manifest, review
from kiln.plan import plan, toolchain
from kiln.plan.step import Plan
from kiln.schema import Manifest, StepLock

COPIED = ("recipes", "thresholds", "prompts", "manifests", "catalog")  # and copy_code's


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], check=True, capture_output=True, text=True
    ).stdout


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The catalog and its code, committed once; each test copies the repository."""
    root = tmp_path_factory.mktemp("diff") / "repo"
    for folder in COPIED:
        shutil.copytree(ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    copy_code(root)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    return root


@pytest.fixture
def repo(template: Path, tmp_path: Path) -> World:
    root = tmp_path / "repo"
    shutil.copytree(template, root, symlinks=True)
    return World(root=root, hub=tmp_path / "hub", store=tmp_path / "store")


def edit(world: World, name: str, old: str, new: str) -> Path:
    """Replace one line of a recipe, as a one-line PR does."""
    path = world.root / "recipes" / f"{name}.yaml"
    text = path.read_text()
    assert text.count(old) == 1, (name, old)
    path.write_text(text.replace(old, new))
    return path


def compare(world: World) -> diffing.Report:
    return diffing.compare("HEAD", world.root, world.root)


def extending(name: str) -> set[str]:
    """Every shipped recipe that extends `name`, directly or through another."""
    parents = {
        p.stem: yaml.safe_load(p.read_text()).get("extends")
        for p in (ROOT / "recipes").glob("*.yaml")
    }
    out: set[str] = set()
    grew = True
    while grew:
        found = {c for c, parent in parents.items() if parent in out | {name}}
        grew, out = not found <= out, out | found
    return out


# ---------------------------------------------------------------- what is reported


def test_a_clean_tree_reports_nothing_and_exits_0(repo: World) -> None:
    report = compare(repo)
    assert report.recipes == [] and report.new_problems == []
    assert report.summary == {"added": 0, "changed": 0, "removed": 0, "invalid": 0}
    proc = repo.doit("diff", "base=HEAD")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "**0 added, 0 changed, 0 removed, 0 invalid**" in proc.stdout
    assert "### Changed" not in proc.stdout and "### New problems: 0" in proc.stdout


def test_a_one_line_edit_of_a_companion_recipe_reports_that_recipe(repo: World) -> None:
    edit(repo, "tiny-llama-draft", "  max_draft_len: 4\n", "  max_draft_len: 3\n")
    report = compare(repo)
    assert [(r.name, r.status) for r in report.recipes] == [("tiny-llama-draft", "changed")]
    r = report.recipes[0]
    assert [str(c) for c in r.fields] == ["execution.max_draft_len: 4 -> 3"]
    assert [(b.step.kind, b.step.role) for b in r.steps] == [
        ("bundle", "model"),
        ("validate", "model"),
    ]
    assert r.steps[0].reasons == ["options.speculative.max_draft_len: 4 -> 3"]
    assert r.steps[1].reasons == ["input bundle changed (bundle tiny-llama-draft)"]
    # The committed manifest's latest record stops counting, and its cell loses it.
    latest = Manifest.model_validate_json(
        (ROOT / "manifests" / "tiny-llama-draft.json").read_text()
    ).evidence[-1]
    [stale] = r.stale_evidence
    assert (stale.manifest, stale.record.verdict, stale.record.date) == (
        "manifests/tiny-llama-draft.json",
        latest.verdict,
        latest.date,
    )
    assert stale.host == ("gpu" if latest.host.gpu else "cpu") and not stale.already_stale
    assert [(str(c.cell), c.evidence) for c in r.loses] == [
        ("LlamaForCausalLM × fp32 × draft × onnxruntime", latest.verdict)
    ]
    assert r.gains == [] and report.new_problems == []

    proc = repo.doit("diff", "base=HEAD")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    md = proc.stdout
    assert "**0 added, 1 changed, 0 removed, 0 invalid**" in md
    assert md.count("### ") == 2  # the recipe and "New problems"
    assert "### Changed: `tiny-llama-draft`" in md
    assert "execution.max_draft_len: 4 -> 3" in md
    assert "Rebuilds 2 of 11 steps:" in md
    assert "- bundle (model) " in md and "options.speculative.max_draft_len: 4 -> 3" in md
    assert f"`manifests/tiny-llama-draft.json`: {latest.verdict} on {stale.host}" in md
    assert "`LlamaForCausalLM × fp32 × draft × onnxruntime` loses its" in md


def test_an_edit_of_the_companion_pin_rebuilds_the_companion_chain_only(repo: World) -> None:
    """The draft's fetch pairs with the draft's fetch, never with the model's."""
    edit(
        repo,
        "tiny-llama-draft",
        "revision: 8b5204fdf0e4cf24f5548e89b6ffaa67f5e7e6f1",
        "revision: abcdef0123456789abcdef0123456789abcdef01",
    )
    [r] = compare(repo).recipes
    assert r.status == "changed"
    assert [str(c) for c in r.fields] == [
        "companions.draft.revision: 8b5204fdf0e4cf24f5548e89b6ffaa67f5e7e6f1 -> "
        "abcdef0123456789abcdef0123456789abcdef01"
    ]
    rebuilt = [(b.step.kind, b.step.role) for b in r.steps]
    assert rebuilt == [
        ("fetch", "draft"),
        ("export", "draft"),
        ("onnx", "draft"),
        ("engine", "draft"),
        ("bundle", "model"),
        ("validate", "model"),
    ]
    assert r.steps[0].reasons == [
        "options.revision: 8b5204fdf0e4cf24f5548e89b6ffaa67f5e7e6f1 -> "
        "abcdef0123456789abcdef0123456789abcdef01"
    ]


def test_an_edit_of_a_parent_reports_it_and_the_recipes_that_extend_it(repo: World) -> None:
    edit(repo, "tiny-llama", "max_seq_len: 256", "max_seq_len: 128")
    report = compare(repo)
    children = extending("tiny-llama")
    assert children and {r.name for r in report.recipes} == {"tiny-llama", *children}
    for r in report.recipes:
        assert r.status == "changed" and r.file_changed == (r.name == "tiny-llama")
        assert "build.max_seq_len: 256 -> 128" in [str(c) for c in r.fields]
    md = " ".join(markdown(report).split())  # wrapped lines join again when rendered
    assert (
        "`recipes/tiny-llama-int8-wo.yaml` itself is unchanged: this comes from the recipe it "
        "extends (`tiny-llama`)."
    ) in md
    assert "`recipes/tiny-llama.yaml` itself is unchanged" not in md


def test_a_recipe_that_moves_cell_loses_its_evidence_there_and_gains_a_planned_entry(
    repo: World,
) -> None:
    edit(repo, "tiny-llama-int8-wo", "  weights: int8-wo\n", "  weights: int4-awq\n")
    edit(repo, "tiny-llama-int8-wo", "quantized-int8\n", "quantized-int4\n")  # its gates move too
    [r] = compare(repo).recipes
    assert [str(c) for c in r.fields] == [
        "precision.weights: int8-wo -> int4-awq",
        "validation.thresholds: quantized-int8 -> quantized-int4",
    ]
    assert [str(c.cell) for c in r.loses] == ["LlamaForCausalLM × int8-wo × ordinary × onnxruntime"]
    assert [(str(c.cell), c.evidence) for c in r.gains] == [
        ("LlamaForCausalLM × int4-awq × ordinary × onnxruntime", "planned")
    ]
    assert "gains a planned entry (tiny-llama-int8-wo)" in markdown(compare(repo))


def test_long_values_are_whole_and_wrapped(repo: World) -> None:
    words = " ".join(f"word{i}" for i in range(60))
    path = repo.root / "recipes" / "tiny-llama-ngram.yaml"
    data = yaml.safe_load(path.read_text())
    data["description"] = words
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    report = compare(repo)
    [r] = report.recipes
    assert [c.path for c in r.fields] == ["description"] and r.fields[0].new == words
    md = markdown(report)
    assert "..." not in md
    block = md[md.index("description:") : md.index("```", md.index("description:"))]
    assert max(len(line) for line in block.splitlines()) <= 100
    assert " ".join(block.split("new:")[1].split()) == words  # every word, in order


def test_yaml_notation_of_values() -> None:
    assert review.shown("fp32") == "fp32"
    assert review.shown("yes") == "'yes'"  # YAML 1.1 would read it as a bool
    assert review.shown(256) == "256" and review.shown(True) == "true"
    assert review.shown(None) == "null" and review.shown(review.UNSET) == "(unset)"
    assert review.shown(["tiny", "gpu"]) == "[tiny, gpu]"
    assert review.shown({"max_draft_len": 4}) == "{max_draft_len: 4}"
    assert [str(c) for c in review.changes({"a": {"b": 1}}, {"a": {"b": 1, "c": [2]}})] == [
        "a.c: (unset) -> [2]"
    ]
    assert [str(c) for c in review.changes({"x": 1}, {"x": True})] == ["x: 1 -> true"]


# ---------------------------------------------------------------- invalid, removed, added


def test_an_edit_that_makes_a_recipe_invalid_is_changed_now_invalid_and_fails(
    repo: World,
) -> None:
    path = edit(repo, "tiny-llama-draft", "  max_draft_len: 4\n", "  max_draft_len: 40\n")
    line = path.read_text().splitlines().index("  max_draft_len: 40") + 1
    report = compare(repo)
    [r] = report.recipes
    assert (r.name, r.status) == ("tiny-llama-draft", "changed (now invalid)")
    assert [str(c) for c in r.fields] == ["execution.max_draft_len: 4 -> 40"]
    where = f"recipes/tiny-llama-draft.yaml:{line}:"
    assert r.problems and all(p.render().startswith(where) for p in r.problems)
    assert [p.render() for p in report.new_problems] == [p.render() for p in r.problems]
    assert r.stale_evidence and r.loses  # the recipe's evidence counts nowhere now
    assert report.summary == {"added": 0, "changed": 0, "removed": 0, "invalid": 1}

    proc = repo.doit("diff", "base=HEAD")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    md = proc.stdout
    assert "### Changed (now invalid): `tiny-llama-draft`" in md and "Removed" not in md
    assert f"{where}" in md and "### New problems: 1" in md
    assert "the change adds 1 new problem" in md + proc.stderr


@pytest.mark.parametrize(
    ("old", "new", "rule", "wants"),
    [  # looser gates for a weaker precision, and the reverse: both refused (issue 43)
        ("  weights: int8-wo\n", "  weights: int4-awq\n", "int4-gates", "quantized-int4"),
        (
            "  thresholds: quantized-int8\n",
            "  thresholds: quantized-int4\n",
            "int8-gates",
            "quantized-int8",
        ),
    ],
)
def test_gates_that_do_not_fit_the_precision_are_a_new_problem(
    repo: World, old: str, new: str, rule: str, wants: str
) -> None:
    path = edit(repo, "tiny-llama-int8-wo", old, new)
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.startswith("  thresholds:"))
    report = compare(repo)
    [problem] = report.new_problems
    assert problem.render().startswith(f"recipes/tiny-llama-int8-wo.yaml:{line}:"), problem.render()
    assert f"rule {rule}:" in problem.cause and f"validation.thresholds: {wants}" in problem.fix
    check = repo.doit("check")
    assert check.returncode == 1 and f"rule {rule}" in check.stdout + check.stderr


def test_a_deleted_recipe_is_removed_and_exits_0(repo: World) -> None:
    assert not (repo.root / "manifests" / "real-phi-4.json").exists()
    (repo.root / "recipes" / "real-phi-4.yaml").unlink()
    report = compare(repo)
    assert [(r.name, r.status) for r in report.recipes] == [("real-phi-4", "removed")]
    proc = repo.doit("diff", "base=HEAD")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "**0 added, 0 changed, 1 removed, 0 invalid**" in proc.stdout
    assert "### Removed: `real-phi-4`" in proc.stdout


def test_a_deleted_recipe_with_its_manifest_loses_its_evidence(repo: World) -> None:
    (repo.root / "recipes" / "tiny-t5.yaml").unlink()
    (repo.root / "manifests" / "tiny-t5.json").unlink()
    [r] = compare(repo).recipes
    assert r.status == "removed" and r.stale_evidence and r.loses


def test_a_deleted_recipe_whose_manifest_stays_is_a_new_problem(repo: World) -> None:
    """`doit check` refuses a manifest without its recipe: so does the diff."""
    (repo.root / "recipes" / "tiny-t5.yaml").unlink()
    report = compare(repo)
    assert [r.status for r in report.recipes] == ["removed"]
    assert [p.render() for p in report.new_problems] == [
        "manifests/tiny-t5.json: no recipe of that name; delete the manifest"
    ]


def test_a_new_invalid_recipe_is_added_invalid_with_its_errors(repo: World) -> None:
    data = yaml.safe_load((ROOT / "recipes" / "tiny-llama.yaml").read_text())
    data["build"]["backend"] = "tensorrt"
    repo.write_recipe("tiny-new", data)
    report = compare(repo)
    [r] = report.recipes
    assert r.status == "added (invalid)" and r.problems
    assert "rule tensorrt-needs-gpu-target" in r.problems[0].render()
    assert r.problems[0].render().startswith("recipes/tiny-new.yaml:")
    assert "### Added (invalid): `tiny-new`" in markdown(report)


# ---------------------------------------------------------------- format=json


def test_format_json_is_one_document_with_the_same_content(repo: World) -> None:
    path = edit(repo, "tiny-llama-draft", "  max_draft_len: 4\n", "  max_draft_len: 40\n")
    edit(repo, "tiny-llama-ngram", "  max_draft_len: 4\n", "  max_draft_len: 3\n")
    proc = repo.doit("diff", "base=HEAD", "format=json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)  # stdout is the document alone: doit's lines are on stderr
    md = repo.doit("diff", "base=HEAD").stdout
    assert doc["base"] == "HEAD"
    recipes = len(list((repo.root / "recipes").glob("*.yaml")))
    assert doc["summary"] == {
        "added": 0,
        "changed": 1,
        "removed": 0,
        "invalid": 1,
        "buildable": recipes - 1,  # every recipe but the one made invalid
    }
    by_name = {r["name"]: r for r in doc["recipes"]}
    assert set(by_name) == {"tiny-llama-draft", "tiny-llama-ngram"}
    ngram, draft = by_name["tiny-llama-ngram"], by_name["tiny-llama-draft"]
    assert ngram["status"] == "changed" and draft["status"] == "changed (now invalid)"
    assert ngram["fields"] == [
        {
            "path": "execution.max_draft_len",
            "old": 4,
            "new": 3,
            "old_yaml": "4",
            "new_yaml": "3",
        }
    ]
    for step in ngram["steps"]:
        assert set(step) >= {"kind", "role", "key", "reasons"} and len(step["key"]) == 64
        assert f"- {step['kind']} ({step['role']}) `{step['key'][:12]}`" in md
        for reason in step["reasons"]:
            assert reason in md
    [stale] = ngram["stale_evidence"]
    assert stale["manifest"] == "manifests/tiny-llama-ngram.json" and stale["host"] in (
        "cpu",
        "gpu",
    )
    assert f"{stale['verdict']} on {stale['host']}" in md and stale["date"] in md
    [lost] = ngram["matrix"]["loses"]
    assert lost["cell"] == {
        "architecture": "LlamaForCausalLM",
        "precision": "fp32",
        "variant": "ngram",
        "backend": "onnxruntime",
    }
    line = path.read_text().splitlines().index("  max_draft_len: 40") + 1
    [problem] = doc["new_problems"]
    assert (problem["file"], problem["line"]) == ("recipes/tiny-llama-draft.yaml", line)
    assert problem["key_path"] and problem["text"] in md
    assert draft["problems"] == doc["new_problems"]


def test_an_unknown_format_lists_the_allowed_ones(repo: World) -> None:
    proc = repo.doit("diff", "base=HEAD", "format=xml")
    assert proc.returncode != 0
    assert "'xml' is not one of markdown, json" in proc.stdout + proc.stderr


# ---------------------------------------------------------------- locks and their roles


def _plan(name: str) -> tuple[Plan, Manifest]:
    from kiln import catalog

    cat = catalog.load(catalog.Paths(ROOT), save=False)
    recipe = cat.recipes[name]
    p = plan(name, recipe, cat.prompts[recipe.validation.prompts], toolchain.current())
    found = manifest.read(ROOT / "manifests" / f"{name}.json")
    assert found is not None
    return p, found


def test_staleness_pairs_by_role_whatever_the_order_of_the_lock(tmp_path: Path) -> None:
    p, found = _plan("tiny-llama-draft")
    steps = [StepLock(name=s.name, role=s.role, key=s.key, **s.material) for s in p.steps]
    fetches = [s for s in steps if s.kind == "fetch"]
    assert [s.role for s in fetches] == ["model", "draft"]
    reordered = [*reversed(fetches), *(s for s in steps if s.kind != "fetch")]
    lock = found.lock.model_copy(update={"steps": reordered})
    assert review.staleness(p, lock).steps == []
    # A lock written before roles: the role is read off the checkpoint each step cites.
    data = json.loads(
        Manifest(schema_version=1, recipe="x", lock=lock, evidence=[]).model_dump_json()
    )
    for s in data["lock"]["steps"]:
        del s["role"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(data))
    read = manifest.read(old)
    assert read is not None and [s.role for s in read.lock.steps][:2] == ["draft", "model"]
    assert review.staleness(p, read.lock).steps == []


def test_a_committed_lock_without_roles_still_loads_with_them() -> None:
    raw = json.loads((ROOT / "manifests" / "tiny-qwen3-lora.json").read_text())
    if any("role" in s for s in raw["lock"]["steps"]):
        pytest.skip("the committed manifest records roles already")
    Manifest.model_validate(raw)  # the schema still accepts it
    p, found = _plan("tiny-qwen3-lora")
    roles = {s.key: s.role for s in p.steps}
    locked = {s.key: s.role for s in found.lock.steps}
    assert "adapter" in locked.values()
    assert {k: r for k, r in locked.items() if k in roles} == {
        k: r for k, r in roles.items() if k in locked
    }
