"""`doit gc`: remove what no build can need, conservatively.

Removed: temp dirs of builds that are no longer running, entries of `objects/` with
no artifact record, artifacts that no manifest's lock and no current plan of any
recipe references, and temp files an interrupted atomic write left behind.

"No longer running" is decided by the key's build lock, not by age: a build holds
its key's lock for as long as its temp dir exists, and the OS drops the lock when
the build dies. Anything whose lock is held is skipped. Temp files of atomic writes
have no lock; they are removed once older than a minute (a write takes
milliseconds).

gc acts only on real folders and regular files of the store (issue 37): when a link
sits anywhere in the layout (`tmp/` linked to a bigger disk, an entry linked out) it
removes nothing and names each link (kiln/store/links.py); `doit verify repair=1`
removes them, only them.
"""

from __future__ import annotations

import contextlib
import fnmatch
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kiln.errors import KilnError, Problem
from kiln.fsio import first_link, real_entries, remove_tree
from kiln.store import Store, check_key, keylock, links

TEMP_FILE_AGE = 60.0  # seconds
UNKNOWN_AGE = 3600.0  # a temp entry whose name carries no key: wait an hour


@dataclass(frozen=True)
class Candidate:
    path: Path
    kind: str  # temp, partial, unreferenced, temp-file
    why: str
    key: str | None
    size: int


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())


def _key_of(name: str) -> str | None:
    try:
        return check_key(name.split(".")[0])
    except KilnError:
        return None


def _free(store: Store, key: str | None, path: Path, age: float = UNKNOWN_AGE) -> bool:
    """Is nothing building `key` right now? (No key: is `path` old enough?)"""
    if key is None:
        return time.time() - path.lstat().st_mtime > age
    if first_link(store.root, "locks", f"{key}.lock") is not None:
        return False  # its lock cannot be taken without following a link: leave it
    lock = keylock.try_hold(store.lock_path(key))
    if lock is None:
        return False
    lock.release()
    return True


def candidates(store: Store, keep: set[str], sweep: Iterable[Path] = ()) -> Iterator[Candidate]:
    """What gc would remove, without removing anything. Only real folders are listed
    and nothing reached through a link is a candidate."""
    for entry in real_entries(store.root / "tmp"):
        key = _key_of(entry.name)
        if _free(store, key, entry):
            yield Candidate(
                entry, "temp", "temp dir of a build that is not running", key, _size(entry)
            )
    for shard in real_entries(store.root / "objects"):
        for entry in real_entries(shard):
            key = _key_of(entry.name)
            whole = key is not None and store.object_dir(key) == entry and store.has(key)
            if whole and key in keep:
                continue
            if _free(store, key, entry):
                kind, why = (
                    ("unreferenced", "no manifest or current plan uses it")
                    if whole
                    else ("partial", "an entry with no artifact record")
                )
                yield Candidate(entry, kind, why, key, _size(entry))
    for folder in [store.root / "locks", *sweep]:
        for f in (f for f in real_entries(folder) if fnmatch.fnmatch(f.name, ".*.tmp")):
            if time.time() - f.lstat().st_mtime > TEMP_FILE_AGE:
                yield Candidate(f, "temp-file", "left by an interrupted write", None, _size(f))


def collect(
    store: Store, keep: set[str], sweep: Iterable[Path] = (), dry_run: bool = False
) -> list[Candidate]:
    """Remove every candidate (re-checked under its lock); return what was (or would be)
    removed. Refused, removing nothing, while the store's layout holds a link."""
    refuse_links(store)
    done = []
    for c in candidates(store, keep, sweep):
        if dry_run:
            done.append(c)
            continue
        lock = keylock.try_hold(store.lock_path(c.key)) if c.key else None
        if c.key and lock is None:
            continue  # a build started since we looked
        try:
            if (
                c.kind in ("unreferenced", "partial")
                and c.key
                and c.path == store.object_dir(c.key)
            ):
                store.remove(c.key)  # out of objects/ first, so a kill leaves no half entry
            else:
                remove_tree(c.path)
            done.append(c)
        finally:
            if lock is not None:
                with contextlib.suppress(OSError):
                    lock.release()
    return done


def refuse_links(store: Store) -> None:
    """Collect nothing while a link sits in the layout: each is named with its target
    and the fix, as verify reports it."""
    found = links.find(store)
    if found:
        raise KilnError([_refusal(store, link) for link in found])


def _refusal(store: Store, link: links.Link) -> Problem:
    return Problem(f"not collecting garbage: {link}", None, link.fix(store.root))
