"""`doit verify`: re-hash the store against its records and the manifests' locks.

Exit 0 ok, 4 corrupt, partial or linked, 5 missing, 6 extra (kiln/store/verify.py);
`repair=1` also removes damaged artifacts and every symbolic link in the store's
layout (the link itself, never what it points at), so the next build remakes them.
"""

from __future__ import annotations

import json

from kiln.catalog import Catalog
from kiln.commands import workspace
from kiln.commands.upkeep import manifests, planned_keys
from kiln.store import Store, links
from kiln.store import verify as integrity


def verify(repair: bool, format: str = "text") -> int:
    """`doit verify` on the catalog of KILN_ROOT: its exit code."""
    return audit(workspace.catalog(), workspace.store(), repair, format == "json")


def audit(cat: Catalog, store: Store, repair: bool, as_json: bool = False) -> int:
    """Print what verify found in `store`; return its exit code."""
    parsed, broken = manifests(cat)
    report = integrity.audit(store, parsed, planned_keys(cat), cat.paths.hub)
    report.corrupt += broken
    removed: list[str] = []
    unlinked: list[str] = []
    if repair:
        unlinked = _unlink(store, report, as_json)  # first: removing an artifact uses tmp/
        for key in sorted(report.damaged):
            store.remove(key)
            removed.append(key)
            if not as_json:
                print(f"   removed damaged artifact {key[:12]}; the next build rebuilds it")
    if as_json:
        print(json.dumps({**report.as_dict(), "removed": removed, "unlinked": unlinked}, indent=2))
    else:
        print(report.render())
    return report.exit_code()


def _unlink(store: Store, report: integrity.Report, as_json: bool) -> list[str]:
    """Remove each link verify found, only the link; return their paths."""
    done = []
    for link in report.linked:
        if links.remove(store, link):
            done.append(str(link.path))
            if not as_json:
                print(
                    f"   removed the link {link.path} (only the link: {link.target} is untouched)"
                )
    return done
