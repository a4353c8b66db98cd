"""What the site shows: recipes joined with their manifests, facets and groupings.

Pure data, no rendering. The recipe schema grows in parallel with the site
(precision enums, variants, build.target, tags, owners, known_limitations,
companions), so optional fields are read defensively here, once, and templates
only ever see plain values (they run under StrictUndefined).

The rule the whole site follows: only a manifest proves anything. A recipe without
a manifest, or whose manifest records another checkpoint pin than the recipe now
declares, is "not built", whatever it claims.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any

from kiln.catalog import Catalog
from kiln.errors import KilnError
from kiln.evidence import manifest
from kiln.schema import Evidence, Manifest, Recipe, Thresholds

NOT_BUILT = "not built"
UNKNOWN = "unknown"
# Facets of the index, in display order: key -> label.
FACETS: dict[str, str] = {
    "architecture": "Architecture",
    "task": "Task",
    "precision": "Precision",
    "variant": "Variant",
    "backend": "Backend",
    "target": "Target",
    "verdict": "Verdict",
}


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


@dataclass
class Entry:
    """One recipe as the site shows it."""

    name: str
    recipe: Recipe
    thresholds: Thresholds
    manifest: Manifest | None
    facets: dict[str, str] = field(default_factory=dict)

    @property
    def stale(self) -> bool:
        """The manifest records another checkpoint pin than the recipe declares."""
        if self.manifest is None:
            return False
        lock = self.manifest.lock.model
        return lock.pin != self.recipe.model.pin

    @property
    def described(self) -> str:
        """Where the checkpoint comes from and what it is, from the lock once built."""
        if self.manifest is not None and not self.stale:
            return self.manifest.lock.model.described
        return self.recipe.model.described

    @property
    def history(self) -> list[Evidence]:
        return list(self.manifest.evidence) if self.manifest else []

    @property
    def latest(self) -> Evidence | None:
        return self.history[-1] if self.history and not self.stale else None

    @property
    def verdict(self) -> str:
        return self.latest.verdict if self.latest else NOT_BUILT

    @property
    def url(self) -> str:
        return f"recipes/{self.name}.html"

    @property
    def evidence_url(self) -> str | None:
        """The evidence record that decides this recipe's verdict, relative to the site root."""
        return f"{self.url}#evidence-{len(self.history) - 1}" if self.latest else None

    @property
    def architecture(self) -> str | None:
        return self.manifest.lock.model.architecture if self.manifest and not self.stale else None

    @cached_property
    def checkpoints(self) -> list[Checkpoint]:
        lock = self.manifest.lock if self.manifest and not self.stale else None
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
    return {
        "architecture": e.architecture or UNKNOWN,
        "task": text(get(r, "task", UNKNOWN)),
        "precision": text(get(r, "precision.weights", UNKNOWN)),
        "variant": text(get(r, "execution.variant", UNKNOWN)),
        "backend": text(get(r, "build.backend", UNKNOWN)),
        "target": _target(r, e.latest),
        "verdict": e.verdict,
    }


def entries(catalog: Catalog) -> list[Entry]:
    out = []
    for name, recipe in sorted(catalog.recipes.items()):
        path = catalog.paths.manifest(name)
        try:
            found = manifest.read(path, catalog.paths.rel(path))
        except KilnError:
            found = None  # `doit check` reports it; the site shows "not built"
        if found is not None and found.recipe != name:
            found = None
        thresholds = catalog.thresholds[recipe.validation.thresholds]
        entry = Entry(name, recipe, thresholds, found)
        entry.facets = _facets(entry)
        out.append(entry)
    return out


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
