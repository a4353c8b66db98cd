"""File-system primitives the store and the manifests share: hashing, durable writes,
confinement of data-derived paths, read-only trees.

Every write here goes through `os.write`, `os.fsync`, `os.replace` and `os.mkdir`, and
nothing else, so a disk that fails (ENOSPC, EIO) fails in one of those calls and the
caller can say which one (tests inject faults at each of them).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path, PurePosixPath

from kiln.errors import KilnError
from kiln.pins import sha256_file as sha256_file  # one digest rule, kiln.pins

_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def fsync_dir(path: Path) -> None:
    """Make a rename or a new entry in `path` durable (POSIX needs the directory synced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_new(path: Path, data: bytes, *, sync: bool = False) -> None:
    """Create `path` (never through a symlink) and write all of `data`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Write a file so that readers see the old or the new bytes, never a mix: a temp
    file next to the target, fsync, rename, fsync the directory. `durable=False`
    skips both fsyncs, for a cache that checks its own bytes (after a crash, a torn
    file is only a miss): they cost more than the rest of the write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write_new(tmp, data, sync=durable)
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def inside(root: Path, name: str, what: str = "path") -> Path:
    """`root / name`, refusing any name that could lead out of `root`.

    Names come from data (recipes, manifests, builders), so they are checked as
    text first (NUL, backslash, absolute, `..`), then resolved, so that a symlink
    planted inside `root` cannot lead out either."""
    bad = ""
    if not name or "\x00" in name:
        bad = "is empty or holds a NUL byte"
    elif "\\" in name:
        bad = "holds a backslash"
    else:
        pure = PurePosixPath(name)
        if pure.is_absolute() or ".." in pure.parts or pure.parts in ((), (".",)):
            bad = "is absolute or climbs out with '..'"
    if not bad:
        target = (root / name).resolve()
        base = root.resolve()
        if target == base or not target.is_relative_to(base):
            bad = "resolves outside its root (a symlink?)"
    if bad:
        raise KilnError.one(f"{what} {name!r} {bad}", None, f"names must stay inside {root}")
    return root / name


def first_link(root: Path, *parts: str) -> Path | None:
    """The first of `root/a`, `root/a/b`, ... (for `parts` a, b, ...) that is a symbolic
    link, or None. `root` itself may be one: it is where the user chose to keep the tree.
    Stops at the first part that is absent (nothing below it exists either)."""
    path = root
    for part in parts:
        path = path / part
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return path
        except OSError:
            return None
    return None


def plain_file(root: Path, *parts: str) -> bool:
    """Is `root/parts...` a regular file reached through real directories only (no
    symbolic link on the way, none at the end)? lstat per part: a no-op build asks this
    of every step."""
    path = str(root)
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            return False
        if not (stat.S_ISREG(mode) if i == len(parts) - 1 else stat.S_ISDIR(mode)):
            return False
    return True


def real_entries(folder: Path) -> list[Path]:
    """The entries of `folder` that are not symbolic links, sorted. None at all when
    `folder` is itself a link or not a directory: whoever lists a folder to act on
    what it holds must never reach through a link."""
    try:
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return []
        with os.scandir(folder) as it:
            return sorted(Path(e.path) for e in it if not e.is_symlink())
    except OSError:
        return []


def link_target(path: Path) -> str:
    """Where the symbolic link `path` points, made absolute, for messages ('?' when it
    cannot be read)."""
    try:
        return os.path.normpath(os.path.join(path.parent, os.readlink(path)))
    except OSError:
        return "?"


def make_read_only(root: Path, *, top: bool = True) -> None:
    """Clear the write bits of every file and directory under `root` (never following a
    symlink: chmod through one would change a file outside the tree)."""
    for p in root.rglob("*"):
        mode = p.lstat().st_mode
        if not stat.S_ISLNK(mode):
            p.chmod(mode & ~_WRITE_BITS)
    if top:
        root.chmod(root.stat().st_mode & ~_WRITE_BITS)


def remove_tree(root: Path) -> None:
    """Remove a (possibly read-only) tree. A file in a writable directory can be removed
    whatever its own mode, so opening up the real directories is enough."""
    if not root.exists() and not root.is_symlink():
        return
    if root.is_symlink() or not root.is_dir():
        root.unlink()
        return
    for d in [root, *root.rglob("*")]:
        if d.is_dir() and not d.is_symlink():
            with contextlib.suppress(OSError):
                d.chmod(0o755)
    shutil.rmtree(root)


def describe(exc: OSError) -> str:
    """'No space left on device (ENOSPC)'."""
    code = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc)
    return f"{reason} ({code})" if code else reason
