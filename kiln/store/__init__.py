"""The content-addressed store: artifacts live under the key of the step that made them.

Layout (the store is the truth; doit's DB is only a hint of what is up to date):

    <store>/objects/<key[:2]>/<key>/   a published artifact, read-only
        .kiln-artifact.json            kind, key, name, sha256 and size of every file
    <store>/blobs/<sha[:2]>/<sha>      which published file holds a large file's bytes
    <store>/tmp/<key>.<random>/        a build in progress, or an artifact being removed
    <store>/locks/<key>.lock           held while one process builds <key>
    <store>/locks/<key>.holder.json    who holds it (pid, host, step), for waiting builds
    <store>/log/builds.jsonl           one line per artifact built (who, when, how long)
    <store>/cache/parse/<root>.json    the catalog's parsed YAML (kiln/catalog/cache.py)
    <store>/cache/stat.json            file digests by stat, and what they key (kiln/statcache.py)
    <store>/cache/plans/<root>.json    what the last build planned (kiln/commands/plancache.py)

Publishing follows what Nix and huggingface_hub do: build into a temp dir inside
the store (same filesystem), fsync every file, write the artifact record last, make
the contents read-only, rename the directory into place (atomic), fsync the parent,
then make the directory itself read-only. A killed build leaves only a temp dir,
which `gc` removes; a reader never sees half an artifact. Removing goes the other
way: rename out of `objects/` first, then delete, so a kill mid-delete leaves no
half artifact either.

Large files are stored once. Sealing an artifact hardlinks each file of BLOB_MIN
bytes or more to a published file with the same sha256, which `blobs/<sha256>` names:
an engine's weights that the bundle copies take their bytes once however many
artifacts hold them. Only duplicates are linked (onnx and onnx_ir refuse to read
external data that has more than one link, so a file nobody duplicates keeps one),
every artifact still lists and verifies its own files, and removing an artifact
removes only its links. Where hardlinks cannot be made, the copy stays.

Nothing in the layout is a symbolic link, and nothing here follows one (issue 37): a
linked entry, shard or record is absent to `has`, and a build makes it again in
place of the link; a linked tmp/, locks/, objects/ or log/ is refused with its
target. The store's root itself may be a link: that is where the user put the store.

  __init__.py     Store, Writer, Artifact: the layout above and the publish protocol
  api.py          Request and Writer protocols: the whole builder contract
  execute.py      run one step: lock, reuse or build, publish (the only caller of builders)
  workers.py      doit -n's workers: their share of the cores, the libraries they share
  keylock.py      per-key build locks (filelock) and who holds them
  unsupported.py  the unsupported-here marker a step publishes instead of an output
  verify.py       re-hash artifacts against their sealed records
  gc.py           remove stale temp dirs and unreferenced artifacts (rename, then delete)
  links.py        symbolic links in the layout: found with their targets, removed (only them)
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import socket
import stat
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kiln import hostinfo, pins, statcache
from kiln.canonical import key_of, pretty
from kiln.errors import KilnError, Location
from kiln.fsio import (
    atomic_write,
    describe,
    first_link,
    fsync_dir,
    fsync_file,
    inside,
    link_target,
    make_read_only,
    plain_file,
    real_entries,
    remove_tree,
    sha256_file,
    write_new,
)

__all__ = ["EVIDENCE", "RECORD", "Artifact", "Store", "Writer", "atomic_write", "sha256_file"]

RECORD = ".kiln-artifact.json"
BLOB_MIN = 1 << 20  # files this large are stored once by content (blobs/)
EVIDENCE = "evidence.json"  # what a validate step measured; kiln.evidence records it


def _record_intact(path: Path, record: dict[str, Any]) -> bool:
    """The record is byte for byte what `_seal` wrote: canonical, with a matching digest.
    (Records written before the digest existed carry none; their files still verify.)"""
    if "sha256" not in record:
        return True
    rest = {k: v for k, v in record.items() if k != "sha256"}
    return record["sha256"] == key_of(rest) and path.read_bytes() == pretty(record)


_KEY = re.compile("[0-9a-f]{64}")
# Every key a record may hold: _seal's, execute's meta ("seconds") and a replay's run.
RECORD_KEYS = frozenset(
    {"kind", "name", "material", "key", "files", "sizes", "created", "sha256", "seconds"}
    | {"run", "attempt", "cpu_seconds"}
)


@dataclass(frozen=True)
class Damage:
    """One file of an artifact that does not match the artifact's sealed record."""

    file: str
    why: str
    expected: str = ""  # the record's sha256
    got: str = ""  # the file's, when it was hashed

    def __str__(self) -> str:
        if self.got:
            return f"{self.file}: the record says sha256 {self.expected}, the file has {self.got}"
        return f"{self.file}: {self.why}"


