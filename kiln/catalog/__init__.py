"""The catalog: every recipe, thresholds file and prompt set, loaded and cross-checked.

Loading never stops at the first problem: `doit check` reports them all at once.
A recipe with a problem is kept out of `recipes` and its problems are kept, so the
rest of the catalog still plans and builds.

`extends: parent` deep-merges a recipe onto its parent (mappings merge key by key,
everything else is replaced), along one chain of at most MAX_EXTENDS parents.
Recipes are data: nothing is templated.

  __init__.py       load(), Catalog: every file loaded, cross-checked, problems kept
  yaml.py           guarded reading of YAML and JSON: caps, no anchors, located errors
  indent.py         indentation mistakes, found at their line and explained
  cache.py          parsed YAML cached in the store by (path, size, mtime_ns), checked
  diagnose.py       pydantic errors -> file:line:col, key path, snippet, did-you-mean
  rules.py          the compatibility rules of catalog/rules.yaml, applied to recipes
  buildable.py      what no builder makes yet, and gates a validation cannot feed
  verdict.py        a clean catalog's counts, cached by the stat of every input
  architectures.py  catalog/architectures.yaml and the CI subset it implies

Parsing is cached in the store (cache.py): loading an unchanged catalog again parses
nothing, and reports the same problems. Importing this package imports neither
PyYAML nor pydantic (loading does): `doit check` of a catalog whose verdict is
cached (verdict.py) needs neither.
"""

from __future__ import annotations

import gc
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kiln.errors import KilnError, Location, Problem, did_you_mean
from kiln.paths import ROOT, Paths

if TYPE_CHECKING:
    from kiln.catalog import rules as rules_mod
    from kiln.catalog.cache import ParseCache
    from kiln.catalog.yaml import Source
    from kiln.schema import PromptSet, Recipe, Thresholds

    M = TypeVar("M", Recipe, Thresholds, PromptSet)

MAX_EXTENDS = 8
# This checkout's rules: a catalog root without its own (a test world) uses them.
RULES_FILE = ROOT / "catalog" / "rules.yaml"


@dataclass
class Catalog:
    paths: Paths
    recipes: dict[str, Recipe] = field(default_factory=dict)
    thresholds: dict[str, Thresholds] = field(default_factory=dict)
    prompts: dict[str, PromptSet] = field(default_factory=dict)
    problems: dict[str, list[Problem]] = field(default_factory=dict)  # file -> problems
    sources: dict[str, list[Source]] = field(default_factory=dict)  # recipe -> extends chain
    rules: rules_mod.Rules | None = None  # the compatibility rules the recipes were checked by
    parsed: int = 0  # YAML files parsed afresh by load(), not taken from the parse cache
    local: bool = False  # a recipe names a local checkpoint: files no recipe stat covers

    def recipe(self, name: str) -> Recipe:
        if name in self.recipes:
            return self.recipes[name]
        file = self.paths.rel(self.paths.recipes / f"{name}.yaml")
        if file in self.problems:
            raise KilnError(self.problems[file])
        known = sorted(self.recipes)
        raise KilnError.one(
            f"unknown recipe {name!r}",
            None,
            did_you_mean(name, known) or f"known recipes: {', '.join(known) or 'none'}",
        )

    def locate(self, name: str, key_path: Sequence[str]) -> Location:
        """Where a recipe key is written: in the recipe or in the parent it inherits from."""
        from kiln.catalog.diagnose import find

        chain = self.sources.get(name, [])
        if not chain:
            return Location(self.paths.rel(self.paths.recipes / f"{name}.yaml"))
        source, (node, _key, _n) = max(
            ((s, find(s.node, key_path)) for s in chain), key=lambda pair: pair[1][2]
        )
        return source.location(node, tuple(key_path))

    def add(self, file: str, problems: Sequence[Problem]) -> None:
        self.problems.setdefault(file, []).extend(problems)

    def all_problems(self) -> list[Problem]:
        return [p for file in sorted(self.problems) for p in self.problems[file]]


