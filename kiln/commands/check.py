"""`doit check`: the catalog, its manifests and its rules, every problem at once.

A manifest must parse, belong to a recipe and carry keys that hash its lock; a
manifest whose lock no longer matches its recipe is stale (an error with
`strict=1`). Only recipes that have a manifest are planned.

A catalog that passed, and whose files, manifests, kiln's code (the planner's and
the builders' and runtime's in step keys) and the installed libraries have not
changed since, passes again without being loaded: its counts and what was stale are
cached (kiln/catalog/verdict.py). This module imports the loader only when it loads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from kiln.catalog import verdict
from kiln.errors import KilnError, Location, Problem
from kiln.evidence.stale import Stale
from kiln.evidence.stale import find as find_stale
from kiln.paths import ROOT, Paths

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


def _ok(counts: dict[str, int], manifests: int, stale: int) -> str:
    return (
        f"ok: {counts['recipes']} recipes, {counts['thresholds']} thresholds, "
        f"{counts['prompts']} prompt sets, {manifests} manifests, {counts['rules']} rules; "
        f"{stale} stale manifests"
    )


def _report(stale: list[Stale], verbose: bool) -> list[str]:
    """One line per stale manifest made on this kind of host; one line for all those
    recorded on GPU hosts this host cannot rebuild (unless `verbose`)."""
    from kiln import hostinfo

    here = hostinfo.gpu_name()
    elsewhere = [x for x in stale if x.gpu and x.gpu != here and not verbose]
    lines = []
    for x in stale:
        if x in elsewhere:
            continue
        lines.append(f"stale: manifests/{x.recipe}.json: {x.summary}; {x.verb}: {x.command}")
        if verbose:
            lines += [
                f"       {st['kind']} ({st['role']}): {'; '.join(st['reasons'])}" for st in x.steps
            ]
    if elsewhere:
        gpus = ", ".join(sorted({str(x.gpu) for x in elsewhere}))
        causes = ", ".join(sorted({x.cause for x in elsewhere}))
        names = elsewhere[0].recipe  # one, and a count: the line stays short
        names += f" and {len(elsewhere) - 1} more" if len(elsewhere) > 1 else ""
        lines.append(
            f"stale: {len(elsewhere)} manifests recorded on GPU hosts ({gpus}; by {causes}): "
            f"{names}; rebuild them there (verbose=1: why)"
        )
    return lines


def check(strict: bool, format: str = "text", verbose: bool = False) -> None:
    """Print what is stale and the counts (or one JSON document); KilnError with every
    problem found, errors first: nothing about staleness is printed then."""
    as_json = format == "json"
    paths = Paths.from_env()
    manifests = sorted(paths.manifests.glob("*.json"))
    from kiln.plan import toolchain  # what step keys hold: only a catalog with manifests

    code = [ROOT / package for package in toolchain.CODE_PACKAGES] if manifests else []
    inputs = verdict.inputs(paths, code, toolchain.installed() if manifests else ())
    cached = verdict.read(paths, inputs)
    if cached is not None:  # nothing it is a function of changed: no catalog is loaded
        counts, found = cached
        stale = [Stale(**x) for x in found]
        ok = _ok(counts, len(manifests), len(stale))
        _print(as_json, {**counts, "manifests": len(manifests)}, [], stale, ok, verbose)
        if stale and strict:
            raise KilnError.one(f"{len(stale)} stale manifests", None, "rebuild them")
        return
    from kiln.commands.workspace import catalog

    cat = catalog()
    problems = cat.all_problems()
    for path in manifests:
        problems.extend(manifest_problems(cat, path))
    counts = {
        "recipes": len(cat.recipes),
        "thresholds": len(cat.thresholds),
        "prompts": len(cat.prompts),
        "rules": len(cat.rules.table.rules) if cat.rules else 0,
    }
    if problems:
        _print(as_json, {**counts, "manifests": len(manifests)}, problems, [], "")
        raise KilnError(problems)
    stale = find_stale(cat, manifests) if manifests else []
    if not cat.local:  # a local checkpoint can change unseen
        verdict.write(paths, inputs, counts, [x.as_dict() for x in stale])
    ok = _ok(counts, len(manifests), len(stale))
    _print(as_json, {**counts, "manifests": len(manifests)}, [], stale, ok, verbose)
    if stale and strict:
        raise KilnError.one(f"{len(stale)} stale manifests", None, "rebuild them")


def _print(
    as_json: bool,
    counts: dict[str, int],
    problems: list[Problem],
    stale: list[Stale],
    ok: str,
    verbose: bool = False,
) -> None:
    if as_json:
        doc = {
            "ok": not problems,
            "counts": counts,
            "problems": [p.as_dict() for p in problems],
            "stale": [x.as_dict() for x in stale],
        }
        print(json.dumps(doc, indent=2))
        return
    for line in _report(stale, verbose):
        print(line)
    if ok:
        print(ok)
