"""What a change does to the catalog, recipe by recipe: `doit diff base=REV`'s comparison.

The base revision is unpacked with `git archive` (nothing in the repository is
touched); both trees are loaded, checked and planned by the working tree's kiln,
each with its own builders' code digests. A recipe is listed when anything about it
differs; per recipe (`RecipeChange`):

  status          added, added (invalid), changed, changed (now invalid),
                  changed (now valid), removed. Invalid: the recipe does not load or
                  does not plan. A file that is still there is never "removed".
  fields          resolved recipe values (extends applied) that differ: path, old, new
  steps           the steps that rebuild, paired with the base's by (kind, role), and why
  stale_evidence  the manifest's latest record, when the change makes its lock stale
  gains/loses     support-matrix cells (kiln/evidence/cells.py) that gain a planned entry
                  (a recipe moving into a cell) or lose the recipe's evidence
  problems        the recipe's located errors now

`new_problems` are those present now and not at base, matched by file, key path and
cause (not line: an edit above a problem moves it). They are what `doit check` would
newly report, manifests included, and what fails the diff (kiln/commands/diff.py).
kiln/commands/diff.py prints a Report as Markdown or JSON.
"""

from __future__ import annotations

import io
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kiln import catalog as catalog_mod
from kiln import proc
from kiln.catalog.yaml import read_source
from kiln.commands.check import manifest_problems
from kiln.commands.workspace import located
from kiln.errors import KilnError, Location, Problem
from kiln.evidence import cells, manifest, review
from kiln.paths import Paths
from kiln.plan import plan
from kiln.plan.step import Plan, Step
from kiln.plan.toolchain import Toolchain, current
from kiln.schema import Evidence, Manifest


