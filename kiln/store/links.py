"""Symbolic links in the store's layout: found, named with their targets, removed (only
the link).

Nothing in the layout is ever a link. Issue 37: with `tmp/` or `locks/` linked to a
folder on a bigger disk, gc deleted what it found there, kiln's or not; an entry or
a shard linked out was "partial" to verify, stayed so after `repair=1`, and a build
called it up to date; a record linked to a file outside passed verify. So gc, verify
and repair act on real directories and regular files only, and a link is damage:
reported with its target, never followed, never deleted through. Repair removes the
link itself; a build treats a linked entry as absent and makes it again.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kiln.fsio import first_link, link_target, real_entries
from kiln.store import RECORD, Store

# How deep each top folder of the layout is kiln's (kiln/store/__init__.py draws it):
# objects/<shard>/<key>, blobs/<shard>/<sha>, tmp/<entry>, locks/<file>, log/<file>,
# cache/<kind>/<file>. Below that an artifact's own files are damage()'s to judge.
LAYOUT = {"objects": 2, "blobs": 2, "tmp": 1, "locks": 1, "log": 1, "cache": 2}

# A store on a bigger disk is a store moved whole: a publish renames tmp/<entry> into
# objects/, which the OS does only within one filesystem.
_MOVE = "to keep the store on another disk, point KILN_STORE at a folder there"


@dataclass(frozen=True)
class Link:
    """One symbolic link where the store's layout has a real folder or file."""

    path: Path
    target: str
    key: str | None = None  # set for an artifact record: repair removes its whole entry

    def __str__(self) -> str:
        return f"{self.path} is a symbolic link to {self.target}"

    def fix(self, root: Path) -> str:
        """What to do about it, for this place in the layout."""
        fix = (
            "kiln never follows a link in its store; `doit verify repair=1` removes the "
            "link (only the link)"
        )
        top = self.path.relative_to(root).parts
        if top[0] == "objects" and len(top) > 1:
            return fix + " and the next `doit build` makes the artifact again"
        if len(top) == 1 and top[0] in ("objects", "tmp", "locks"):
            return f"{fix}; {_MOVE}"
        return fix


def refusal(link: Path, root: Path) -> tuple[str, str]:
    """(cause, fix) for a build or a lock that meets a link where a folder or file of
    the store should be; the error's location names the link."""
    return f"is a symbolic link to {link_target(link)}", Link(link, "").fix(root)


def find(store: Store) -> list[Link]:
    """Every link in the store's layout, in path order."""
    found: list[Link] = []
    for name, depth in LAYOUT.items():
        found += _walk(store.root / name, depth)
    found += _records(store)
    return sorted(found, key=lambda link: link.path)


def _walk(path: Path, depth: int) -> Iterator[Link]:
    if path.is_symlink():
        yield Link(path, link_target(path))
        return
    if depth == 0:
        return
    try:
        with os.scandir(path) as it:
            children = sorted(Path(e.path) for e in it)
    except OSError:
        return  # absent, or not a folder: nothing below it to follow
    for child in children:
        yield from _walk(child, depth - 1)


def _records(store: Store) -> Iterator[Link]:
    """Artifact records that are links: a copy of a good record outside the store would
    otherwise vouch for whatever the entry holds."""
    for shard in real_entries(store.root / "objects"):
        for entry in real_entries(shard):
            record = entry / RECORD
            if record.is_symlink():
                yield Link(record, link_target(record), entry.name)


def remove(store: Store, link: Link) -> bool:
    """Remove the link itself, never what it points at; False when it is no longer a
    link, or no longer reached through real folders of the store (then it is not
    ours to remove). An artifact record's link goes with its entry (Store.remove)."""
    rel = link.path.relative_to(store.root).parts
    if first_link(store.root, *rel[:-1]) is not None or not link.path.is_symlink():
        return False
    if link.key is not None:
        store.remove(link.key)
    else:
        link.path.unlink()
    return True
