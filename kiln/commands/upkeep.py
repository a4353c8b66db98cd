"""`doit verify` and `doit gc`: find what the manifests and the current plans
reference, then audit the store against it, or collect what nothing references.

`verify(repair)` and `gc(dry_run)` are the verbs, on the catalog of KILN_ROOT;
`audit` and `collect` do the work on any catalog and store."""

from __future__ import annotations

from kiln.catalog import Catalog
from kiln.commands import workspace
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.plan import plan, toolchain
from kiln.schema import Manifest
from kiln.store import Store
from kiln.store import gc as garbage
from kiln.store import verify as integrity


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


def verify(repair: bool) -> int:
    """`doit verify`: its exit code (kiln.store.verify.EXIT)."""
    return audit(workspace.catalog(), workspace.store(), repair)


def gc(dry_run: bool) -> None:
    """`doit gc`."""
    collect(workspace.catalog(), workspace.store(), dry_run)


def audit(cat: Catalog, store: Store, repair: bool) -> int:
    """Print what verify found; return its exit code."""
    parsed, broken = manifests(cat)
    report = integrity.audit(store, parsed, planned_keys(cat))
    report.corrupt += broken
    if repair:
        for key in sorted(report.damaged):
            store.remove(key)
            print(f"   removed damaged artifact {key[:12]}; the next build rebuilds it")
    print(report.render())
    return report.exit_code()


def collect(cat: Catalog, store: Store, dry_run: bool) -> None:
    parsed, broken = manifests(cat)
    if broken or cat.problems:
        raise KilnError.one(
            "not collecting garbage: a manifest or recipe is invalid, so what it uses is unknown",
            None,
            "fix what `doit check` reports first",
        )
    keep = planned_keys(cat) | {s.key for m in parsed.values() for s in m.lock.steps}
    gone = garbage.collect(store, keep, [cat.paths.manifests], dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for c in gone:
        print(f"   {verb} {c.path} ({c.size / 1e6:.1f} MB): {c.why}")
    total = sum(c.size for c in gone) / 1e6
    print(f"gc: {verb} {len(gone)} entries, {total:.1f} MB; kept {len(keep)} referenced keys")
