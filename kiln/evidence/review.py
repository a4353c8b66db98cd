"""What a change does to steps: which step is which, why it is stale, which locks it invalidates.

Everything here compares step *materials* (what a key hashes): the plan's against
the manifest's lock (`doit check`, `doit plan`), or a base catalog's against the
working tree's (`doit diff`, kiln/commands/diffing.py). A change is explained by
every field that differs: an option, an input step, a library version or the
builder's code.

Steps are paired by identity, (kind, role): a recipe with a companion has two
fetches (the model's and the companion's), and neither order nor kind alone tells
them apart. A lock written before steps recorded their role names the checkpoint
in each step's name (`fetch kiln-tiny/llama-draft@8b5204f`): its role is read off
that, matched against the lock's companions, when the manifest is read
(kiln/evidence/manifest.py).

Values are shown the way the recipe writes them: YAML flow style, whole (a long
one is wrapped by whoever prints it, never cut).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml

from kiln import catalog as catalog_mod
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.plan import plan
from kiln.plan.step import Plan, Step
from kiln.plan.toolchain import Toolchain
from kiln.schema import Lock, StepLock

UNSET = object()  # a key one side does not have
T = TypeVar("T")
Identity = tuple[str, str]  # (kind, role)


# ---------------------------------------------------------------- values and their changes


def shown(value: Any) -> str:
    """A value in YAML flow notation, on one line: `fp32`, `256`, `[tiny, gpu]`,
    `{max_draft_len: 4}`, `'yes'` (quoted where YAML would read it otherwise)."""
    if value is UNSET:
        return "(unset)"
    text = yaml.safe_dump(
        [value], default_flow_style=True, allow_unicode=True, sort_keys=False, width=2**31
    )
    return text.strip()[1:-1]


@dataclass(frozen=True)
class Change:
    """One leaf that differs: its dotted path, the old value and the new (UNSET if absent)."""

    path: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.path}: {shown(self.old)} -> {shown(self.new)}"


def changes(old: Any, new: Any, path: str = "") -> list[Change]:
    """Every leaf where `new` differs from `old`. Mappings are followed key by key;
    anything else (a list, a scalar, a mapping one side lacks) is one leaf."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in [*old, *(k for k in new if k not in old)]:
            out += changes(
                old.get(key, UNSET), new.get(key, UNSET), f"{path}.{key}" if path else key
            )
        return out
    return [] if _same(old, new) else [Change(path, old, new)]


def _same(a: Any, b: Any) -> bool:
    # bool is an int in Python: `true` and `1` are different recipe values.
    return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b


# ---------------------------------------------------------------- why a step differs


def explain(
    new: dict[str, Any], old: dict[str, Any] | None, names: Mapping[str, str] | None = None
) -> list[str]:
    """Why `new` material differs from `old`, one reason per changed field. `names`:
    step key -> step name, to say which input step changed."""
    if old is None:
        return ["new step"]
    reasons = [f"options.{c}" for c in changes(old["options"], new["options"])]
    for role in sorted(set(new["inputs"]) | set(old["inputs"])):
        key = new["inputs"].get(role)
        if key != old["inputs"].get(role):
            what = f" ({names[key]})" if names and key in names else ""
            reasons.append(f"input {role} changed{what}" if key else f"input {role} removed")
    for lib in sorted(set(new["libraries"]) | set(old["libraries"])):
        a, b = old["libraries"].get(lib, UNSET), new["libraries"].get(lib, UNSET)
        if a != b:
            reasons.append(f"library {lib}: {shown(a)} -> {shown(b)}")
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


# ---------------------------------------------------------------- which step is which


def identity(step: Step) -> Identity:
    return step.kind, step.role


def locked_identity(step: StepLock) -> Identity:
    """A lock step's (kind, role); manifest.read gives old locks their roles."""
    return step.kind, step.role


def pair(
    new: Iterable[Step], old: Iterable[T], ident: Callable[[T], Identity]
) -> Iterator[tuple[Step, T | None]]:
    """Each new step with the old step of the same identity (None if there is none);
    two steps of one identity pair in order."""
    by_identity: dict[Identity, list[T]] = {}
    for o in old:
        by_identity.setdefault(ident(o), []).append(o)
    for step in new:
        same = by_identity.get(identity(step), [])
        yield step, same.pop(0) if same else None


def rebuilds(new: Plan, old: Plan) -> list[tuple[Step, list[str]]]:
    """The steps of `new` whose key differs from the step of the same identity in
    `old`, each with why."""
    names = {s.key: s.name for s in new.steps}
    return [
        (s, explain(s.material, o.material if o else None, names))
        for s, o in pair(new.steps, old.steps, identity)
        if o is None or o.key != s.key
    ]


# ---------------------------------------------------------------- plans against locks


@dataclass
class Staleness:
    recipe: str
    steps: list[tuple[Step, list[str]]] = field(default_factory=list)  # stale steps + why

    @property
    def stale(self) -> bool:
        return bool(self.steps)


def recipe_changed(s: Staleness) -> bool:
    """Did the recipe change (a value it sets, a step added), rather than only the
    libraries and kiln's code its steps run? An option the old lock lacks altogether
    (`(unset) -> ...`) is the planner's: newer kiln records more."""
    return any(
        r == "new step" or (r.startswith("options.") and ": (unset) -> " not in r)
        for _, why in s.steps
        for r in why
    )


def staleness(p: Plan, lock: Lock | None) -> Staleness:
    """Which of the plan's steps the lock does not cover, and why."""
    out = Staleness(p.recipe)
    locked_steps: Sequence[StepLock] = lock.steps if lock else []
    names = {s.key: s.name for s in p.steps}
    for step, locked in pair(p.steps, locked_steps, locked_identity):
        material = comparable(step, locked)
        if locked is None or locked.material() != material:
            out.steps.append(
                (step, explain(material, locked.material() if locked else None, names))
            )
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
