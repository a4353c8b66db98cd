"""The content-addressed store: artifacts live under the key of the step that made them.

Layout (the store is the truth; doit's DB is only a hint of what is up to date):

    <store>/objects/<key[:2]>/<key>/   a published artifact, read-only
        .kiln-artifact.json            kind, key, name and sha256 of every file
    <store>/tmp/<key>.<random>/        a build in progress (never read)
    <store>/locks/<key>.lock           held while one process builds <key>

Publishing follows what Nix and huggingface_hub do: build into a temp dir inside
the store (same filesystem), fsync every file, write the artifact record, rename
the directory into place (atomic), fsync the parent, then make it read-only. A
killed build leaves only a temp dir, which `gc` removes; a reader never sees half
an artifact.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from kiln.canonical import pretty
from kiln.errors import KilnError, Location

RECORD = ".kiln-artifact.json"
_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old or the new bytes, never a mix."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_key(key: str) -> str:
    if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
        raise KilnError.one(f"{key!r} is not a store key", None, "keys are 64 lowercase hex")
    return key


class Writer:
    """What a builder writes through. Paths cannot leave the artifact's directory."""

    def __init__(self, root: Path, progress: Callable[[str], None] | None = None) -> None:
        self.root = root
        self._progress = progress

    def path(self, name: str) -> Path:
        target = (self.root / name).resolve()
        if not target.is_relative_to(self.root.resolve()) or target == self.root.resolve():
            raise KilnError.one(f"artifact path {name!r} escapes the artifact", None)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write_bytes(self, name: str, data: bytes) -> Path:
        target = self.path(name)
        target.write_bytes(data)
        return target

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_bytes(name, pretty(obj))

    def log(self, message: str) -> None:
        if self._progress:
            self._progress(message)


@dataclass(frozen=True)
class Artifact:
    key: str
    path: Path

    def record(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / RECORD).read_text())
        return data

    def file(self, name: str) -> Path:
        return self.path / name


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root

    def object_dir(self, key: str) -> Path:
        _check_key(key)
        return self.root / "objects" / key[:2] / key

    def has(self, key: str) -> bool:
        return (self.object_dir(key) / RECORD).is_file()

    def get(self, key: str) -> Artifact:
        if not self.has(key):
            raise KilnError.one(f"artifact {key[:12]} is not in the store {self.root}")
        return Artifact(key, self.object_dir(key))

    # A step this host cannot run leaves a note instead of an artifact, so the steps
    # downstream of it, and the manifest, know why there is nothing to use.
    def _note(self, key: str) -> Path:
        return self.root / "unsupported" / f"{_check_key(key)}.txt"

    def unsupported(self, key: str) -> str | None:
        note = self._note(key)
        return note.read_text() if note.exists() else None

    def mark_unsupported(self, key: str, reason: str) -> None:
        atomic_write(self._note(key), reason.encode())

    def clear_unsupported(self, key: str) -> None:
        self._note(key).unlink(missing_ok=True)

    @contextlib.contextmanager
    def lock(self, key: str, what: str, timeout: float = 6 * 3600) -> Iterator[None]:
        """Hold the build lock of one key. flock is released by the OS if we die."""
        path = self.root / "locks" / f"{_check_key(key)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(path)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            print(f"waiting for {what}: {path} is held by another build", flush=True)
            try:
                lock.acquire(timeout=timeout)
            except Timeout:
                raise KilnError.one(
                    f"gave up waiting for {path} after {timeout:.0f} s",
                    Location(str(path)),
                    "check the other build, or remove the lock file if no build runs",
                ) from None
        try:
            yield
        finally:
            lock.release()

    @contextlib.contextmanager
    def publish(self, key: str, meta: dict[str, Any]) -> Iterator[Writer]:
        """Build an artifact in a temp dir; publish it atomically when the block ends."""
        tmp_root = self.root / "tmp"
        tmp_root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=tmp_root, prefix=f"{_check_key(key)}."))
        try:
            yield Writer(tmp)
            self._seal(tmp, key, meta)
            final = self.object_dir(key)
            final.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.rename(tmp, final)
            except OSError:
                if not self.has(key):  # not a lost race: a real failure
                    raise
            _fsync_dir(final.parent)
            _make_read_only(final)
        finally:
            if tmp.exists():
                _remove_tree(tmp)

    def _seal(self, tmp: Path, key: str, meta: dict[str, Any]) -> None:
        files = {}
        for f in sorted(p for p in tmp.rglob("*") if p.is_file()):
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
            files[f.relative_to(tmp).as_posix()] = sha256_file(f)
        record = {**meta, "key": key, "files": files, "created": time.time()}
        atomic_write(tmp / RECORD, pretty(record))
        for d in sorted({tmp, *(p for p in tmp.rglob("*") if p.is_dir())}):
            _fsync_dir(d)

    def verify(self, key: str) -> list[str]:
        """Files of the artifact whose bytes no longer match its record."""
        art = self.get(key)
        bad = []
        for name, digest in art.record()["files"].items():
            path = art.path / name
            if not path.is_file() or sha256_file(path) != digest:
                bad.append(name)
        return bad

    def remove(self, key: str) -> None:
        target = self.object_dir(key)
        if target.exists():
            _remove_tree(target)


def _make_read_only(root: Path) -> None:
    for p in root.rglob("*"):
        mode = p.stat().st_mode
        p.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    root.chmod(root.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _remove_tree(root: Path) -> None:
    # Published artifacts are read-only; a file in a writable directory can be
    # removed whatever its own mode, so opening up the directories is enough.
    for d in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        with contextlib.suppress(OSError):
            d.chmod(0o755)
    shutil.rmtree(root)
