"""What the site shows: recipes joined with their manifests, facets and groupings.

Pure data, no rendering. The recipe schema grows in parallel with the site
(precision enums, variants, build.target, tags, owners, known_limitations,
companions), so optional fields are read defensively here, once, and templates
only ever see plain values (they run under StrictUndefined).

The rule the whole site follows: only a manifest proves anything. A recipe without
a manifest, or whose manifest records another checkpoint pin than the recipe now
declares, is "not built", whatever it claims. A manifest that cannot be read proves
nothing either, but it is no "not built": the pages say "manifest unreadable" and why.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

from kiln.catalog import Catalog
from kiln.errors import KilnError, printable
from kiln.evidence import manifest
from kiln.evidence.stale import Stale
from kiln.hostinfo import HostClass, host_class
from kiln.schema import Evidence, Manifest, Recipe, Thresholds

NOT_BUILT = "not built"
# Issue 37: an invalid manifest was shown as "not built", hiding that evidence exists.
UNREADABLE = "manifest unreadable"
UNKNOWN = "unknown"
# Facets of the index, in display order: key -> label (a label lowercased is its key).
FACETS: dict[str, str] = {
    "architecture": "Architecture",
    "task": "Task",
    "modality": "Modality",
    "precision": "Precision",
    "variant": "Variant",
    "backend": "Backend",
    "target": "Target",
    "host": "Host",
    "scope": "Scope",
    "verdict": "Verdict",
}
# What a recipe's model takes as input, by its task (issue 40): read off the task, the
# one place the site decides it, so no recipe declares it. Every other task reads text.
TEXT = "text"
MODALITIES: dict[str, str] = {
    "image-text-to-text": "image+text",
    "automatic-speech-recognition": "audio",
}


def modality(task: str) -> str:
    """The input a recipe of `task` takes: text, image+text or audio."""
    return MODALITIES.get(task, TEXT)


# The catalog's order: what passes first, then what was measured and failed, what
# could not run here, and what proves nothing yet; by name within each.
EVIDENCE_ORDER = (
    *("pass", "quality-fail", "build-fail", "unsupported-here", "not-run"),
    *(UNREADABLE, NOT_BUILT),
)


def get(obj: Any, dotted: str, default: Any = None) -> Any:
    """`obj.a.b`, or `default` where any part is missing or None (fields may not exist yet)."""
    for part in dotted.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else getattr(obj, part, None)
        if obj is None:
            return default
    return obj


def text(value: Any) -> str:
    """A schema value as the site writes it: enums by value, models by their text."""
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, str):
        return value
    for attr in ("text", "description", "name", "id"):
        found = getattr(value, attr, None)
        if isinstance(found, str):
            return found
    return str(value)


def texts(value: Any) -> list[str]:
    """An optional string or list of strings (or models) as a list of strings."""
    if value is None:
        return []
    if isinstance(value, (str, Enum)) or not isinstance(value, (list, tuple, set, frozenset)):
        return [text(value)]
    return [text(v) for v in value]


def slug(value: str) -> str:
    """A file-name-safe form of a value: lowercase letters, digits, '_' and '-'."""
    return re.sub(r"[^a-z0-9_]+", "-", value.lower()).strip("-") or "x"


class Slugs:
    """Unique slugs per namespace: two values never share a page."""

    def __init__(self) -> None:
        self._by_value: dict[tuple[str, str], str] = {}
        self._taken: set[tuple[str, str]] = set()

    def __call__(self, namespace: str, value: str) -> str:
        if (namespace, value) not in self._by_value:
            base, n = slug(value), 1
            candidate = base
            while (namespace, candidate) in self._taken:
                n += 1
                candidate = f"{base}-{n}"
            self._taken.add((namespace, candidate))
            self._by_value[(namespace, value)] = candidate
        return self._by_value[(namespace, value)]


# Device names in evidence -> the target the index filters on, when a recipe has no
# build.target of its own.
_DEVICE_TARGETS = (("cpu", "cpu"), ("cuda", "gpu"), ("tensorrt", "gpu"), ("gpu", "gpu"))


def _target(recipe: Recipe, latest: Evidence | None) -> str:
    declared = get(recipe, "build.target")
    if declared is not None:
        return text(declared)
    if latest is None:
        return UNKNOWN
    device = str(latest.backend.get("device", "")).lower()
    return next((t for key, t in _DEVICE_TARGETS if key in device), device or UNKNOWN)


@dataclass(frozen=True)
class Checkpoint:
    """One pinned checkpoint of a recipe (the model or a companion) and its locked files."""

    role: str
    repo: str
    revision: str
    architecture: str | None
    files: list[Any]


def _companions(recipe: Recipe, lock: Any) -> list[Checkpoint]:
    declared = get(recipe, "companions", [])
    items = list(declared.items()) if isinstance(declared, dict) else [(None, c) for c in declared]
    locked = get(lock, "companions", []) if lock is not None else []
    locked_list = list(locked.values()) if isinstance(locked, dict) else list(locked)
    out = []
    for role, c in items:
        repo = get(c, "title") or get(c, "repo") or get(c, "model.repo") or ""
        revision = get(c, "at") or get(c, "revision") or get(c, "model.revision") or ""
        pin = get(c, "pin")
        match = next((x for x in locked_list if get(x, "pin") == pin), None)
        name = role or get(c, "role") or get(c, "name") or "companion"
        files = list(get(match, "files", []))
        out.append(Checkpoint(text(name), repo, revision, get(match, "architecture"), files))
    return out


@dataclass(frozen=True)
class Claim:
    """What one evidence record claims for a recipe on one host class: the latest record
    of the recipe's current build (the lock's validate step) on that host class."""

    entry: Entry
    index: int  # the record's number in the manifest (the page's #evidence-<index>)
    record: Evidence
    host: HostClass

    @property
    def verdict(self) -> str:
        return self.record.verdict

    @property
    def scope(self) -> str:
        return manifest.scope(self.record)

    @property
    def href(self) -> str:
        return f"{self.entry.url}#evidence-{self.index}"


@dataclass
class Entry:
    """One recipe as the site shows it."""

    name: str
    recipe: Recipe
    thresholds: Thresholds
    manifest: Manifest | None
    facets: dict[str, str] = field(default_factory=dict)
    stale_reason: Stale | None = None  # what `doit check` says (kiln.evidence.stale)
    # unsupported here: the recipes of its checkpoint, precision, variant, backend that pass
    # somewhere (set by entries(); their host classes say what would run it)
    runs_on: list[Entry] = field(default_factory=list, repr=False)
    target_hosts: list[HostClass] = field(default_factory=list)  # GPUs that passed its target
    unreadable: str | None = None  # why its manifest could not be read (then `manifest` is None)
    past: list[dict[str, Any]] = field(default_factory=list)  # its history's lines (ci, nightly)

    @property
    def pin_moved(self) -> bool:
        """The manifest records another checkpoint pin than the recipe declares: its
        evidence proves nothing about the recipe as written (it is "not built")."""
        if self.manifest is None:
            return False
        lock = self.manifest.lock.model
        return lock.pin != self.recipe.model.pin

    @property
    def stale(self) -> bool:
        """Stale as `doit check` means it (the lock no longer matches the recipe, or the
        verdict was judged under other gates), or the pin moved."""
        return self.pin_moved or self.stale_reason is not None

    @property
    def described(self) -> str:
        """Where the checkpoint comes from and what it is, from the lock once built."""
        if self.manifest is not None and not self.pin_moved:
            return self.manifest.lock.model.described
        return self.recipe.model.described

    @property
    def history(self) -> list[Evidence]:
        return list(self.manifest.evidence) if self.manifest else []

    @property
    def latest(self) -> Evidence | None:
        """The record that decides the verdict (kiln.evidence.manifest.headline): of the
        lock's build, nightly over ci over a person's build, then the newest."""
        return None if self.pin_moved else manifest.headline(self.manifest)

    @property
    def outranked(self) -> list[Evidence]:
        """Records newer than the headline's, of a lighter scope (a person's build after
        a ci run): shown in the history, never the headline."""
        latest = self.latest
        if latest is None:
            return []
        weight = manifest.SCOPES.index(manifest.scope(latest))
        return [
            e
            for e in self.history
            if e.date > latest.date and manifest.SCOPES.index(manifest.scope(e)) > weight
        ]

    @property
    def host(self) -> HostClass | None:
        """Where the deciding record was validated."""
        return host_class(self.latest.host) if self.latest else None

    @property
    def scope(self) -> str | None:
        return manifest.scope(self.latest) if self.latest else None

    @cached_property
    def claims(self) -> list[Claim]:
        """One claim per host class the current build was validated on, the deciding
        record's host first: a record of an older build (another validate step key)
        proves nothing about this one."""
        if self.latest is None or self.manifest is None:
            return []
        key = self.latest.step_key
        found: dict[str, Claim] = {}
        for i, ev in enumerate(self.history):
            if ev.step_key == key:
                cls = host_class(ev.host)
                found.pop(cls.key, None)
                found[cls.key] = Claim(self, i, ev, cls)
        return list(reversed(found.values()))  # the latest record's host comes first

    @property
    def rank(self) -> tuple[int, str]:
        """The catalog's sort key: by evidence (EVIDENCE_ORDER), then by name."""
        order = EVIDENCE_ORDER.index(self.state) if self.state in EVIDENCE_ORDER else 99
        return order, self.name

    @property
    def verdict(self) -> str:
        """The latest record's verdict, or "not built" when no manifest proves anything
        (the API's Verdict)."""
        return self.latest.verdict if self.latest else NOT_BUILT

    @property
    def state(self) -> str:
        """What the pages show: the verdict, or "manifest unreadable"."""
        return UNREADABLE if self.unreadable else self.verdict

    @property
    def url(self) -> str:
        return f"recipes/{self.name}.html"

    @property
    def evidence_url(self) -> str | None:
        """The evidence record that decides this recipe's verdict, relative to the site root."""
        latest = self.latest
        return f"{self.url}#evidence-{self.history.index(latest)}" if latest else None

    @property
    def architecture(self) -> str | None:
        if self.manifest and not self.pin_moved:
            return self.manifest.lock.model.architecture
        return None

    @cached_property
    def checkpoints(self) -> list[Checkpoint]:
        lock = self.manifest.lock if self.manifest and not self.pin_moved else None
        main = Checkpoint(
            "model",
            self.recipe.model.title,
            self.recipe.model.at,
            lock.model.architecture if lock else None,
            list(lock.model.files) if lock else [],
        )
        return [main, *_companions(self.recipe, lock)]

    def strings(self, dotted: str) -> list[str]:
        return texts(get(self.recipe, dotted))

    @property
    def search(self) -> str:
        """What the index's search box matches, lowercased."""
        words = [self.name, self.recipe.description, self.recipe.model.title]
        words += [*self.facets.values(), *self.strings("tags"), *self.strings("owners")]
        return " ".join(words).lower()


