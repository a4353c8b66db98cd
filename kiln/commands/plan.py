"""`doit plan`: what `doit build recipe=NAME` would run, with step keys, and why each
step is stale against the manifest's lock."""

from __future__ import annotations

from kiln.commands import review
from kiln.commands.workspace import catalog, plan_in, selected, store
from kiln.errors import KilnError
from kiln.evidence import manifest


def show_plan(recipe: str | None) -> None:
    """Print every step of each recipe with its key and state. A preview writes
    nothing, not even the parse cache."""
    cat, artifacts = catalog(save=False), store()
    for name in selected(recipe, cat):
        p = plan_in(cat, name)
        try:
            found = manifest.read(cat.paths.manifest(name))
        except KilnError:
            found = None
        why = dict((s.key, r) for s, r in review.staleness(p, found.lock if found else None).steps)
        print(f"plan for {name}:")
        for s in p.steps:
            state = "up to date" if artifacts.has(s.key) else "will run"
            reason = f"  <- {'; '.join(why[s.key])}" if s.key in why and found else ""
            print(f"  {s.kind:<9} {s.key[:12]}  {state:<10}  {s.name}{reason}")
        print(f"  manifest  {cat.paths.rel(cat.paths.manifest(name))}")
