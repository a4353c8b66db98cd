"""What `doit build` planned, cached in the store by everything planning reads: a
no-op build of an unchanged tree loads no catalog, plans nothing and imports no
pydantic; it stats files.

    <store>/cache/plans/<sha256 of the catalog root>.json
        line 1   {"format", "sha256" of the rest}
        rest     {"inputs": the inputs key, "recipes": every valid recipe, sorted,
                  "tags": {recipe: [tag, ...]},
                  "steps": {key: [kind, name, options, inputs, material, origin, role]},
                  "plans": {recipe: [step key, ...]}}

The inputs key (`inputs()`) is the sha256 of every file planning could read, each by
its path and its bytes' digest: the catalog's recipes/, thresholds/, prompts/ and
catalog/ folders, and at the code root the code that reads, checks and plans them
and whose digests go into step keys (kiln/, builders/, runtime/, catalog/); what is
installed (every distribution's name and version: those in step keys and locks, and
those that read recipes), and Python's version. Folders are listed afresh, so an added or removed
file is a change; the files' digests come from the stat cache (kiln.statcache), so
an unchanged tree is read by stat alone. Over-approximating is the safe direction:
any other change is a miss, and the build plans as it always did.

A plan read back is the plan itself: every step is rebuilt from its material, and a
step whose key does not come out as recorded makes the entry a miss. The entry is
written by the build command only (`doit plan` and `doit check` never write), and
only from a catalog with no problem, so what a hit gives back is exactly what the
catalog would: a failing recipe is always planned afresh, with its located errors.

`inputs()` also keys what the build remembers about a recipe's manifest
(kiln/commands/build.py, `recorded`): the same manifest, artifacts and inputs give
the same answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
from functools import cache
from pathlib import Path
from typing import Any

from kiln import statcache
from kiln.canonical import key_of
from kiln.errors import KilnError
from kiln.fsio import atomic_write
from kiln.paths import ROOT, Paths
from kiln.plan import toolchain
from kiln.plan.step import Plan, Step

FORMAT = 1
MAX_BYTES = 256 << 20
CATALOG = ("recipes", "thresholds", "prompts", "catalog")  # at the catalog root
CODE = ("kiln", "builders", "runtime", "catalog")  # at the code root


def _files(base: Path, folders: tuple[str, ...]) -> list[str]:
    """Every entry under base/folder, relative to base, sorted: files, and folders
    with a trailing "/" (a link to a folder is listed, not followed; no __pycache__)."""
    out = []
    for folder in folders:
        for top, dirs, names in os.walk(base / folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            rel = os.path.relpath(top, base)
            out += [f"{rel}/{d}/" for d in dirs]
            out += [f"{rel}/{n}" for n in names if not n.endswith(".pyc")]
    return sorted(out)


def _digest(stats: statcache.StatCache, path: Path) -> str:
    """The file's digest; what is not a readable regular file (a FIFO, a dangling link)
    is named by what it is: the catalog reports it, and the key stays a key."""
    try:
        return stats.digest(path)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


@cache
def inputs(paths: Paths, code: Path = ROOT) -> str:
    """The key of everything planning the catalog at `paths` reads (module docstring)."""
    stats = statcache.shared(paths.store)
    material: dict[str, Any] = {"format": FORMAT, "root": os.path.abspath(paths.root)}
    for name, base, folders in (("catalog", paths.root, CATALOG), ("code", code, CODE)):
        material[name] = [
            [rel, "folder" if rel.endswith("/") else _digest(stats, base / rel)]
            for rel in _files(base, folders)
        ]
    material["versions"] = {  # what is installed, by name and version, and Python
        "installed": toolchain.installed(),
        "python-full": platform.python_version(),
    }
    return key_of(material)


def _file(paths: Paths) -> Path:
    name = hashlib.sha256(os.path.abspath(paths.root).encode()).hexdigest()[:24]
    return paths.store / "cache" / "plans" / f"{name}.json"


def _read(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as fh:
            if os.fstat(fh.fileno()).st_size > MAX_BYTES:
                return None
            head, _, body = fh.read().partition(b"\n")
        meta = json.loads(head)
        if meta != {"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest()}:
            return None
        entry = json.loads(body)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


class Cached:
    """A hit: the catalog's valid recipes, their tags, and plans."""

    def __init__(self, entry: dict[str, Any]) -> None:
        self.recipes: list[str] = entry["recipes"]
        self.tags: dict[str, list[str]] = entry["tags"]
        self._steps: dict[str, list[Any]] = entry["steps"]
        self._plans: dict[str, list[str]] = entry["plans"]
        self._built: dict[str, Step] = {}

    def has(self, name: str) -> bool:
        return name in self._plans

    def plan(self, name: str) -> Plan:
        """The plan, its steps rebuilt from their material (KeyError: a step's key
        does not come out as recorded)."""
        return Plan(name, tuple(self._step(key) for key in self._plans[name]))

    def _step(self, key: str) -> Step:
        if key not in self._built:
            kind, name, options, inputs, material, origin, role = self._steps[key]
            step = Step(kind, name, options, inputs, material, tuple(origin), role)
            if step.key != key:
                raise KeyError(key)
            self._built[key] = step
        return self._built[key]


def lookup(paths: Paths, names: list[str] | None) -> tuple[Cached, list[Plan]] | None:
    """The cached plans of `names` (None: every valid recipe), or None on a miss."""
    entry = _read(_file(paths))
    if entry is None or entry.get("inputs") != inputs(paths):
        return None
    try:
        cached = Cached(entry)
        wanted = cached.recipes if names is None else names
        if not all(cached.has(n) for n in wanted):
            return None
        return cached, [cached.plan(n) for n in wanted]
    except (KeyError, TypeError, ValueError):
        return None


def store(paths: Paths, recipes: list[str], tags: dict[str, list[str]], plans: list[Plan]) -> None:
    """Keep the plans of a catalog with no problem (`recipes`: all its valid recipes),
    with those cached before under the same inputs. A cache that cannot be written
    is only slower: errors are ignored."""
    path = _file(paths)
    key = inputs(paths)
    entry = _read(path)
    if entry is None or entry.get("inputs") != key or entry.get("recipes") != recipes:
        entry = {"inputs": key, "recipes": recipes, "tags": tags, "steps": {}, "plans": {}}
    for p in plans:
        for s in p.steps:
            fields = [s.kind, s.name, s.options, s.inputs, s.material, s.origin, s.role]
            entry["steps"][s.key] = fields
        entry["plans"][p.recipe] = [s.key for s in p.steps]
    body = json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode()
    meta = {"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest()}
    with contextlib.suppress(OSError, KilnError):
        atomic_write(path, json.dumps(meta).encode() + b"\n" + body)
        ignore = path.parent.parent / ".gitignore"
        if not ignore.exists():  # a store inside a repository stays out of git
            atomic_write(ignore, statcache.IGNORE)