_TRUSTED = "artifact-stamp/1"  # statcache name: key -> the stamp it last verified with


def _stamp_of(root: str) -> tuple[str | None, int]:
    """(sha256 of the lstat of every entry under `root`, the newest mtime or ctime),
    or (None, 0) when it cannot be listed."""
    parts, newest, todo = [], 0, [root]
    try:
        while todo:
            top = todo.pop()
            with os.scandir(top) as it:
                for entry in it:
                    st = entry.stat(follow_symlinks=False)
                    rel = entry.path[len(root) :]
                    parts.append(
                        f"{rel}\0{st.st_mode}\0{st.st_size}\0{st.st_mtime_ns}\0"
                        f"{st.st_ctime_ns}\0{st.st_ino}"
                    )
                    newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(entry.path)
            st = os.lstat(top)
            newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:
        return None, 0
    digest = hashlib.sha256("\n".join(sorted(parts)).encode()).hexdigest()
    return digest, newest


def check_key(key: str) -> str:
    if not isinstance(key, str) or _KEY.fullmatch(key) is None:
        raise KilnError.one(f"{key!r} is not a store key", None, "keys are 64 lowercase hex")
    return key


class Writer:
    """What a builder writes through (the kiln.store.api.Writer protocol). Paths cannot
    leave the artifact's directory."""

    def __init__(self, root: Path, progress: Callable[[str], None] | None = None) -> None:
        self.root = root
        self._progress = progress

    def path(self, name: str) -> Path:
        target = inside(self.root, name, "artifact path")
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def write_bytes(self, name: str, data: bytes) -> Path:
        target = self.path(name)
        write_new(target, data)
        return target

    def write_json(self, name: str, obj: Any) -> Path:
        return self.write_bytes(name, pretty(obj))

    def log(self, message: str) -> None:
        if self._progress:
            self._progress(message)

    def evidence(
        self,
        metrics: Mapping[str, float],
        outputs: Sequence[str],
        backend: Mapping[str, Any],
        **extra: Any,
    ) -> Path:
        """evidence.json: on what backend, what was measured, what came out (and any
        `extra` fields), stamped here with when and where (kiln.hostinfo): the date and
        host are the core's, never a builder's."""
        record = {
            "backend": dict(backend),
            "metrics": dict(metrics),
            "outputs": list(outputs),
            **extra,
            **hostinfo.stamp(),
        }
        return self.write_json(EVIDENCE, record)


@dataclass(frozen=True)
class Artifact:
    key: str
    path: Path

    def record(self) -> dict[str, Any]:
        """The sealed record, through the guarded JSON reader (the store is a folder
        anyone can write: capped, depth-limited, never through a link or from a FIFO);
        ValueError when it cannot be one."""
        return read_object(self.path / RECORD)

    def file(self, name: str) -> Path:
        return inside(self.path, name, "artifact file")


RECORD_BYTES = 16 << 20  # a record lists an artifact's files: a few KB


