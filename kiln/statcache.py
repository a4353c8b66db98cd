"""File digests cached by stat, as git's index does: a file whose (size, mtime_ns,
ctime_ns, inode) are the ones recorded is not read again; and values derived from a
file's bytes (a Python file's imports), cached by the bytes' digest.

    <store>/cache/stat.json
        line 1   {"format", "sha256" of the rest}
        rest     {"files":   {path: [size, mtime_ns, ctime_ns, ino, cached_ns, sha256]},
                  "derived": {name: {key: value}}}
    <store>/cache/.gitignore   "*": a store inside a repository stays out of git

  digest(path)                the sha256 of the file's bytes
  derive(path, name, make)    make(bytes), once per content: cached under (name, digest)
  recall(name, key) / remember(name, key, value)
                              any value derived from content the caller has digested
                              (a code digest, keyed by its files' digests)
  save()                      write back, only if something changed; commands that must
                              not write to the store (`doit plan`) never call it

`shared(store)` is the one cache of a store in this process: the toolchain's code
digests use it, and so can anything that re-checks files against recorded digests.

Derived values are keyed by content, never by path, so a stale one cannot be
returned for changed bytes; a `name` says what derived them and how (its code's
version), so a change of method misses too. The stat is trusted only as git trusts
it: an entry taken within RACY_NS of its file's last change (mtime or ctime) may hide
a same-size edit in the same clock tick ("racily clean"), so it is confirmed against
the bytes until it is older. ctime catches a rewrite that kept the mtime (`cp -p`,
`touch -d`), the inode a file replaced by another.

Never trusted blindly: the file is written atomically (kiln.fsio) with the sha256 of
its body, checked for shape entry by entry; what does not check out is a miss. A
cache that cannot be read or written is only slower.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kiln.errors import KilnError
from kiln.fsio import atomic_write

T = TypeVar("T")

FORMAT = 1
RACY_NS = 2_000_000_000  # coarse file systems stamp mtimes to 1-2 s
MAX_BYTES = 64 << 20  # a cache file larger than this is not read (rebuilt instead)
MAX_DERIVED = 4096  # values kept per name, besides those used by this process
IGNORE = b"# Created by kiln: a cache of this machine, never committed.\n*\n"
_CHUNK = 1 << 20

# size, mtime_ns, ctime_ns, ino, cached_ns, sha256
_Entry = list[Any]


def _stamp(st: os.stat_result) -> list[int]:
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _sound(entry: Any) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 6
        and all(type(v) is int for v in entry[:5])
        and isinstance(entry[5], str)
        and len(entry[5]) == 64
    )


class StatCache:
    """Digests of files, and values derived from their bytes, cached by stat.

    `path` is the cache file; None keeps the cache in this process only. `racy_ns`:
    how long after a file's last change its entry is confirmed by the bytes."""

    def __init__(self, path: Path | None, racy_ns: int = RACY_NS) -> None:
        self.path = path
        self.racy_ns = racy_ns
        files, derived = self._read() if path is not None else ({}, {})
        self.files: dict[str, _Entry] = files
        self.derived: dict[str, dict[str, Any]] = derived
        self.used: set[str] = set()
        self.used_derived: set[tuple[str, str]] = set()
        self.changed = False
        self.reads = 0  # files this process read (hashed), for tests and benchmarks

    # ------------------------------------------------------------ reading

    def _read(self) -> tuple[dict[str, _Entry], dict[str, dict[str, Any]]]:
        assert self.path is not None
        try:
            with self.path.open("rb") as fh:
                if os.fstat(fh.fileno()).st_size > MAX_BYTES:
                    return {}, {}
                head, _, body = fh.read().partition(b"\n")
            meta = json.loads(head)
            if meta != {"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest()}:
                return {}, {}
            data = json.loads(body)
        except (OSError, ValueError):
            return {}, {}
        if not isinstance(data, dict):
            return {}, {}
        files, derived = data.get("files"), data.get("derived")
        if not isinstance(files, dict) or not isinstance(derived, dict):
            return {}, {}
        return (
            {p: e for p, e in files.items() if isinstance(p, str) and _sound(e)},
            {n: d for n, d in derived.items() if isinstance(n, str) and isinstance(d, dict)},
        )

    def digest(self, path: str | os.PathLike[str]) -> str:
        """The sha256 of the file's bytes; read only when its stat is not the recorded
        one (or the record is racy). OSError when the file cannot be read or is not a
        regular file (a FIFO is never opened: it would block)."""
        key = os.path.abspath(path)
        st = os.stat(key)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", key)
        entry = self.files.get(key)
        if entry is not None and entry[:4] == _stamp(st) and self._confirmed(key, entry):
            self.used.add(key)
            return str(entry[5])
        with open(key, "rb") as fh:
            st = os.fstat(fh.fileno())
            h = hashlib.sha256()
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        return self._record(key, st, h.hexdigest())

    def derive(self, path: str | os.PathLike[str], name: str, make: Callable[[bytes], T]) -> T:
        """make(the file's bytes), computed once per content and kept under `name`
        (which must say what derives it, with its version). The value must be JSON."""
        key = os.path.abspath(path)
        digest = self.digest(path)
        found = self.recall(name, digest)
        if found is not None:
            return found  # type: ignore[no-any-return]
        with open(key, "rb") as fh:  # digest() found a regular file here
            st = os.fstat(fh.fileno())
            data = fh.read()
        digest = self._record(key, st, hashlib.sha256(data).hexdigest())
        value = make(data)
        self.remember(name, digest, value)
        return value

    def recall(self, name: str, key: str) -> Any:
        """A value remembered under (name, key), or None."""
        value = self.derived.get(name, {}).get(key)
        if value is not None:
            self.used_derived.add((name, key))
        return value

    def remember(self, name: str, key: str, value: Any) -> None:
        """Keep `value` (JSON, not None) under (name, key): `key` must be a digest of
        everything the value was derived from."""
        if self.derived.get(name, {}).get(key) != value:
            self.derived.setdefault(name, {})[key] = value
            self.changed = True
        self.used_derived.add((name, key))

    def _record(self, key: str, st: os.stat_result, digest: str) -> str:
        """Note what the bytes read through a descriptor with stat `st` hash to."""
        self.reads += 1
        self.used.add(key)
        if stat.S_ISREG(st.st_mode):
            self.files[key] = [*_stamp(st), time.time_ns(), digest]
            self.changed = True
        return digest

    def _confirmed(self, key: str, entry: _Entry) -> bool:
        """An entry taken within RACY_NS of the file's last change is trusted only if
        the bytes still hash to it; once old enough it is trusted by stat alone."""
        changed = max(entry[1], entry[2])
        if entry[4] - changed >= self.racy_ns:
            return True
        h = hashlib.sha256()
        try:
            with open(key, "rb") as fh:
                while chunk := fh.read(_CHUNK):
                    h.update(chunk)
        except OSError:
            return False
        self.reads += 1
        if h.hexdigest() != entry[5]:
            return False
        if time.time_ns() - changed >= self.racy_ns:  # old enough now: stop checking
            entry[4] = time.time_ns()
            self.changed = True
        return True

    # ------------------------------------------------------------ writing

    def save(self) -> None:
        """Write back, if anything changed: the entries this process used, and the
        others whose file still exists; derived values used here, and others up to
        MAX_DERIVED per name. Errors are ignored: the cache is only slower then."""
        if self.path is None or not self.changed or not self.path.parent.parent.is_dir():
            return  # nothing new, or no store (removed, or never made): nothing to keep
        # What another process saved since this one read the file is kept too
        # (parallel builds share a store); this process's entries win.
        theirs, their_derived = self._read()
        files = {
            p: e
            for p, e in {**theirs, **self.files}.items()
            if p in self.used or os.path.lexists(p)
        }
        derived: dict[str, dict[str, Any]] = {}
        for name in their_derived.keys() - self.derived.keys():
            self.derived[name] = {}
        for name, values in self.derived.items():
            values = {**their_derived.get(name, {}), **values}
            kept = {k: v for k, v in values.items() if (name, k) in self.used_derived}
            for k, v in values.items():
                if len(kept) >= MAX_DERIVED:
                    break
                kept.setdefault(k, v)
            derived[name] = kept
        body = json.dumps(
            {"files": files, "derived": derived}, ensure_ascii=False, separators=(",", ":")
        ).encode()
        meta = {"format": FORMAT, "sha256": hashlib.sha256(body).hexdigest()}
        with contextlib.suppress(OSError, KilnError):
            atomic_write(self.path, json.dumps(meta).encode() + b"\n" + body)
            ignore = self.path.parent / ".gitignore"
            if not ignore.exists():  # as pytest and mypy do: a cache is never committed
                atomic_write(ignore, IGNORE)
            self.changed = False


_SHARED: dict[Path, StatCache] = {}


def path_in(store: Path) -> Path:
    """Where a store keeps its stat cache."""
    return store / "cache" / "stat.json"


def shared(store: Path) -> StatCache:
    """The stat cache of `store`, read once per process and shared by its users."""
    key = Path(os.path.abspath(store))
    if key not in _SHARED:
        _SHARED[key] = StatCache(path_in(key))
    return _SHARED[key]