def _facets(e: Entry) -> dict[str, str]:
    r = e.recipe
    nothing = UNREADABLE if e.unreadable else NOT_BUILT
    return {
        "architecture": e.architecture or UNKNOWN,
        "task": text(get(r, "task", UNKNOWN)),
        "modality": modality(text(get(r, "task", UNKNOWN))),
        "precision": text(get(r, "precision.weights", UNKNOWN)),
        "variant": text(get(r, "execution.variant", UNKNOWN)),
        "backend": _backend(r),
        "target": _target(r, e.latest),
        "host": e.host.label if e.host else nothing,
        "scope": e.scope or nothing,
        "verdict": e.state,
    }


def _backend(r: Any) -> str:
    """The backend facet, with a tensor-parallel engine's world size ("inductor tp2")."""
    backend = text(get(r, "build.backend", UNKNOWN))
    tp = get(r, "build.tensor_parallel", 1)
    return f"{backend} tp{tp}" if isinstance(tp, int) and tp > 1 else backend


def by_evidence(items: list[Entry]) -> list[Entry]:
    """The catalog's order: passing first, then quality-fail, unsupported-here, not built."""
    return sorted(items, key=lambda e: e.rank)


def _alternatives(items: list[Entry]) -> None:
    """For each recipe that is unsupported here: the recipes of the same checkpoint,
    precision, variant and backend that pass somewhere (the host class they pass on
    says what would run it), and for a GPU target the GPU host classes that passed
    recipes of that target."""

    def same(e: Entry) -> tuple[object, ...]:
        r = e.recipe
        return (r.model.title, r.precision.model_dump_json(), r.execution.variant, r.build.backend)

    for e in items:
        if e.verdict == "unsupported-here":
            e.runs_on = [
                o for o in items if o is not e and o.verdict == "pass" and same(o) == same(e)
            ]
            target = text(get(e.recipe, "build.target", "cpu"))
            if target != "cpu":  # a GPU target: the GPU host classes that passed it
                found = {
                    c.host.key: c.host
                    for o in items
                    if text(get(o.recipe, "build.target", "cpu")) == target
                    for c in o.claims
                    if c.verdict == "pass" and c.host.kind == "gpu"
                }
                e.target_hosts = sorted(found.values(), key=lambda h: h.label)