def read_object(path: Path) -> dict[str, Any]:
    """A JSON object kiln wrote into the store, or ValueError saying why it is not one
    (kiln.pins.read_json: light enough for a no-op build, which reads records)."""
    data = pins.read_json(path, RECORD_BYTES)  # PinError is a ValueError
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a {type(data).__name__}, not a JSON object")
    return data


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._stats: statcache.StatCache | None = None  # read on first use: trusted()

    def object_dir(self, key: str) -> Path:
        check_key(key)
        return self.root / "objects" / key[:2] / key

    def has(self, key: str) -> bool:
        """Is the artifact published: its record a regular file in real folders? A link
        anywhere on the way (objects/, the shard, the entry, the record) is not an
        artifact, whatever it points at (issue 37): a build makes it again."""
        check_key(key)  # lstat per part, no pathlib: a no-op build asks this of every step
        return plain_file(self.root, "objects", key[:2], key, RECORD)

    def get(self, key: str) -> Artifact:
        if not self.has(key):
            raise KilnError.one(f"artifact {key[:12]} is not in the store {self.root}")
        return Artifact(key, self.object_dir(key))

    def lock_path(self, key: str) -> Path:
        return self.root / "locks" / f"{check_key(key)}.lock"

    def lock(
        self, key: str, what: str, timeout: float = 6 * 3600
    ) -> contextlib.AbstractContextManager[None]:
        """Hold the build lock of one key. flock is released by the OS if we die."""
        from kiln.store import keylock  # filelock: only a build that runs a step locks

        self._own_dir("locks")
        return keylock.hold(self.lock_path(key), what, timeout)

    def _own_dir(self, name: str) -> Path:
        """`<store>/<name>`, a folder of the layout, made if absent. A symbolic link
        there is refused with its target, never followed (issue 37): kiln writes only
        inside its store, and a temp dir on another disk cannot be renamed into
        objects/."""
        path = self.root / name
        self._refuse_link(path)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _refuse_link(self, path: Path) -> None:
        if path.is_symlink():
            from kiln.store import links  # it imports this module

            cause, fix = links.refusal(path, self.root)
            raise KilnError.one(cause, Location(str(path)), fix)

    @contextlib.contextmanager
    def publish(self, key: str, meta: dict[str, Any], replace: bool = False) -> Iterator[Writer]:
        """Build an artifact in a temp dir; publish it atomically when the block ends.

        `replace` swaps out an artifact already under the key: only a measurement
        (validate) is ever replaced, when a replay measures again. The caller holds
        the key's lock, so no other build races the swap."""
        with self._disk_errors(key, meta, "creating its temp dir"):
            tmp = self._new_temp(key)
        try:
            with self._disk_errors(key, meta, "writing it"):
                yield Writer(tmp)
                self._seal(tmp, key, meta)
                if replace:
                    self.remove(key)
                self._move_into_place(tmp, key)
        finally:
            with contextlib.suppress(OSError):  # what is left is a stale temp: gc removes it
                remove_tree(tmp)

    def _new_temp(self, key: str) -> Path:
        tmp_root = self._own_dir("tmp")  # a link out would build elsewhere
        return Path(tempfile.mkdtemp(dir=tmp_root, prefix=f"{check_key(key)}."))

    @contextlib.contextmanager
    def _disk_errors(self, key: str, meta: dict[str, Any], doing: str) -> Iterator[None]:
        """A failing disk is not a bug: say what failed, where, and that nothing was lost."""
        try:
            yield
        except OSError as exc:
            what = meta.get("name") or meta.get("kind") or "artifact"
            raise KilnError.one(
                f"could not publish {what} [{key[:12]}] while {doing}: {describe(exc)}",
                Location(str(exc.filename or self.root)),
                "nothing was published and the store is intact; free space or fix the disk, "
                "then build again",
            ) from None

    def _seal(self, tmp: Path, key: str, meta: dict[str, Any]) -> None:
        files, sizes, dirs = {}, {}, [tmp]
        for p in sorted(tmp.rglob("*")):
            rel = p.relative_to(tmp).as_posix()
            mode = p.lstat().st_mode
            if stat.S_ISDIR(mode):
                dirs.append(p)
                continue
            if not stat.S_ISREG(mode):
                raise KilnError.one(
                    f"artifact file {rel!r} is a symlink or a special file",
                    None,
                    "an artifact holds regular files only; copy the file in",
                )
            fsync_file(p)
            files[rel], sizes[rel] = sha256_file(p), p.lstat().st_size
            if sizes[rel] >= BLOB_MIN:
                self._share(p, files[rel], sizes[rel], self.object_dir(key) / rel)
        record = {**meta, "key": key, "files": files, "sizes": sizes, "created": time.time()}
        record["sha256"] = key_of(record)  # so a flipped byte in the record shows too
        write_new(tmp / RECORD, pretty(record), sync=True)  # last: it marks the artifact whole
        make_read_only(tmp, top=False)
        for d in reversed(dirs):
            fsync_dir(d)

    def _share(self, path: Path, digest: str, size: int, final: Path) -> None:
        """Make `path` a hardlink of a published file with the same bytes, if the store
        holds one (blobs/<sha256> names it); otherwise name `final`, where `path` will
        be published, as the holder of these bytes. A holder is linked only while its
        own bytes still hash to `digest`."""
        index = self.root / "blobs" / digest[:2] / digest
        if first_link(self.root, "blobs", digest[:2], digest) is not None:
            return  # damage (verify names it): neither read nor write through a link
        try:
            held = self._holder(index.read_text(encoding="ascii").strip())
            if (
                held is not None
                and held.stat().st_size == size
                and statcache.shared(self.root).digest(held) == digest
            ):
                if os.path.samestat(held.stat(), path.stat()):
                    # the builder linked it in already (builders/common/files.py); a
                    # rename of one link over another of the same file does nothing
                    # and would leave the .link file in the artifact
                    return
                link = path.with_name(f".{path.name}.link")
                os.link(held, link)
                os.replace(link, path)
                return
        except (OSError, ValueError):
            pass  # no holder yet, or it is gone or damaged: this file becomes the holder
        with contextlib.suppress(OSError):
            index.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(index, final.relative_to(self.root).as_posix().encode())

    def _holder(self, name: str) -> Path | None:
        """The published file a blob index names, if it is one: a regular file in
        objects/, reached through real folders only."""
        parts = name.split("/")
        if len(parts) < 4 or parts[0] != "objects" or ".." in parts:
            return None
        return self.root / name if plain_file(self.root, *parts) else None

    def _move_into_place(self, tmp: Path, key: str) -> None:
        final = self.object_dir(key)
        self._own_dir("objects")
        self._unlink_link(final.parent)
        final.parent.mkdir(parents=True, exist_ok=True)
        self._unlink_link(final)
        inside(self.root, f"objects/{key[:2]}/{key}", "store key")  # no symlinked shard
        fsync_dir(final.parent.parent)
        if final.exists() and not self.has(key):
            self._discard(final)  # an entry with no record is junk (never a reader's)
        try:
            os.rename(tmp, final)
        except OSError as exc:
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY) and self.has(key):
                return  # someone else published the same key: same inputs, same bytes
            raise
        try:
            fsync_dir(final.parent)
            final.chmod(final.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
        except OSError as exc:
            raise KilnError.one(
                f"published [{key[:12]}] but the disk failed to confirm it: {describe(exc)}",
                Location(str(final)),
                "the artifact is complete; run `doit verify`, and check the disk",
            ) from None

    @staticmethod
    def _unlink_link(path: Path) -> None:
        """A linked shard or entry is never an artifact (has() says so): the build that
        makes the key again replaces the link, only the link (issue 37)."""
        if path.is_symlink():
            with contextlib.suppress(FileNotFoundError):  # a build of a key beside it did
                path.unlink()

    def verify(self, key: str, digest: Callable[[Path], str] = sha256_file) -> list[str]:
        """Files of the artifact whose bytes no longer match its record (also files that
        are missing, unexpected, or not regular files)."""
        return [d.file for d in self.damage(key, digest)]

    def trusted(self, key: str) -> list[Damage]:
        """What keeps the artifact from being used (empty: use it). Every use of an
        artifact goes through this: a build deciding a step is up to date, an input
        handed to a builder, `doit run`'s bundle.

        Cheap, as git's index is: the lstat of every entry of the artifact (size,
        mtime, ctime, inode, mode) is taken, and if it is the one recorded when the
        artifact last verified in full, nothing is read. Any write changes a ctime, so
        a flipped byte, a replaced or added file shows; a stamp taken within
        statcache.RACY_NS of a change is not kept. Otherwise `damage` runs, through the
        stat cache's digests."""
        if self._stats is None:
            self._stats = statcache.shared(self.root)
        cache = self._stats
        stamp, newest = _stamp_of(os.path.join(self.root, "objects", key[:2], key))
        if stamp is not None and cache.recall(_TRUSTED, key) == stamp:
            return []

        def digest(path: Path) -> str:
            try:
                return cache.digest(path)
            except OSError:
                return ""  # gone or not a regular file: damage says which

        bad = self.damage(key, digest)
        if not bad and stamp is not None and time.time_ns() - newest >= statcache.RACY_NS:
            cache.remember(_TRUSTED, key, stamp)
        return bad

    def damage(self, key: str, digest: Callable[[Path], str] = sha256_file) -> list[Damage]:
        """What differs between the artifact and its sealed record, file by file, with
        both digests. `digest` may be a stat cache's (kiln/statcache.py): `doit verify`
        re-hashes every byte, a build trusting an artifact need not."""
        art = self.get(key)
        try:
            record = art.record()
            files: dict[str, str] = record["files"]
            sizes: dict[str, int] = record.get("sizes", {})
        except (OSError, ValueError, KeyError, TypeError):
            return [Damage(RECORD, "the artifact record is unreadable")]
        unknown = sorted(set(record) - RECORD_KEYS) if isinstance(record, dict) else []
        if unknown:  # a flipped byte in a key, "sha256" too, would otherwise pass as old
            return [Damage(RECORD, f"the artifact record has unknown keys {unknown}")]
        if not _record_intact(art.path / RECORD, record):
            return [Damage(RECORD, "the artifact record does not match its own digest")]
        bad = []
        on_disk = {
            p.relative_to(art.path).as_posix(): p
            for p in art.path.rglob("*")
            if not p.is_dir() or p.is_symlink()
        }
        on_disk.pop(RECORD, None)
        for name in sorted(set(files) | set(on_disk)):
            path = on_disk.get(name)
            if path is None:
                bad.append(Damage(name, "missing", files[name]))
            elif path.is_symlink():  # never followed: its target is not the artifact's
                bad.append(Damage(name, f"is a symbolic link to {link_target(path)}"))
            elif name not in files:
                bad.append(Damage(name, "not in the record"))
            elif not path.is_file():
                bad.append(Damage(name, "not a regular file", files[name]))
            elif name in sizes and path.stat().st_size != sizes[name]:
                # cheap first: a truncated file needs no hashing
                why = f"{path.stat().st_size} bytes, the record says {sizes[name]}"
                bad.append(Damage(name, why, files[name]))
            else:
                got = digest(path)
                if got != files[name]:
                    bad.append(Damage(name, "bytes differ", files[name], got))
        return bad

    def keys(self) -> Iterator[str]:
        """Keys of every published artifact (never one reached through a link)."""
        for shard in real_entries(self.root / "objects"):
            for entry in real_entries(shard):
                if plain_file(entry, RECORD):
                    yield entry.name

    def remove(self, key: str) -> None:
        """Remove the key's entry (a link there: only the link). Never through a linked
        objects/ or shard: what is there is not the store's to delete."""
        target = self.object_dir(key)
        if first_link(self.root, "objects", key[:2]) is None and os.path.lexists(target):
            self._discard(target)

    def _discard(self, target: Path) -> None:
        """Move out of objects/ first (atomic), then delete at leisure."""
        if target.is_symlink() or not target.is_dir():
            target.unlink()
            return
        tmp_root = self._own_dir("tmp")
        target.chmod(0o755)  # renaming a directory updates its '..': it must be writable
        trash = Path(tempfile.mkdtemp(dir=tmp_root, prefix=f"{target.name}.removed."))
        os.rename(target, trash / "entry")
        fsync_dir(target.parent)
        remove_tree(trash)

    def built_here(self) -> set[str]:
        """The keys of every artifact this store built (log/builds.jsonl): what it can
        miss. A line that does not read as a journal entry is passed over."""
        path = self.root / "log" / "builds.jsonl"
        if not plain_file(self.root, "log", "builds.jsonl"):
            return set()
        keys = set()
        with path.open("rb") as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    key = json.loads(line).get("key")
                    if isinstance(key, str):
                        keys.add(key)
        return keys

    def journal(self, entry: dict[str, Any]) -> None:
        """Append one line to log/builds.jsonl: who built what, when, in how long.
        One O_APPEND write per line, so lines from concurrent builds never interleave."""
        log = self._own_dir("log")
        line = json.dumps(
            {**entry, "pid": os.getpid(), "host": socket.gethostname(), "time": time.time()},
            sort_keys=True,
        )
        path = log / "builds.jsonl"
        self._refuse_link(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)
