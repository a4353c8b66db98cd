"""`doit plan`: what `doit build recipe=NAME` would run, with step keys, and why each
step is stale against the manifest's lock. `format=json` prints the same as one
JSON document: [{"recipe", "manifest", "steps": [{"kind", "role", "key", "name",
"state" ("up to date" or "will run"), "reasons"}]}]."""

from __future__ import annotations

import json
from typing import Any

from kiln.commands.workspace import catalog, plan_in, selected, store
from kiln.errors import KilnError
from kiln.evidence import manifest, review


def plans(recipe: str | None) -> list[dict[str, Any]]:
    """Every step of each selected recipe with its key, state and why it is stale. A
    preview writes nothing, not even the parse cache."""
    cat, artifacts = catalog(save=False), store()
    out = []
    for name in selected(recipe, cat):
        p = plan_in(cat, name)
        try:
            found = manifest.read(cat.paths.manifest(name))
        except KilnError:
            found = None
        why = dict((s.key, r) for s, r in review.staleness(p, found.lock if found else None).steps)
        steps = [
            {
                "kind": s.kind,
                "role": s.role,
                "key": s.key,
                "name": s.name,
                "state": "up to date" if artifacts.has(s.key) else "will run",
                "reasons": why.get(s.key, []) if found else [],
            }
            for s in p.steps
        ]
        out.append(
            {"recipe": name, "manifest": cat.paths.rel(cat.paths.manifest(name)), "steps": steps}
        )
    return out


def show_plan(recipe: str | None, format: str = "text") -> None:
    found = plans(recipe)
    if format == "json":
        print(json.dumps(found, indent=2))
        return
    for item in found:
        print(f"plan for {item['recipe']}:")
        for s in item["steps"]:
            reason = f"  <- {'; '.join(s['reasons'])}" if s["reasons"] else ""
            print(f"  {s['kind']:<9} {s['key'][:12]}  {s['state']:<10}  {s['name']}{reason}")
        print(f"  manifest  {item['manifest']}")