def yaml_entries(folder: Path) -> list[os.DirEntry[str]] | None:
    """Every *.yaml entry of `folder` (files or not: a directory named x.yaml is a
    problem to report), by name; None when it cannot be listed. What load() reads,
    and what a cached verdict (verdict.py) is keyed on."""
    try:
        with os.scandir(folder) as entries:
            found = [e for e in entries if e.name.endswith(".yaml")]
    except OSError:
        return None
    found.sort(key=lambda e: e.name)
    return found


def rules_file(paths: Paths) -> Path | None:
    """The catalog's own catalog/rules.yaml, or None: this checkout's (RULES_FILE)."""
    return paths.rules if paths.rules.is_file() else None


def _yaml_files(catalog: Catalog, folder: Path) -> list[tuple[str, Path, str]]:
    """(stem, path, the file as problems name it) of every *.yaml in `folder`, by name:
    what `sorted(folder.glob("*.yaml"))` gives, at catalog scale without Path sorting."""
    prefix = catalog.paths.rel(folder)
    if not _contained(catalog, folder, prefix):
        return []
    names = [e.name for e in yaml_entries(folder) or ()]
    return [(name[: -len(".yaml")], folder / name, f"{prefix}/{name}") for name in names]


def _contained(catalog: Catalog, folder: Path, shown: str) -> bool:
    """A catalog folder (recipes/, manifests/, ...) that is a link out of the root would
    have kiln read, and quote in its errors, files of someone else's: refused."""
    from kiln import pins

    if not os.path.lexists(folder):
        return True
    try:
        pins.within(folder, [catalog.paths.root], f"{shown}/")
    except pins.PinError as exc:
        catalog.add(f"{shown}/", [Problem(exc.cause, Location(f"{shown}/"), exc.fix)])
        return False
    return True


def _load_dir(catalog: Catalog, folder: Path, model: type[M], cache: ParseCache) -> dict[str, M]:
    from kiln.catalog.diagnose import validate

    loaded: dict[str, M] = {}
    for stem, path, file in _yaml_files(catalog, folder):
        try:
            source, data = cache.read_source(path, file)
            loaded[stem] = validate(model, data, [source])
        except KilnError as exc:
            catalog.add(file, exc.problems)
    return loaded


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _chain(name: str, raw: dict[str, tuple[Source, Any]], broken: frozenset[str]) -> list[str]:
    """[name, parent, grandparent, ...], or KilnError at the offending `extends:`.
    `broken`: stems of recipe files that did not parse (a parent may be one)."""
    chain = [name]
    while True:
        source, data = raw[chain[-1]]
        parent = data.get("extends") if isinstance(data, dict) else None
        if parent is None:
            return chain
        if isinstance(parent, str) and parent in broken:
            raise KilnError.one(
                f"parent recipe {parent!r} does not parse",
                _extends_at(source),
                f"fix recipes/{parent}.yaml first (its own errors are reported there)",
            )
        if not isinstance(parent, str) or parent not in raw:
            raise KilnError.one(
                f"parent recipe {parent!r} does not exist",
                _extends_at(source),
                did_you_mean(str(parent), raw) or "name a recipe file stem in recipes/",
            )
        if parent in chain:
            cycle = " -> ".join([*chain, parent])
            raise KilnError.one(f"extends cycle: {cycle}", _extends_at(source), "break the cycle")
        if len(chain) > MAX_EXTENDS:
            raise KilnError.one(
                f"extends chain deeper than {MAX_EXTENDS}", _extends_at(source), "flatten the chain"
            )
        chain.append(parent)


def _extends_at(source: Source) -> Location:
    """Where `extends:` is written. Located only on error: a source from the parse
    cache composes its nodes on first use."""
    from kiln.catalog.diagnose import find

    return source.location(find(source.node, ("extends",))[0], ("extends",))


