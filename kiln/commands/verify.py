"""`doit verify`: re-hash the store against its records and the manifests' locks.

Exit 0 ok, 4 corrupt or partial, 5 missing, 6 extra (kiln/store/verify.py);
`repair=1` also removes damaged artifacts, so the next build remakes them.
"""

from __future__ import annotations

import json

from kiln.catalog import Catalog
from kiln.commands import workspace
from kiln.commands.upkeep import manifests, planned_keys
from kiln.store import Store
from kiln.store import verify as integrity


def verify(repair: bool, format: str = "text") -> int:
    """`doit verify` on the catalog of KILN_ROOT: its exit code."""
    return audit(workspace.catalog(), workspace.store(), repair, format == "json")


def audit(cat: Catalog, store: Store, repair: bool, as_json: bool = False) -> int:
    """Print what verify found in `store`; return its exit code."""
    parsed, broken = manifests(cat)
    report = integrity.audit(store, parsed, planned_keys(cat), cat.paths.hub)
    report.corrupt += broken
    removed = []
    if repair:
        for key in sorted(report.damaged):
            store.remove(key)
            removed.append(key)
            if not as_json:
                print(f"   removed damaged artifact {key[:12]}; the next build rebuilds it")
    if as_json:
        print(json.dumps({**report.as_dict(), "removed": removed}, indent=2))
    else:
        print(report.render())
    return report.exit_code()
