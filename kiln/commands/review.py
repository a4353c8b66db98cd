"""What a change does: why a step is stale, which locks it invalidates, what a PR changes.

Everything here compares step *materials* (what a key hashes): the plan's against
the manifest's lock, or a base catalog's against the working tree's. A change is
explained by the first field that differs: an option, an input step, a library
version or the builder's code.
"""

from __future__ import annotations

import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kiln import catalog as catalog_mod
from kiln.errors import KilnError, Problem
from kiln.evidence import manifest
from kiln.paths import Paths
from kiln.plan import plan
from kiln.plan.step import Plan, Step
from kiln.plan.toolchain import Toolchain, current
from kiln.schema import Lock, StepLock


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def explain(new: dict[str, Any], old: dict[str, Any] | None) -> list[str]:
    """Why `new` material differs from `old`, one reason per changed field."""
    if old is None:
        return ["new step"]
    reasons = []
    for key in sorted(set(new["options"]) | set(old["options"])):
        a, b = old["options"].get(key), new["options"].get(key)
        if a != b:
            reasons.append(f"options.{key}: {_short(a)} -> {_short(b)}")
    for role in sorted(set(new["inputs"]) | set(old["inputs"])):
        if new["inputs"].get(role) != old["inputs"].get(role):
            reasons.append(f"input {role} changed")
    for lib in sorted(set(new["libraries"]) | set(old["libraries"])):
        a, b = old["libraries"].get(lib), new["libraries"].get(lib)
        if a != b:
            reasons.append(f"{lib} {a} -> {b}")
    if new["code"] != old["code"]:
        reasons.append(f"builder code for {new['kind']} changed")
    return reasons


def comparable(step: Step, locked: StepLock | None) -> dict[str, Any]:
    """The step's material, with libraries this machine lacks taken from the lock:
    a machine without the build extra can still tell what a recipe edit changes."""
    material = dict(step.material)
    if locked is not None:
        material["libraries"] = {
            lib: locked.libraries.get(lib, v) if v == "absent" else v
            for lib, v in step.material["libraries"].items()
        }
    return material


@dataclass
class Staleness:
    recipe: str
    steps: list[tuple[Step, list[str]]] = field(default_factory=list)  # stale steps + why

    @property
    def stale(self) -> bool:
        return bool(self.steps)


def staleness(p: Plan, lock: Lock | None) -> Staleness:
    """Which of the plan's steps the lock does not cover, and why."""
    out = Staleness(p.recipe)
    # A plan may hold several steps of one kind (a companion's own fetch and export):
    # the n-th step of a kind is compared with the lock's n-th step of that kind.
    by_kind: dict[str, list[StepLock]] = {}
    for locked_step in lock.steps if lock else []:
        by_kind.setdefault(locked_step.kind, []).append(locked_step)
    seen: dict[str, int] = {}
    for step in p.steps:
        n = seen[step.kind] = seen.get(step.kind, -1) + 1
        same_kind = by_kind.get(step.kind, [])
        locked = same_kind[n] if n < len(same_kind) else None
        material = comparable(step, locked)
        if locked is None or locked.material() != material:
            out.steps.append((step, explain(material, locked.material() if locked else None)))
    return out


def manifest_staleness(cat: catalog_mod.Catalog, tools: Toolchain) -> list[Staleness]:
    """Every committed manifest whose lock no longer matches its recipe. Only recipes
    that have a manifest are planned: a catalog of new recipes costs nothing here."""
    out = []
    present = {p.stem for p in cat.paths.manifests.glob("*.json")}
    for name, recipe in sorted(cat.recipes.items()):
        if name not in present:
            continue
        path = cat.paths.manifest(name)
        try:
            found = manifest.read(path, cat.paths.rel(path))
            if found is None:
                continue
            p = plan(name, recipe, cat.prompts[recipe.validation.prompts], tools)
        except KilnError:
            continue  # reported elsewhere: an invalid manifest, an unbuildable recipe
        s = staleness(p, found.lock)
        if s.stale:
            out.append(s)
    return out


# ---------------------------------------------------------------- doit diff base=REV