def entries(catalog: Catalog, stale: list[Stale] | None = None) -> list[Entry]:
    """Every recipe joined with its manifest, by name; `stale`: what `doit check` finds
    stale (kiln.evidence.stale.find), computed here when not given."""
    if stale is None:
        from kiln.evidence.stale import find

        stale = find(catalog)
    why = {s.recipe: s for s in stale}
    out = []
    for name, recipe in sorted(catalog.recipes.items()):
        found, unreadable = read_manifest(catalog, name)
        thresholds = catalog.thresholds[recipe.validation.thresholds]
        entry = Entry(
            name, recipe, thresholds, found, stale_reason=why.get(name), unreadable=unreadable
        )
        entry.past = manifest.history(catalog.paths, name)
        entry.facets = _facets(entry)
        out.append(entry)
    _alternatives(out)
    return out


def read_manifest(catalog: Catalog, name: str) -> tuple[Manifest | None, str | None]:
    """The recipe's manifest (None when it has none), or None and why it cannot be read:
    invalid JSON, a schema violation, or the manifest of another recipe."""
    path = catalog.paths.manifest(name)
    shown = catalog.paths.rel(path)
    try:
        found = manifest.known(catalog.paths, name, shown)  # with what a build here kept
    except KilnError as exc:
        return None, why_unreadable(exc)
    if found is not None and found.recipe != name:
        other = printable(repr(found.recipe))  # the file's own words: no escape reaches a terminal
        return None, f"{shown}: it is the manifest of recipe {other}, not {name!r}"
    return found, None


