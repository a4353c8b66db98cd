"""`doit status`: where each recipe stands, one line each (issue 43), instead of
reading `doit plan`'s hundreds of lines.

Per recipe: its verdict on this host class (with the scope and date of that record,
and whether it is published in manifests/ or only in this store's evidence: a
person's build records there unless published, kiln.evidence.record), its verdict on
every other host class (each the newest of the heaviest scope,
kiln.evidence.manifest.best), whether its manifest is stale
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
    unpublished: list[Evidence] = field(default_factory=list)  # the store's records

    def published(self, e: Evidence | None) -> bool:
        return e is not None and e not in self.unpublished

    def as_dict(self) -> dict[str, Any]:
        def record(e: Evidence | None) -> dict[str, Any] | None:
            if e is None:
                return None
            shown = {"verdict": e.verdict, "scope": manifest.scope(e), "date": e.date}
            return {**shown, "published": self.published(e)}

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
            published = manifest.read(path)
            found = manifest.joined(published, cat.paths, name)
        except KilnError:
            out[name] = Row(name, "unreadable")
            parsed[name] = None
            continue
        if published is not None:
            parsed[name] = published  # what is stale is what is published
        if found is None:
            out[name] = Row(name, "none")
            continue
        ours = [e for e in found.evidence if published is None or e not in published.evidence]
        out[name] = _row(name, found, this.key, artifacts, ours)
    paths = [cat.paths.manifest(n) for n in parsed]
    for s in stale.find(cat, paths, parsed):
        if s.recipe in out:
            out[s.recipe].stale = s.summary
    return this.label, [out[n] for n in names]


def _row(name: str, found: Manifest, here: str, artifacts: Any, ours: list[Evidence]) -> Row:
    built = all(artifacts.has(s.key) for s in found.lock.steps)
    row = Row(name, "ok", built_here=built, unpublished=ours)
    by_class: dict[str, list[Evidence]] = {}
    labels: dict[str, str] = {}
    for e in found.evidence:  # oldest first
        cls = hostinfo.host_class(e.host)
        by_class.setdefault(cls.key, []).append(e)
        labels[cls.key] = cls.label
    for key, records in by_class.items():
        chosen = manifest.best(records)
        if key == here:
            row.here = chosen
        elif chosen is not None:
            row.elsewhere[labels[key]] = chosen
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
    where = "" if r.published(r.here) else ", this store only"
    return f"{r.here.verdict} ({manifest.scope(r.here)}, {r.here.date[:10]}{where})"


def _elsewhere(r: Row) -> str:
    return (
        "; ".join(
            f"{e.verdict} on {label} ({manifest.scope(e)}, {e.date[:10]})"
            for label, e in sorted(r.elsewhere.items())
        )
        or "-"
    )