def _resolve(
    name: str, raw: dict[str, tuple[Source, Any]], broken: frozenset[str] = frozenset()
) -> tuple[Recipe, list[Source]]:
    from kiln.catalog.diagnose import validate
    from kiln.schema import Recipe

    chain = _chain(name, raw, broken)
    data: dict[str, Any] = {}
    for link in reversed(chain):
        own = {k: v for k, v in raw[link][1].items() if k != "extends"}
        data = deep_merge(data, own) if data else own
    data["extends"] = raw[name][1].get("extends")
    sources = [raw[link][0] for link in chain]
    return validate(Recipe, data, sources), sources


@contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """Loading builds and drops a few dozen acyclic objects per YAML value (nodes,
    plain data, models): refcounting frees them, and the cyclic collector, run every
    700 allocations over every live object, finds nothing. Paused, a cold load of
    1,000 recipes takes a quarter less time (bench/check_catalog.py).

    What the load keeps (the models, the sources) lives as long as the catalog: it
    goes straight to the oldest generation (a freeze and a thaw move the young ones
    there without walking them), not through a first young collection that walks
    it all (7 ms for 1,000 recipes). Not when something in the process froze
    objects of its own: a thaw would release those too."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def load(paths: Paths | None = None, cache: bool = True, save: bool = True) -> Catalog:
    """Load and cross-check the whole catalog. `cache`: use the parse cache in the
    store (off for a throwaway checkout, e.g. `doit diff`'s base); `save`: write it
    back (off for a command that writes nothing, `doit plan`)."""
    with _no_cycle_collection():
        return _load(Catalog(paths or Paths.from_env()), cache, save)


def _load(catalog: Catalog, cache: bool, save: bool) -> Catalog:
    from kiln.catalog import rules as rules_mod
    from kiln.catalog.cache import ParseCache
    from kiln.schema import PromptSet, Thresholds

    parsed = ParseCache(catalog.paths, enabled=cache)
    catalog.thresholds = _load_dir(catalog, catalog.paths.thresholds, Thresholds, parsed)
    catalog.prompts = _load_dir(catalog, catalog.paths.prompts, PromptSet, parsed)
    raw: dict[str, tuple[Source, Any]] = {}
    unparsed = set()
    for stem, path, file in _yaml_files(catalog, catalog.paths.recipes):
        try:
            raw[stem] = parsed.read_source(path, file)
        except KilnError as exc:
            catalog.add(file, exc.problems)
            unparsed.add(stem)
    broken = frozenset(unparsed)
    for folder in (catalog.paths.manifests, catalog.paths.rules.parent):
        _contained(catalog, folder, catalog.paths.rel(folder))
    rules = catalog.rules = rules_mod.load(rules_file(catalog.paths), parsed.read_source)
    if save:
        parsed.save()
    catalog.parsed = parsed.misses
    for name in raw:
        file = raw[name][0].file
        try:
            recipe, catalog.sources[name] = _resolve(name, raw, broken)
        except KilnError as exc:
            catalog.add(file, exc.problems)
            continue
        problems = [
            *_cross_check(catalog, name, recipe),
            *_local_sources(catalog, name, recipe),
            *_apply_rules(catalog, name, recipe, rules),
            *_buildable(catalog, name, recipe),
        ]
        if problems:
            catalog.add(file, problems)
        else:
            catalog.recipes[name] = recipe
    return catalog


def _apply_rules(
    catalog: Catalog, name: str, recipe: Recipe, rules: rules_mod.Rules
) -> list[Problem]:
    from kiln.catalog import rules as rules_mod

    out = []
    for v in rules.check(recipe):
        where = catalog.locate(name, v.path)
        if where.key_path != v.path or not _written(catalog, name, v.path):
            # The key the rule wants is not written anywhere: point at what triggered it.
            first = tuple(next(iter(v.rule.when)).split("."))
            where = catalog.locate(name, first)
        out.append(rules_mod.problem(v, where))
    return out


def _buildable(catalog: Catalog, name: str, recipe: Recipe) -> list[Problem]:
    """What the planner would refuse, and gates the validation cannot feed, located."""
    from kiln.catalog import buildable

    problems = buildable.refusals(recipe)
    which = recipe.validation.thresholds
    if which in catalog.thresholds:
        problems += buildable.gate_problems(recipe, which, catalog.thresholds[which])
    if not problems and (
        recipe.build.tensor_parallel > 1
        or (recipe.task == "image-text-to-text" and recipe.build.backend == "inductor")
    ):
        # judged again once fetched: the verdict's key lists the configs fetched here
        config = _fetched_config(catalog, recipe)
        problems += buildable.split_problems(recipe, config)
        problems += buildable.image_attention_problems(recipe, config)
    return [replace(p, location=catalog.locate(name, _key_path(p))) for p in problems]


def _fetched_config(catalog: Catalog, recipe: Recipe) -> dict[str, Any] | None:
    """The checkpoint's config.json where this host already has it, in the hub cache
    at the pinned revision (whose files a revision pins: it never changes), without
    reading the network; None elsewhere (a packaged or local checkpoint, or a repo not
    fetched here yet)."""
    import json

    model = recipe.model
    if model.repo is None or model.revision is None:
        return None
    folder = "models--" + model.repo.replace("/", "--")
    file = catalog.paths.hub / folder / "snapshots" / model.revision / "config.json"
    try:
        if file.stat().st_size > 1 << 20:
            return None
        found = json.loads(file.read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def _key_path(p: Problem) -> tuple[str, ...]:
    return tuple(map(str, p.location.key_path)) if p.location else ()


def _written(catalog: Catalog, name: str, path: Sequence[str]) -> bool:
    from kiln.catalog.diagnose import find

    return any(find(s.node, path)[2] == len(path) for s in catalog.sources.get(name, []))


def _cross_check(catalog: Catalog, name: str, recipe: Recipe) -> list[Problem]:
    """What one file cannot know alone: the names it uses must exist."""
    problems = []
    if not _valid_name(name) or os.path.basename(name) != name:  # no Path per recipe
        problems.append(
            Problem(
                f"{name!r} is not a valid recipe name",
                Location(catalog.paths.rel(catalog.paths.recipes / f"{name}.yaml")),
                "rename the file: lowercase letters, digits, '.', '_' and '-'",
            )
        )
    validation = recipe.validation
    if validation.thresholds in catalog.thresholds and validation.prompts in catalog.prompts:
        return problems
    checks = (
        ("thresholds", validation.thresholds, catalog.thresholds, catalog.paths.thresholds),
        ("prompts", validation.prompts, catalog.prompts, catalog.paths.prompts),
    )
    for key, wanted, known, folder in checks:
        if wanted in known:
            continue
        target = catalog.paths.rel(folder / f"{wanted}.yaml")
        broken = target in catalog.problems
        problems.append(
            Problem(
                f"{target} is invalid" if broken else f"{target} does not exist",
                catalog.locate(name, ("validation", key)),
                "fix that file first"
                if broken
                else did_you_mean(wanted, known) or f"create {target} or name an existing one",
            )
        )
    return problems


def _local_sources(catalog: Catalog, name: str, recipe: Recipe) -> list[Problem]:
    """A local checkpoint must be a regular file or a folder of them under the root,
    nothing in it linking out (kiln.pins.local_source): refused here, before fetch
    reads a byte. Stat only: the digest is fetch's to check."""
    from kiln import pins
    from kiln.schema import Source as Pinned  # not yaml.Source, a YAML file

    sources: list[tuple[tuple[str, ...], Pinned]] = [(("model",), recipe.model)]
    sources += [(("companions", role), c) for role, c in sorted(recipe.companions.items())]
    problems = []
    for where, source in sources:
        if source.path is None:
            continue
        catalog.local = True
        try:
            pins.local_source(catalog.paths.root, source.path, catalog.paths.never_sources)
        except pins.PinError as exc:
            at = catalog.locate(name, (*where, "path"))
            problems.append(Problem(exc.cause, at, exc.fix))
    return problems


_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,79}")


def _valid_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None
