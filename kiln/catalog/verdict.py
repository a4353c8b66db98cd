"""A clean catalog's verdict, cached in the store: `doit check` of a catalog that has
not changed since it last passed stats its files and reads one small file.

    <store>/cache/verdict/<sha256 of the catalog root>.json
        {"format", "key", "counts": {"recipes", "thresholds", "prompts", "rules"},
         "stale": [kiln.evidence.stale.Stale.as_dict(), ...]}

A catalog with manifests is covered too, with what `doit check` found stale (a stale
manifest is not a problem): its key adds each manifests/*.json with its lstat, every
file under builders/ and runtime/ (their code is in step keys, data files included),
and what is installed (kiln.plan.toolchain.installed: the versions in step keys).

Only a catalog with no problem at all, and no recipe naming a local checkpoint (whose
files every check stats: kiln.pins.local_source), is recorded: whatever fails is loaded, parsed
and judged in full every time, so its problems are always the loader's own. The key
is the sha256 of everything load() and its verdict are a function of:

  * every input, by name, with its lstat (mode, size, mtime_ns, ctime_ns, inode,
    device): each *.yaml entry of recipes/, thresholds/ and prompts/ (yaml_entries,
    the listing load() reads) or the error listing one gave, and the rules file
    (the catalog's own catalog/rules.yaml if it is a file, else this checkout's);
  * the code that judges them: the lstat of every .py file of the kiln package;
  * which checkpoints' config.json the hub cache holds (a tensor-parallel recipe's
    head counts are judged against its checkpoint's where fetched here);
  * the libraries and the interpreter: the lstat of each file at the top of the
    packages that parse and validate (LIBRARIES: pydantic and what it builds on,
    PyYAML; an upgrade or a reinstall writes them all anew), sys.version, -O, and
    PYDANTIC_DISABLE_PLUGINS.

A write changes a file's ctime (and editing one, its size or mtime too), and nothing
sets a ctime back, so an edit after the stat shows in the key, unless it lands in
the clock tick of the ctime the key recorded (git's "racily clean" entries). So a
verdict is recorded only when every file's ctime and mtime are older than RACY_NS
at the time they were stat'ed; this process's own code was imported less than that
before, so an edit between its import and the stat blocks the write too.

Not covered: a hand edit inside a library's subpackage (a change pip makes is), a
file system whose clock runs RACY_NS behind this machine's.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln.catalog import RULES_FILE, rules_file, yaml_entries
from kiln.errors import KilnError
from kiln.fsio import atomic_write
from kiln.paths import Paths

FORMAT = 2
RACY_NS = 2_000_000_000  # as the parse cache: coarse file systems stamp 1-2 s
COUNTS = ("recipes", "thresholds", "prompts", "rules")
# What validates and parses: pydantic and what it builds on, and PyYAML.
LIBRARIES = (
    "pydantic",
    "pydantic_core",
    "annotated_types",
    "typing_inspection",
    "typing_extensions",
    "yaml",
)
_MAX_BYTES = 4 << 20  # a stale list with every step's reasons


@dataclass(frozen=True)
class Inputs:
    """What a verdict is a function of, as stat'ed now."""

    key: str
    racy: bool  # some file changed too recently for its stat to vouch for its bytes


