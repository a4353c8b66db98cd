"""`doit status`: where each recipe stands, one line each (issue 43), instead of
reading `doit plan`'s hundreds of lines.

Per recipe: its latest verdict on this host class (with the scope and date of that
record), its latest verdict on every other host class, whether its manifest is stale
(kiln.evidence.stale: the lock or the gates no longer match) and whether it is built
here (every step its lock names is in this store). `format=json` prints the same as
one JSON document for bots. Host classes are named as the site names them
(kiln.hostinfo.host_class). Nothing is planned that `doit check` does not plan.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kiln import hostinfo
from kiln.commands.workspace import catalog, selected, store
from kiln.errors import KilnError
from kiln.evidence import manifest, stale
from kiln.schema import Evidence, Manifest


@dataclass
class Row:
    recipe: str
    manifest: str  # "ok", "none" or "unreadable"
    here: Evidence | None = None
    elsewhere: dict[str, Evidence] = field(default_factory=dict)  # host class label -> latest
    stale: str | None = None  # why, in one line
    built_here: bool = False

    def as_dict(self) -> dict[str, Any]:
        def record(e: Evidence | None) -> dict[str, Any] | None:
            return None if e is None else {"verdict": e.verdict, "scope": e.scope, "date": e.date}

        return {
            "recipe": self.recipe,
            "manifest": self.manifest,
            "here": record(self.here),
            "elsewhere": {label: record(e) for label, e in self.elsewhere.items()},
            "stale": self.stale,
            "built_here": self.built_here,
        }


def rows(recipe: str | None) -> tuple[str, list[Row]]:
    """This host's class label, and a row for each selected recipe."""
    cat, artifacts = catalog(save=False), store()
    this = hostinfo.host_class(hostinfo.host())
    names = selected(recipe, cat)
    parsed: dict[str, Manifest | None] = {}
    out = {}
    for name in names:
        path = cat.paths.manifest(name)
        try:
            found = manifest.read(path)
        except KilnError:
            out[name] = Row(name, "unreadable")
            parsed[name] = None
            continue
        if found is None:
            out[name] = Row(name, "none")
            continue
        parsed[name] = found
        out[name] = _row(name, found, this.key, artifacts)
    paths = [cat.paths.manifest(n) for n in parsed]
    for s in stale.find(cat, paths, parsed):
        if s.recipe in out:
            out[s.recipe].stale = s.summary
    return this.label, [out[n] for n in names]


def _row(name: str, found: Manifest, here: str, artifacts: Any) -> Row:
    row = Row(name, "ok", built_here=all(artifacts.has(s.key) for s in found.lock.steps))
    for e in found.evidence:  # oldest first: the last of each host class stays
        cls = hostinfo.host_class(e.host)
        if cls.key == here:
            row.here = e
        else:
            row.elsewhere[cls.label] = e
    return row


def show_status(recipe: str | None, format: str = "text") -> None:
    label, found = rows(recipe)
    if format == "json":
        print(json.dumps({"host_class": label, "recipes": [r.as_dict() for r in found]}, indent=2))
        return
    head = f"here ({label})"
    width = max([len(r.recipe) for r in found] + [6])
    here = max([len(_here(r)) for r in found] + [len(head)])
    print(f"{'recipe':<{width}}  {head:<{here}}  built here  stale  elsewhere")
    for r in found:
        built, old = "yes" if r.built_here else "no", "yes" if r.stale else "no"
        print(f"{r.recipe:<{width}}  {_here(r):<{here}}  {built:<10}  {old:<5}  {_elsewhere(r)}")
    stale_n = sum(1 for r in found if r.stale)
    print(f"{len(found)} recipes; {stale_n} stale (doit check verbose=1 says why)")


def _here(r: Row) -> str:
    if r.manifest != "ok":
        return "manifest unreadable" if r.manifest == "unreadable" else "no manifest"
    if r.here is None:
        return "not validated on this host class"
    return f"{r.here.verdict} ({r.here.scope or 'local'}, {r.here.date[:10]})"


def _elsewhere(r: Row) -> str:
    return (
        "; ".join(
            f"{e.verdict} on {label} ({e.scope or 'local'}, {e.date[:10]})"
            for label, e in sorted(r.elsewhere.items())
        )
        or "-"
    )
