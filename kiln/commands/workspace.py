"""What every verb works on: the catalog of KILN_ROOT and its store, loaded once per
process; the plan of a recipe; and errors pinned to the recipe line they come from.

Loading is what `doit check` pays for, so this module imports little: the catalog
(pydantic, PyYAML), the planner and the store only when a verb asks for them; a
no-op build, whose plans come from the plan cache (plancache.py), never does.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import TYPE_CHECKING

from kiln.errors import KilnError, Problem
from kiln.paths import Paths

if TYPE_CHECKING:
    from kiln.catalog import Catalog
    from kiln.plan.step import Plan
    from kiln.store import Store


@cache
def _catalog(paths: Paths, save: bool = True) -> Catalog:
    from kiln.catalog import load  # pydantic and PyYAML: a no-op build never loads

    return load(paths, save=save)


def catalog(save: bool = True) -> Catalog:
    """The catalog of KILN_ROOT, loaded once per process; `save`: write the parse
    cache back (a command that writes nothing, `doit plan`, does not)."""
    return _catalog(Paths.from_env(), save)


def store() -> Store:
    """The store of KILN_STORE."""
    from kiln.store import Store

    return Store(Paths.from_env().store)


def located(
    exc: KilnError, recipe: str, key_path: tuple[str, ...] = (), cat: Catalog | None = None
) -> KilnError:
    """Pin problems that carry no file to the recipe line they come from: their own
    key path if they have one, else `key_path`."""

    def pin(p: Problem) -> Problem:
        if p.location and p.location.file:
            return p
        path = p.location.key_path if p.location and p.location.key_path else key_path
        return replace(p, location=(cat or catalog()).locate(recipe, tuple(map(str, path))))

    return KilnError([pin(p) for p in exc.problems])


def plan_in(cat: Catalog, name: str) -> Plan:
    """The plan of one recipe of `cat` (KilnError, located, if it does not plan)."""
    from kiln.plan import plan, toolchain

    recipe = cat.recipe(name)
    try:
        return plan(name, recipe, cat.prompts[recipe.validation.prompts], toolchain.current())
    except KilnError as exc:
        raise located(exc, name, cat=cat) from None


@cache
def _plan(paths: Paths, name: str) -> Plan:
    return plan_in(_catalog(paths), name)


def plan_of(name: str) -> Plan:
    """The plan of one recipe of KILN_ROOT's catalog, once per process."""
    return _plan(Paths.from_env(), name)


def selected(recipes: str | None, cat: Catalog | None = None) -> list[str]:
    """Recipe names from `recipe=a,b`; every valid recipe when absent."""
    if not recipes:
        return sorted((cat or catalog()).recipes)
    return [n.strip() for n in recipes.split(",") if n.strip()]
