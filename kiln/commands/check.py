"""`doit check`: the catalog, its manifests and its rules, every problem at once.

A manifest must parse, belong to a recipe and carry keys that hash its lock; a
manifest whose lock no longer matches its recipe is stale (an error with
`strict=1`). Only recipes that have a manifest are planned.
"""

from __future__ import annotations

from pathlib import Path

from kiln.canonical import key_of
from kiln.catalog import Catalog
from kiln.commands.workspace import catalog
from kiln.errors import KilnError, Location, Problem
from kiln.evidence import manifest


def manifest_problems(cat: Catalog, path: Path) -> list[Problem]:
    """A manifest must parse, belong to a recipe, and carry keys that match its lock."""
    file = cat.paths.rel(path)
    try:
        found = manifest.read(path, file)
    except KilnError as exc:
        return exc.problems
    problems = []
    if (
        found is not None
        and path.stem not in cat.recipes
        and cat.paths.rel(cat.paths.recipes / f"{path.stem}.yaml") not in cat.problems
    ):
        problems.append(Problem("no recipe of that name", Location(file), "delete the manifest"))
    for step in found.lock.steps if found else []:
        if key_of(step.material()) != step.key:
            problems.append(
                Problem(
                    f"lock step {step.name!r}: key {step.key[:12]} does not hash its inputs",
                    Location(file, key_path=("lock", "steps", step.kind)),
                    "the lock was edited by hand; rebuild the recipe to rewrite it",
                )
            )
    return problems


def check(strict: bool) -> None:
    """Print what is stale and the counts; KilnError with every problem found."""
    cat = catalog()
    problems = cat.all_problems()
    manifests = sorted(cat.paths.manifests.glob("*.json"))
    for path in manifests:
        problems.extend(manifest_problems(cat, path))
    stale = []
    if manifests:  # planning, and the toolchain's versions and digests, only then
        from kiln.commands import review
        from kiln.plan import toolchain

        stale = review.manifest_staleness(cat, toolchain.current())
    for s in stale:
        why = "; ".join(f"{step.kind} ({', '.join(reasons)})" for step, reasons in s.steps)
        print(f"stale: manifests/{s.recipe}.json: its lock no longer matches the recipe: {why}")
        print(f"       rebuild with: doit build recipe={s.recipe}")
    rules = len(cat.rules.table.rules) if cat.rules else 0
    counts = (
        f"{len(cat.recipes)} recipes, {len(cat.thresholds)} thresholds, "
        f"{len(cat.prompts)} prompt sets, {len(manifests)} manifests, {rules} rules"
    )
    if problems:
        raise KilnError(problems)
    if stale and strict:
        raise KilnError.one(f"{len(stale)} stale manifests", None, "rebuild them")
    print(f"ok: {counts}; {len(stale)} stale manifests")