def _stat(path: str | os.DirEntry[str], since: int, out: list[object]) -> bool:
    """Append the lstat of `path` to `out`; True when it changed after `since`."""
    try:
        st = path.stat(follow_symlinks=False) if isinstance(path, os.DirEntry) else os.lstat(path)
    except OSError as exc:
        out.append(f"!{exc.errno}")
        return False
    out.append((st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
    return st.st_ctime_ns > since or st.st_mtime_ns > since


def _folder(folder: Path, since: int, out: list[object]) -> bool:
    return _entries(folder, yaml_entries(folder), since, out)


def _manifests(folder: Path, since: int, out: list[object]) -> bool:
    try:
        with os.scandir(folder) as listed:
            found = sorted((e for e in listed if e.name.endswith(".json")), key=lambda e: e.name)
    except OSError:
        return _entries(folder, None, since, out)
    return _entries(folder, found, since, out)


def _entries(
    folder: Path, entries: list[os.DirEntry[str]] | None, since: int, out: list[object]
) -> bool:
    """Each entry's name and lstat; True when one changed after `since`."""
    if entries is None:
        out.append(f"{folder}: cannot be listed")
        return False
    racy = False
    for entry in entries:
        out.append(entry.name)
        racy |= _stat(entry, since, out)
    return racy


def _tree(root: str, since: int, out: list[object], suffix: str = ".py") -> bool:
    """Every file under `root` ending in `suffix`, with its lstat, in a stable order."""
    racy = False
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(suffix):
                out.append(os.path.join(folder, name))
                racy |= _stat(os.path.join(folder, name), since, out)
    return racy


def _library(name: str, since: int, out: list[object]) -> bool:
    """The top files of an installed package (found, not imported)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not (spec.submodule_search_locations or spec.origin):
        out.append(f"{name}: not found")
        return False
    if not spec.submodule_search_locations:  # a module, not a package
        out.append(spec.origin)
        return _stat(str(spec.origin), since, out)
    racy = False
    for location in spec.submodule_search_locations:
        with os.scandir(location) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_file(follow_symlinks=False):
                    out.append(entry.name)
                    racy |= _stat(entry, since, out)
    return racy


def _fetched_configs(hub: Path) -> list[str]:
    """Which checkpoints' config.json the hub cache holds, by repo folder and revision:
    a split recipe's head counts are judged against the one its pin names where it is
    here (kiln.catalog._fetched_config), so a fetch that brings one judges the catalog
    again. A revision's files never change, so their names are enough (a few dozen
    entries, listed, never read)."""
    found = []
    try:
        with os.scandir(hub) as repos:
            for repo in repos:
                if not repo.name.startswith("models--"):
                    continue
                with (
                    contextlib.suppress(OSError),
                    os.scandir(Path(repo.path) / "snapshots") as revs,
                ):
                    found += [
                        f"{repo.name}/{r.name}"
                        for r in revs
                        if os.path.isfile(Path(r.path) / "config.json")
                    ]
    except OSError:
        return []
    return sorted(found)


def inputs(paths: Paths, steps_code: Sequence[Path] = (), installed: Sequence[str] = ()) -> Inputs:
    """What a verdict is a function of; for a catalog with manifests, the caller adds
    the folders of the code in step keys (every file) and what is installed
    (kiln.plan.toolchain, which this stage does not import)."""
    import kiln

    since = time.time_ns() - RACY_NS
    out: list[object] = [
        f"format {FORMAT}",
        sys.version,
        sys.flags.optimize,  # -O drops asserts
        os.environ.get("PYDANTIC_DISABLE_PLUGINS", ""),
        str(paths.root.resolve()),
    ]
    racy = False
    for folder in (paths.recipes, paths.thresholds, paths.prompts):
        out.append(f"[{folder}]")
        racy |= _folder(folder, since, out)
    own = rules_file(paths)  # follows a symlink, as load() decides: stat what it reads
    out.append(f"[rules {own}]")
    racy |= _stat(str(own or RULES_FILE), since, out)
    out.append("[code]")
    racy |= _tree(os.path.dirname(kiln.__file__), since, out)
    for name in LIBRARIES:
        out.append(f"[{name}]")
        racy |= _library(name, since, out)
    out.append("[manifests]")
    racy |= _manifests(paths.manifests, since, out)
    for folder in steps_code:
        out.append(f"[{folder}]")
        racy |= _tree(str(folder), since, out, suffix="")
    out.append("[fetched configs]")
    out.append(_fetched_configs(paths.hub))
    out.append(["installed", *installed])
    key = hashlib.sha256(repr(out).encode("utf-8", "surrogateescape")).hexdigest()
    return Inputs(key, racy)


def _file(paths: Paths) -> Path:
    name = hashlib.sha256(str(paths.root.resolve()).encode()).hexdigest()[:24]
    return paths.store / "cache" / "verdict" / f"{name}.json"


def _small_file(path: Path) -> bytes:
    """A regular file of at most _MAX_BYTES, never through a symlink or from a FIFO
    (kiln.catalog.yaml reads recipes so; it imports what this module must not)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_BYTES:
            raise ValueError(f"{path}: not a small regular file")
        return os.read(fd, _MAX_BYTES + 1)
    finally:
        os.close(fd)


def read(paths: Paths, found: Inputs) -> tuple[dict[str, int], list[dict[str, Any]]] | None:
    """The counts and the stale manifests (as Stale.as_dict) of the clean verdict
    recorded under exactly these inputs, or None."""
    try:
        data = json.loads(_small_file(_file(paths)))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.keys() != {"format", "key", "counts", "stale"}:
        return None
    counts, stale = data["counts"], data["stale"]
    if data["format"] != FORMAT or data["key"] != found.key or not isinstance(counts, dict):
        return None
    if counts.keys() != set(COUNTS) or not all(type(counts[k]) is int for k in COUNTS):
        return None
    if not isinstance(stale, list) or not all(_stale_shape(x) for x in stale):
        return None
    return {k: counts[k] for k in COUNTS}, stale


def _stale_shape(x: Any) -> bool:
    return (
        isinstance(x, dict)
        and x.keys() == {"recipe", "cause", "summary", "gpu", "steps"}
        and all(isinstance(x[k], str) for k in ("recipe", "cause", "summary"))
        and (x["gpu"] is None or isinstance(x["gpu"], str))
        and isinstance(x["steps"], list)
        and all(isinstance(st, dict) for st in x["steps"])
    )


def write(paths: Paths, found: Inputs, counts: dict[str, int], stale: list[dict[str, Any]]) -> None:
    """Record a clean verdict (not when an input is racy); a store that cannot be
    written only makes the next check slower."""
    if found.racy:
        return
    body = {
        "format": FORMAT,
        "key": found.key,
        "counts": {k: counts[k] for k in COUNTS},
        "stale": stale,
    }
    with contextlib.suppress(OSError, KilnError):
        atomic_write(_file(paths), json.dumps(body).encode(), durable=False)