def why_unreadable(exc: KilnError, most: int = 3) -> str:
    """A reader's problems on one line each, snippets left out (they are for terminals)."""
    lines = [p.render().split("\n")[0] for p in exc.problems]
    more = f"; and {len(lines) - most} more" if len(lines) > most else ""
    return "; ".join(lines[:most]) + more


@dataclass(frozen=True)
class FacetValue:
    value: str
    slug: str
    count: int

    def url(self, facet: str) -> str:
        return f"browse/{facet}/{self.slug}.html"


@dataclass(frozen=True)
class Group:
    """Recipes that share something: a checkpoint repo or an architecture."""

    key: str
    slug: str
    entries: list[Entry]

    @property
    def architectures(self) -> list[str]:
        return sorted({e.architecture for e in self.entries if e.architecture})

    @property
    def repos(self) -> list[str]:
        return sorted({e.recipe.model.title for e in self.entries})

    @property
    def revisions(self) -> list[str]:
        return sorted({e.recipe.model.at for e in self.entries})


def facet_values(items: list[Entry], slugs: Slugs) -> dict[str, list[FacetValue]]:
    counts: dict[str, dict[str, int]] = {f: defaultdict(int) for f in FACETS}
    for e in items:
        for f, v in e.facets.items():
            counts[f][v] += 1
    return {
        f: [FacetValue(v, slugs(f, v), n) for v, n in sorted(counts[f].items())] for f in FACETS
    }


def groups(items: list[Entry], key: str, slugs: Slugs) -> list[Group]:
    """Group by 'repo' (model pages) or 'architecture' (built recipes only)."""
    found: dict[str, list[Entry]] = defaultdict(list)
    for e in items:
        value = e.recipe.model.title if key == "repo" else e.architecture
        if value:
            found[value].append(e)
    return [Group(k, slugs(key, k), found[k]) for k in sorted(found)]
