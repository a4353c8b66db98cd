"""`doit check`: the catalog, its manifests and its rules, every problem at once.

A manifest must parse, belong to a recipe and carry keys that hash its lock; a
manifest whose lock no longer matches its recipe is stale (an error with
`strict=1`). Only recipes that have a manifest are planned.

A catalog with no manifests that passed, and whose files, kiln's code and the
libraries have not changed since, passes again without being loaded: its counts
are cached (kiln/catalog/verdict.py). This module imports the loader only when it
loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kiln.catalog import verdict
from kiln.errors import KilnError, Location, Problem
from kiln.paths import Paths

if TYPE_CHECKING:
    from kiln.catalog import Catalog


def manifest_problems(cat: Catalog, path: Path) -> list[Problem]:
    """A manifest must parse, belong to a recipe, and carry keys that match its lock."""
    from kiln.canonical import key_of
    from kiln.evidence import manifest

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


def regated(cat: Catalog, manifests: list[Path]) -> list[tuple[str, str]]:
    """(recipe, why) for each manifest whose latest verdict was judged under other
    gates than its recipe's thresholds file holds now (kiln/evidence/gates.py)."""
    from kiln.evidence import gates, manifest

    out = []
    for path in manifests:
        recipe = cat.recipes.get(path.stem)
        try:
            found = manifest.read(path)
        except KilnError:
            continue  # reported by manifest_problems
        if recipe is None or found is None or not found.evidence:
            continue
        latest = found.evidence[-1]
        which = recipe.validation.thresholds
        now = gates.ref(which, cat.thresholds[which])
        if latest.thresholds == now:
            continue
        if latest.thresholds is None:
            why = f"its {latest.verdict} of {latest.date[:10]} names no gates"
        elif latest.thresholds.name != which:
            why = (
                f"its {latest.verdict} of {latest.date[:10]} was judged under "
                f"thresholds/{latest.thresholds.name}.yaml; the recipe names {which}"
            )
        else:
            why = (
                f"its {latest.verdict} of {latest.date[:10]} was judged under other gates: "
                f"thresholds/{which}.yaml changed since"
            )
        out.append((path.stem, why))
    return out


def _ok(counts: dict[str, int], manifests: int, stale: int) -> str:
    return (
        f"ok: {counts['recipes']} recipes, {counts['thresholds']} thresholds, "
        f"{counts['prompts']} prompt sets, {manifests} manifests, {counts['rules']} rules; "
        f"{stale} stale manifests"
    )


def check(strict: bool) -> None:
    """Print what is stale and the counts; KilnError with every problem found."""
    paths = Paths.from_env()
    manifests = sorted(paths.manifests.glob("*.json"))
    inputs = None
    if not manifests:  # the verdict covers the catalog; manifests are checked anew
        inputs = verdict.inputs(paths)
        cached = verdict.read(paths, inputs)
        if cached is not None:
            print(_ok(cached, 0, 0))
            return
    from kiln.commands.workspace import catalog

    cat = catalog()
    problems = cat.all_problems()
    for path in manifests:
        problems.extend(manifest_problems(cat, path))
    stale = []
    if manifests:  # planning, and the toolchain's versions and digests, only then
        from kiln.commands import review
        from kiln.plan import toolchain

        stale = review.manifest_staleness(cat, toolchain.current())
    rejudge = regated(cat, manifests)
    for name, why in rejudge:
        print(f"stale: manifests/{name}.json: {why}")
        print(f"       re-judge with: doit build recipe={name}")
    for s in stale:
        why = "; ".join(f"{step.kind} ({', '.join(reasons)})" for step, reasons in s.steps)
        print(f"stale: manifests/{s.recipe}.json: its lock no longer matches the recipe: {why}")
        print(f"       rebuild with: doit build recipe={s.recipe}")
    counts = {
        "recipes": len(cat.recipes),
        "thresholds": len(cat.thresholds),
        "prompts": len(cat.prompts),
        "rules": len(cat.rules.table.rules) if cat.rules else 0,
    }
    if problems:
        raise KilnError(problems)
    count = len({s.recipe for s in stale} | {name for name, _ in rejudge})
    if count and strict:
        raise KilnError.one(f"{count} stale manifests", None, "rebuild them")
    if inputs is not None:
        verdict.write(paths, inputs, counts)
    print(_ok(counts, len(manifests), count))
