"""What `doit verify` and `doit gc` both need: what the manifests and the current
plans reference (verify audits the store against it, gc collects the rest)."""

from __future__ import annotations

from kiln.catalog import Catalog
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.plan import plan, toolchain
from kiln.schema import Manifest


def manifests(cat: Catalog) -> tuple[dict[str, Manifest], list[str]]:
    """Every manifest, parsed (by file), and the problems of those that do not parse."""
    parsed, broken = {}, []
    for path in sorted(cat.paths.manifests.glob("*.json")):
        try:
            m = manifest.read(path, cat.paths.rel(path))
        except KilnError as exc:
            broken.append(str(exc).splitlines()[0])
            continue
        if m is not None:
            parsed[cat.paths.rel(path)] = m
    return parsed, broken


def planned_keys(cat: Catalog) -> set[str]:
    """Keys of every step of every recipe's current plan: what a build would use now."""
    tools, keys = toolchain.current(), set()
    for name, recipe in cat.recipes.items():
        prompts = cat.prompts.get(recipe.validation.prompts)
        if prompts is not None:
            keys |= {s.key for s in plan(name, recipe, prompts, tools).steps}
    return keys
