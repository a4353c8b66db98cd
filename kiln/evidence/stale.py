"""Stale: one word, one meaning, for `doit check`, the site and its API.

A manifest is stale when its lock no longer matches what its recipe plans now (a
recipe edit, or only the libraries and kiln's code its steps run: the toolchain),
or when its latest verdict was judged under other gates than the recipe's
thresholds file holds now (kiln/evidence/gates.py). `find()` is the one function
that says which, and why; `doit check` prints it, the site badges it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `doit check` imports this before it knows it must load the catalog
    from kiln.catalog import Catalog
    from kiln.schema import Manifest


@dataclass
class Stale:
    """One stale manifest: why, in one line and step by step, and where it was made."""

    recipe: str
    cause: str  # "recipe" (an edit), "toolchain" (libraries or kiln's code), "gates"
    summary: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    gpu: str | None = None  # the GPU its latest evidence ran on

    @property
    def verb(self) -> str:
        """What makes it current again: gates changed re-judge; anything else rebuilds."""
        return "re-judge" if self.cause == "gates" else "rebuild"

    @property
    def command(self) -> str:
        return f"doit build recipe={self.recipe}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "cause": self.cause,
            "summary": self.summary,
            "gpu": self.gpu,
            "steps": self.steps,
        }


def regated(cat: Catalog, parsed: dict[str, Manifest | None]) -> list[tuple[str, str]]:
    """(recipe, why) for each manifest (parsed, by recipe name) whose latest verdict
    was judged under other gates than its recipe's thresholds file holds now
    (kiln/evidence/gates.py)."""
    from kiln.evidence import gates, manifest

    out = []
    for name, found in parsed.items():
        recipe = cat.recipes.get(name)
        if recipe is None or found is None or not found.evidence:
            continue
        latest = manifest.headline(found)
        if latest is None:
            continue
        which = recipe.validation.thresholds
        now = gates.ref(which, cat.thresholds[which])
        if latest.thresholds == now:
            continue
        if latest.thresholds is None:
            why = f"its {latest.verdict} of {latest.date[:10]} names no gates"
        elif latest.thresholds.name != which:
            why = (
                f"its {latest.verdict} of {latest.date[:10]} was judged under "
                f"thresholds/{latest.thresholds.name}.yaml; the recipe names {which}"
            )
        else:
            why = (
                f"its {latest.verdict} of {latest.date[:10]} was judged under other gates: "
                f"thresholds/{which}.yaml changed since"
            )
        out.append((name, why))
    return out


def _other_python(reason: str, python: str, here: str) -> str:
    """A code digest taken under another Python differs even where the code does not:
    it hashes the syntax tree that Python's `ast` dumps, whose fields change between
    versions (kiln/plan/toolchain.py). Say so, instead of only that the code changed."""
    if not reason.startswith("builder code for "):
        return reason
    return f"{reason}, or only Python did (digested under Python {python}; this host runs {here})"


def _short(reasons: list[str], limit: int = 3) -> str:
    shown = "; ".join(reasons[:limit])
    return shown + (f"; +{len(reasons) - limit} more" if len(reasons) > limit else "")


def find(
    cat: Catalog,
    manifests: list[Path] | None = None,
    parsed: dict[str, Manifest | None] | None = None,
) -> list[Stale]:
    """Every stale manifest of the catalog (`manifests`: those to consider, default
    every manifests/*.json), sorted by recipe: its lock no longer matches, or its
    verdict was judged under other gates. Plans (and the toolchain's digests) only
    when there are manifests; a manifest that does not parse is not stale here (it
    is a problem, which `doit check` reports first). `parsed`: the manifests already
    read, by recipe (`doit status` reads them for their evidence too)."""
    from kiln.errors import KilnError
    from kiln.evidence import manifest, review
    from kiln.plan import toolchain

    if manifests is None:
        manifests = sorted(cat.paths.manifests.glob("*.json"))
    if not manifests:
        return []
    parsed = dict(parsed or {})
    for path in manifests:
        if path.stem in parsed:
            continue
        try:
            parsed[path.stem] = manifest.read(path)
        except KilnError:
            parsed[path.stem] = None

    def gpu_of(name: str) -> str | None:
        found = parsed.get(name)
        latest = manifest.headline(found)
        return latest.host.gpu if latest else None

    here = toolchain.python()
    out = []
    for s in review.manifest_staleness(cat, toolchain.current()):
        if s.recipe not in parsed:
            continue
        found = parsed[s.recipe]
        python = found.lock.toolchain.get("python") if found else None
        stale = s.steps
        if python and python != here:  # the digests hash Python's own syntax trees
            stale = [(st, [_other_python(r, python, here) for r in why]) for st, why in stale]
        reasons = list(dict.fromkeys(r for _, why in stale for r in why))
        edited = review.recipe_changed(s)
        own = [r for r in reasons if not r.startswith("input ")] or reasons
        label = "recipe edit" if edited else "toolchain only"
        summary = f"{label} ({_short(own, 1)}; {len(stale)} steps rebuild)"
        steps = [
            {"kind": st.kind, "role": st.role, "key": st.key, "reasons": why} for st, why in stale
        ]
        cause = "recipe" if edited else "toolchain"
        out.append(Stale(s.recipe, cause, summary, steps, gpu_of(s.recipe)))
    seen = {x.recipe for x in out}
    for name, why in regated(cat, parsed):
        if name not in seen:
            out.append(Stale(name, "gates", why, [], gpu_of(name)))
    return sorted(out, key=lambda x: x.recipe)
