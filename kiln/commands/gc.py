"""`doit gc`: remove stale temp dirs and the artifacts no manifest and no current plan
references (kiln/store/gc.py decides, conservatively); `dry_run=1` lists them."""

from __future__ import annotations

from kiln.catalog import Catalog
from kiln.commands import workspace
from kiln.commands.upkeep import manifests, planned_keys
from kiln.errors import KilnError
from kiln.store import Store
from kiln.store import gc as garbage


def gc(dry_run: bool) -> None:
    """`doit gc` on the catalog of KILN_ROOT and its store."""
    collect(workspace.catalog(), workspace.store(), dry_run)


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
