"""The catalog: every recipe, thresholds file and prompt set, loaded and cross-checked.

Loading never stops at the first problem: `doit check` reports them all at once.
A recipe with a problem is kept out of `recipes` and its problems are kept, so the
rest of the catalog still plans and builds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from kiln.errors import KilnError, Problem, did_you_mean
from kiln.load import load_yaml_model, locate
from kiln.schema import PromptSet, Recipe, Thresholds

M = TypeVar("M", Recipe, Thresholds, PromptSet)
ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Paths:
    """Where the catalog's data and the build outputs live."""

    root: Path

    @property
    def recipes(self) -> Path:
        return self.root / "recipes"

    @property
    def thresholds(self) -> Path:
        return self.root / "thresholds"

    @property
    def prompts(self) -> Path:
        return self.root / "prompts"

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"

    @property
    def site(self) -> Path:
        return Path(os.environ.get("KILN_SITE", self.root / "_site"))

    @property
    def store(self) -> Path:
        return Path(os.environ.get("KILN_STORE", self.root / ".kiln" / "store"))

    @property
    def hub(self) -> Path:
        """The Hugging Face cache that fetch resolves from (the local mirror by default)."""
        return Path(os.environ.get("KILN_HUB_CACHE", self.root / ".kiln" / "hub"))

    def manifest(self, recipe: str) -> Path:
        return self.manifests / f"{recipe}.json"

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return str(path)


@dataclass
class Catalog:
    paths: Paths
    recipes: dict[str, Recipe] = field(default_factory=dict)
    thresholds: dict[str, Thresholds] = field(default_factory=dict)
    prompts: dict[str, PromptSet] = field(default_factory=dict)
    problems: dict[str, list[Problem]] = field(default_factory=dict)  # file -> problems

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

    def all_problems(self) -> list[Problem]:
        return [p for file in sorted(self.problems) for p in self.problems[file]]


def _load_dir(catalog: Catalog, folder: Path, model: type[M]) -> dict[str, M]:
    loaded: dict[str, M] = {}
    for path in sorted(folder.glob("*.yaml")):
        file = catalog.paths.rel(path)
        try:
            loaded[path.stem] = load_yaml_model(model, path, file)
        except KilnError as exc:
            catalog.problems.setdefault(file, []).extend(exc.problems)
    return loaded


def load(paths: Paths | None = None) -> Catalog:
    """Load and cross-check the whole catalog."""
    catalog = Catalog(paths or Paths(Path(os.environ.get("KILN_ROOT", ROOT))))
    catalog.thresholds = _load_dir(catalog, catalog.paths.thresholds, Thresholds)
    catalog.prompts = _load_dir(catalog, catalog.paths.prompts, PromptSet)
    recipes = _load_dir(catalog, catalog.paths.recipes, Recipe)
    for name, recipe in recipes.items():
        problems = _cross_check(catalog, name, recipe)
        if problems:
            catalog.problems.setdefault(problems[0].location.file, []).extend(problems)  # type: ignore[union-attr]
        else:
            catalog.recipes[name] = recipe
    return catalog


def _cross_check(catalog: Catalog, name: str, recipe: Recipe) -> list[Problem]:
    """What one file cannot know alone: the files a recipe names must exist."""
    file = catalog.paths.rel(catalog.paths.recipes / f"{name}.yaml")
    problems = []
    checks = (
        ("thresholds", recipe.validation.thresholds, catalog.thresholds, catalog.paths.thresholds),
        ("prompts", recipe.validation.prompts, catalog.prompts, catalog.paths.prompts),
    )
    for key, wanted, known, folder in checks:
        if wanted in known:
            continue
        target = catalog.paths.rel(folder / f"{wanted}.yaml")
        broken = target in catalog.problems
        problems.append(
            Problem(
                f"{target} is invalid" if broken else f"{target} does not exist",
                locate(catalog.paths.recipes / f"{name}.yaml", file, ("validation", key)),
                "fix that file first"
                if broken
                else did_you_mean(wanted, known) or f"create {target} or name an existing one",
            )
        )
    return problems