@contextmanager
def checkout(rev: str, repo: Path) -> Iterator[Path]:
    """The tree at `rev`, unpacked into a temp dir (git archive; nothing is touched).
    `rev` is resolved to a tree id first (kiln.proc): only the id reaches git archive."""
    try:
        tree = proc.git_object(repo, rev, "tree")
        archive = proc.run_bytes(
            ["git", "-C", str(repo), "archive", "--format=tar", tree], timeout=300
        )
    except proc.Refused as exc:
        raise KilnError.one(
            str(exc),
            Location("command line", key_path=("base",)),
            "name a commit, branch or tag of this repository, e.g. base=origin/main",
        ) from None
    with tempfile.TemporaryDirectory(prefix="kiln-base-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp)


# ---------------------------------------------------------------- one side of the diff


@dataclass
class Side:
    catalog: catalog_mod.Catalog
    plans: dict[str, Plan]  # every recipe that loads and plans
    problems: list[Problem]  # everything `doit check` reports, and what does not plan
    files: set[str]  # every recipe with a file in recipes/, valid or not
    errors: dict[str, list[Problem]]  # recipe -> its problems (its file's, its plan's)
    _manifests: dict[str, Manifest | None] = field(default_factory=dict)

    def manifest(self, name: str) -> Manifest | None:
        """The recipe's manifest, or None (absent or invalid: `doit check` says which)."""
        if name not in self._manifests:
            try:
                self._manifests[name] = manifest.read(self.catalog.paths.manifest(name))
            except KilnError:
                self._manifests[name] = None
        return self._manifests[name]

    def data(self, name: str, written: bool) -> Any:
        """The recipe's resolved values: the model's (defaults filled in) or, `written`,
        as its files write them (extends applied), for a recipe that does not validate;
        None when a file of its extends chain does not read as a mapping."""
        if not written:
            return self.catalog.recipes[name].model_dump(mode="json", by_alias=True)
        chain: list[dict[str, Any]] = []
        link: Any = name
        while link is not None:
            raw = self.own(link)
            if raw is None or len(chain) > catalog_mod.MAX_EXTENDS or any(raw is c for c in chain):
                return None  # `extends` names what does not read, a cycle, too deep a chain
            chain.append(raw)
            link = raw.get("extends")
        merged: dict[str, Any] = {}
        for raw in reversed(chain):
            own = {k: v for k, v in raw.items() if k != "extends"}
            merged = catalog_mod.deep_merge(merged, own)
        return {"extends": chain[0].get("extends"), **merged}

    def own(self, name: Any) -> dict[str, Any] | None:
        """The recipe file's own mapping, as written (None: it does not read as one)."""
        raw = self._raw.get(name, (None, None))[1] if isinstance(name, str) else None
        return raw if isinstance(raw, dict) else None

    def text(self, name: str) -> str | None:
        """The recipe file's text (None: it cannot be read as a recipe)."""
        chain = self.catalog.sources.get(name)
        return chain[0].text if chain else self._raw.get(name, (None, None))[0]

    @cached_property
    def _raw(self) -> dict[str, tuple[str, Any]]:
        """name -> (text, data) of every recipe file that reads as YAML, read with the
        recipe loader's guards (a hostile file is an error, never a hang)."""
        out = {}
        for name in self.files:
            path = self.catalog.paths.recipes / f"{name}.yaml"
            try:
                source, data = read_source(path, self.catalog.paths.rel(path))
            except (KilnError, OSError):
                continue
            out[name] = (source.text, data)
        return out


def side(root: Path, tools: Toolchain, cache: bool = True) -> Side:
    """One side of a diff; `cache` off for a throwaway checkout (nothing to reuse)."""
    cat = catalog_mod.load(Paths(root), cache=cache, save=cache)
    plans: dict[str, Plan] = {}
    errors: dict[str, list[Problem]] = {}
    problems = cat.all_problems()
    files = (
        {p.stem for p in cat.paths.recipes.glob("*.yaml")} if cat.paths.recipes.is_dir() else set()
    )
    for name in files:
        file = cat.paths.rel(cat.paths.recipes / f"{name}.yaml")
        if file in cat.problems:
            errors[name] = list(cat.problems[file])
    for name, recipe in cat.recipes.items():
        try:
            plans[name] = plan(name, recipe, cat.prompts[recipe.validation.prompts], tools)
        except KilnError as exc:
            pinned = located(exc, name, cat=cat).problems
            errors.setdefault(name, []).extend(pinned)
            problems.extend(pinned)
    for path in sorted(cat.paths.manifests.glob("*.json")):
        found = manifest_problems(cat, path)
        problems.extend(found)
        if found and path.stem in files:
            errors.setdefault(path.stem, []).extend(found)
    return Side(cat, plans, problems, files, errors)


def problem_id(p: Problem) -> str:
    """What makes a problem the same one on both sides: file, key path and cause."""
    where = p.location
    path = ".".join(map(str, where.key_path)) if where else ""
    return f"{where.file if where else ''}|{path}|{p.cause}"


# ---------------------------------------------------------------- what changes


@dataclass(frozen=True)
class Rebuild:
    step: Step
    reasons: list[str]
    shared_with: str | None = None  # a base recipe that already plans this exact key


@dataclass(frozen=True)
class StaleEvidence:
    manifest: str  # manifests/<recipe>.json
    record: Evidence  # its latest record
    already_stale: bool  # the lock did not match the base's plan either

    @property
    def host(self) -> str:
        return "gpu" if self.record.host.gpu else "cpu"

    @property
    def device(self) -> str:
        return self.record.host.gpu or self.record.host.cpu


@dataclass(frozen=True)
class CellEntry:
    cell: cells.CellKey
    recipe: str
    evidence: str  # a verdict, or "planned" (not measured yet)


@dataclass
class RecipeChange:
    name: str
    status: str
    file_changed: bool = True  # False: only what it extends or its steps read changed
    extends: str | None = None  # its parent now
    fields: list[review.Change] = field(default_factory=list)
    steps: list[Rebuild] = field(default_factory=list)
    total_steps: int = 0  # steps of the recipe's plan now (0 when it does not plan)
    stale_evidence: list[StaleEvidence] = field(default_factory=list)
    gains: list[CellEntry] = field(default_factory=list)
    loses: list[CellEntry] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def invalid(self) -> bool:
        return self.status in (
            "added (invalid)",
            "changed (now invalid)",
            "changed (still invalid)",
        )


@dataclass
class Report:
    base: str
    recipes: list[RecipeChange]
    new_problems: list[Problem]
    buildable: int  # recipes that load and plan in the working tree

    def count(self, kind: str) -> int:
        """added, changed, removed (the valid ones) or invalid (added or changed, invalid now)."""
        if kind == "invalid":
            return sum(r.invalid for r in self.recipes)
        return sum(r.status.startswith(kind) and not r.invalid for r in self.recipes)

    @property
    def summary(self) -> dict[str, int]:
        return {k: self.count(k) for k in ("added", "changed", "removed", "invalid")}


def compare(rev: str, repo: Path, head_root: Path) -> Report:
    """What changes between `rev` of `repo` and the working tree at `head_root`."""
    versions = current().versions  # one environment: the two sides share its versions
    with checkout(rev, repo) as base_root:  # planned inside: the digests read its files
        base = side(base_root, Toolchain(versions, base_root), cache=False)
        head = side(head_root, Toolchain(versions, head_root))
        known: dict[str, list[str]] = {}  # step key -> the base recipes that plan it
        for name, planned in sorted(base.plans.items()):
            for s in planned.steps:
                known.setdefault(s.key, []).append(name)
        recipes = [
            change
            for name in sorted(base.files | head.files)
            if (change := _recipe(name, base, head, known)) is not None
        ]
    old = {problem_id(p) for p in base.problems}
    seen: set[str] = set()
    new_problems = []
    for p in head.problems:
        ident = problem_id(p)
        if ident not in old and ident not in seen:
            seen.add(ident)
            new_problems.append(p)
    return Report(rev, recipes, new_problems, len(head.plans))


def _recipe(name: str, base: Side, head: Side, known: dict[str, list[str]]) -> RecipeChange | None:
    was, now = name in base.plans, name in head.plans
    if name not in head.files:
        status = "removed"
    elif name not in base.files:
        status = "added" if now else "added (invalid)"
    elif was and now:
        status = "changed"
    elif was:
        status = "changed (now invalid)"
    else:
        status = "changed (now valid)" if now else "changed (still invalid)"
    change = RecipeChange(name, status, problems=head.errors.get(name, []) if not now else [])
    parent = (head.own(name) or {}).get("extends")
    change.extends = parent if isinstance(parent, str) else None
    if name in base.files and name in head.files:
        text = head.text(name)
        change.file_changed = text is None or text != base.text(name)
        written = not (was and now)
        old, new = base.data(name, written), head.data(name, written)
        if old is None or new is None:  # a chain that does not read: the file's own edit
            old, new = base.own(name), head.own(name)
        if old is not None and new is not None:
            change.fields = review.changes(old, new)
    if now:
        p = head.plans[name]
        change.total_steps = len(p.steps)
        if was:
            change.steps = [
                Rebuild(s, why, next((n for n in known.get(s.key, []) if n != name), None))
                for s, why in review.rebuilds(p, base.plans[name])
            ]
        else:
            change.steps = [Rebuild(s, ["new step"]) for s in p.steps if s.key not in known]
    _evidence(change, base, head)
    if status == "changed" and not (change.fields or change.steps or change.stale_evidence):
        return None
    still = {problem_id(p) for p in base.errors.get(name, [])} == {
        problem_id(p) for p in change.problems
    }
    if status == "changed (still invalid)" and not change.fields and still:
        return None
    return change


def _reasons(side: Side, name: str, found: Manifest | None) -> set[str] | None:
    """Why the recipe's plan on `side` differs from the lock (empty: the lock is
    current); None when the recipe does not plan there."""
    if name not in side.plans or found is None:
        return None
    s = review.staleness(side.plans[name], found.lock)
    return {f"{step.kind}/{step.role}: {why}" for step, reasons in s.steps for why in reasons}


def _evidence(change: RecipeChange, base: Side, head: Side) -> None:
    """The evidence that stops counting, and the matrix cells that gain or lose."""
    name = change.name
    old, new = base.manifest(name), head.manifest(name)
    before, after = _reasons(base, name, old), _reasons(head, name, new)
    base_cell = head_cell = None
    if name in base.plans:
        base_cell = cells.cell(base.catalog.recipes[name], old.lock if old else None)
    if name in head.plans:
        head_cell = cells.cell(head.catalog.recipes[name], new.lock if new else None)
    if old is not None and old.evidence and before is not None:
        # It stops counting when the recipe is gone or invalid, or its lock is stale
        # for a reason the base did not have: a lock already stale at base (another
        # host's library versions, say) is still made stale by this change.
        stops = after is None or bool(after - before)
        if stops:
            latest = manifest.headline(new if new is not None and new.evidence else old)
            assert latest is not None  # old.evidence is not empty
            where = base.catalog.paths.rel(base.catalog.paths.manifest(name))
            change.stale_evidence.append(StaleEvidence(where, latest, bool(before)))
        if base_cell is not None and (stops or base_cell != head_cell):
            change.loses.append(CellEntry(base_cell, name, _verdict(old)))
    if head_cell is not None and head_cell != base_cell:
        measured = new is not None and bool(new.evidence) and after == set()
        verdict = _verdict(new) if new is not None and measured else "planned"
        change.gains.append(CellEntry(head_cell, name, verdict))


def _verdict(found: Manifest) -> str:
    """The verdict of a manifest that holds evidence (kiln.evidence.manifest.headline)."""
    latest = manifest.headline(found)
    return latest.verdict if latest else "planned"
