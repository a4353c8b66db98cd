"""Which recipes a replay runs: all, `recipes=`, `tags=`, `changed_since=REV`, `shard=i/n`.

Filters combine (a recipe must pass every one given). Sharding hashes the recipe
name, so adding or removing a recipe never moves any other recipe to another shard:
a nightly matrix keeps each recipe's history on the same shard.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

from kiln import proc
from kiln.catalog import Catalog
from kiln.errors import KilnError, Location, did_you_mean
from kiln.plan import plan, toolchain


def shard_of(name: str, count: int) -> int:
    """Stable shard of a recipe: sha256 of its name, mod `count` (0-based)."""
    return int(hashlib.sha256(name.encode()).hexdigest()[:16], 16) % count


def parse_shard(text: str) -> tuple[int, int]:
    """`i/n` with 0 <= i < n."""
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise KilnError.one(
            f"shard={text!r} is not i/n", None, "write shard=0/4 (shards are 0-based)"
        ) from None
    if count < 1 or not 0 <= index < count:
        raise KilnError.one(
            f"shard={text!r}: need 0 <= i < n",
            None,
            f"shards of {count} are 0/{count} .. {max(count - 1, 0)}/{count}",
        )
    return index, count


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def recipe_files(cat: Catalog, name: str) -> set[str]:
    """Files (relative to the catalog root) whose change can change what `name` measures:
    the recipe, its parents (extends), its thresholds and prompts, and the code its
    steps run (the union of their builders' import closures, kiln.plan.toolchain)."""
    recipe = cat.recipe(name)
    files = {s.file for s in cat.sources.get(name, [])}  # the recipe and its parents
    files.add(cat.paths.rel(cat.paths.recipes / f"{name}.yaml"))
    files.add(cat.paths.rel(cat.paths.thresholds / f"{recipe.validation.thresholds}.yaml"))
    files.add(cat.paths.rel(cat.paths.prompts / f"{recipe.validation.prompts}.yaml"))
    tools = toolchain.current()
    try:
        steps = plan(name, recipe, cat.prompts[recipe.validation.prompts], tools).steps
    except KilnError:
        return files  # unbuildable: no builder runs, so no builder's code matters
    for step in steps:
        for rel in tools.files(step.kind, step.options):
            target = tools.root / rel
            if target.is_relative_to(cat.paths.root):  # the code lives in this repository
                files.add(target.relative_to(cat.paths.root).as_posix())
    return files


def changed_files(root: Path, rev: str) -> set[str]:
    """Paths relative to `root` changed between `rev` and the working tree, untracked
    files included (a new recipe not committed yet has changed too). `rev` is resolved
    to a commit id first (kiln.proc): only the id reaches git diff."""
    try:
        commit = proc.git_object(root, rev, "commit")
        changed = proc.git_lines(root, ["diff", "--name-only", "--relative", commit], ["."])
        new = proc.git_lines(root, ["ls-files", "--others", "--exclude-standard"], ["."])
    except proc.Refused as exc:
        raise KilnError.one(
            str(exc),
            Location("command line", key_path=("changed_since",)),
            "name a revision this repository has, e.g. changed_since=origin/main",
        ) from None
    return set(changed) | set(new)


def _is_changed(files: set[str], changed: set[str]) -> bool:
    for f in files:
        if f in changed or any(c.startswith(f.rstrip("/") + "/") for c in changed):
            return True
    return False


def select(
    cat: Catalog,
    recipes: str | None = None,
    tags: str | None = None,
    changed_since: str | None = None,
    shard: str | None = None,
) -> list[str]:
    """The recipe names to replay, sorted. Invalid recipe files are included when no
    `recipes=`/`tags=` filter excludes them: the replay reports them as build failures."""
    invalid = sorted(
        Path(f).stem for f in cat.problems if f.startswith(cat.paths.rel(cat.paths.recipes) + "/")
    )
    names = sorted({*cat.recipes, *invalid})
    wanted = _split(recipes)
    if wanted:
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise KilnError.one(
                f"recipes={recipes}: unknown recipe {unknown[0]!r}",
                None,
                did_you_mean(unknown[0], names) or f"known recipes: {', '.join(names)}",
            )
        names = sorted(set(wanted))
    if tags:
        want_tags = set(_split(tags))
        names = [n for n in names if n in cat.recipes and want_tags & set(cat.recipes[n].tags)]
    if changed_since:
        changed = changed_files(cat.paths.root, changed_since)
        names = [n for n in names if _changed(cat, n, changed)]
    if shard:
        index, count = parse_shard(shard)
        names = [n for n in names if shard_of(n, count) == index]
    return names


def _changed(cat: Catalog, name: str, changed: Iterable[str]) -> bool:
    if name not in cat.recipes:  # invalid: its own file is all we can name
        return cat.paths.rel(cat.paths.recipes / f"{name}.yaml") in set(changed)
    return _is_changed(recipe_files(cat, name), set(changed))