@contextmanager
def checkout(rev: str, repo: Path) -> Iterator[Path]:
    """The tree at `rev`, unpacked into a temp dir (git archive; nothing is touched)."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", rev],
            capture_output=True,
            check=True,
        ).stdout
    except subprocess.CalledProcessError as exc:
        raise KilnError.one(
            f"cannot read revision {rev!r}: {exc.stderr.decode().strip()}",
            None,
            "name a commit, branch or tag of this repository, e.g. base=origin/main",
        ) from None
    with tempfile.TemporaryDirectory(prefix="kiln-base-") as tmp:
        import io

        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


@dataclass
class Side:
    catalog: catalog_mod.Catalog
    plans: dict[str, Plan]
    problems: list[Problem]


def side(root: Path, tools: Toolchain, cache: bool = True) -> Side:
    """One side of a diff; `cache` off for a throwaway checkout (nothing to reuse)."""
    cat = catalog_mod.load(Paths(root), cache=cache)
    plans, problems = {}, cat.all_problems()
    for name, recipe in cat.recipes.items():
        try:
            plans[name] = plan(name, recipe, cat.prompts[recipe.validation.prompts], tools)
        except KilnError as exc:
            problems.extend(exc.problems)
    return Side(cat, plans, problems)


def _problem_ids(problems: list[Problem]) -> dict[str, Problem]:
    def ident(p: Problem) -> str:
        where = p.location
        path = ".".join(map(str, where.key_path)) if where else ""
        return f"{where.file if where else ''}|{path}|{p.cause}"

    return {ident(p): p for p in problems}


def diff(rev: str, repo: Path, head_root: Path) -> str:
    """Markdown for a PR comment: what changes between `rev` and the working tree."""
    versions = current().versions
    head_tools = Toolchain(versions, head_root)
    with checkout(rev, repo) as base_root:  # planned inside: the digests read its files
        base = side(base_root, Toolchain(versions, base_root), cache=False)
    head = side(head_root, head_tools)
    return render(rev, base, head, head_tools)


def render(rev: str, base: Side, head: Side, tools: Toolchain) -> str:
    added = sorted(set(head.plans) - set(base.plans))
    removed = sorted(set(base.plans) - set(head.plans))
    changed = {}
    for name in sorted(set(head.plans) & set(base.plans)):
        old = {s.kind: s for s in base.plans[name].steps}
        steps = [
            (s, explain(s.material, old[s.kind].material if s.kind in old else None))
            for s in head.plans[name].steps
            if s.kind not in old or old[s.kind].key != s.key
        ]
        if steps:
            changed[name] = steps
    lines = [f"## kiln diff: `{rev}` → working tree", ""]
    lines.append(
        f"**{len(added)} added, {len(changed)} changed, {len(removed)} removed** "
        f"(of {len(head.plans)} buildable recipes)."
    )
    existing = {s.key for p in base.plans.values() for s in p.steps}
    for name in added:
        planned = head.plans[name].steps
        new = [s.kind for s in planned if s.key not in existing]
        lines += [
            "",
            f"### Added: `{name}`",
            "",
            f"Builds {', '.join(new) or 'nothing new'}"
            f" ({len(planned) - len(new)} of {len(planned)} steps already exist).",
        ]
    for name, steps in changed.items():
        lines += [
            "",
            f"### Changed: `{name}`",
            "",
            "| step | key | why it rebuilds |",
            "|---|---|---|",
        ]
        for s, why in steps:
            lines.append(f"| {s.kind} | `{s.key[:12]}` | {'; '.join(why)} |")
    for name in removed:
        lines += ["", f"### Removed: `{name}`"]
    stale = [
        s
        for s in manifest_staleness(head.catalog, tools)
        if s.recipe in changed or s.recipe in added
    ]
    if stale:
        lines += ["", "### Manifests whose lock becomes stale", ""]
        lines += [
            f"- `manifests/{s.recipe}.json`: rebuild with `doit build recipe={s.recipe}`"
            for s in stale
        ]
    new_problems = [
        p for k, p in _problem_ids(head.problems).items() if k not in _problem_ids(base.problems)
    ]
    lines += ["", f"### New problems: {len(new_problems)}", ""]
    lines += [f"```\n{p.render()}\n```" for p in new_problems] or ["None."]
    return "\n".join(lines) + "\n"
