"""What a step's output depends on besides its options: library versions and our code.

Keys may change at any commit. Nothing here, nor in the planner, keeps an old key:
a change that re-keys steps rebuilds the manifests it makes stale in the same change
(`doit check` names them), so no option, branch or module exists to preserve one.

A step's libraries are the distributions of the third-party packages its code
imports (the closure below, mapped by importlib.metadata.packages_distributions()),
and those INDIRECT names for what they load on its behalf, each at its installed
version (package metadata: nothing heavy is imported). A step's code is
the static import closure of its builder module (`builder_module`, the one dispatch
rule, which kiln.store.execute runs by), read with `ast`; nothing is imported:

- every `import x` and `from x import y` in a file counts, at module level or inside
  a function (lazy imports run too; over-approximating is the safe direction), when
  x is one of CODE_PACKAGES (not inside `if TYPE_CHECKING:`: those never run, and
  runtime/__init__.py names every runner's type there); a `from` import of a
  submodule counts as that module, and importing a module enters every package above
  it (its `__init__.py`). Imports
  of kiln (the contract types a builder names under TYPE_CHECKING) are not
  followed: builders reach the core only through `request` and `writer`, and the
  pure-stdlib LEAVES, which are followed (kiln.pins, kiln.proc);
- data files: where a module the closure enters has a folder of its own name beside
  it (builders/data/audio.py and builders/data/audio/), every file under that folder;
  for a package, the files in its folder that are not Python. Data is hashed by bytes;
- Python is hashed normalized: the `ast.dump` of the file with its docstrings taken
  out, so comments, formatting and docstrings do not change a key (Python is pinned
  to 3.11 in pyproject, so the dump's format does not vary between machines).

Each file enters the digest with its path relative to the root, so moving a file
re-keys the steps that run it. Digests are cached per (module, root) in the process
(a thousand recipes share a few dozen builder modules), and across processes in the
store's stat cache (kiln.statcache): each file's imports by its bytes' digest, each
closure's digest by its files' digests, and those digests by stat, so a build of an
unchanged tree parses no Python. Closures are recomputed from the cached imports in
every process, and data folders listed afresh: an edited import or an added data file
is seen the next time.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import os
import platform
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from kiln import statcache
from kiln.canonical import key_of
from kiln.paths import ROOT, Paths

# What a library loads on a step's behalf, whose version can change the step's output
# although no file of the step imports it: transformers reads tokenizers with
# `tokenizers`, weights with `safetensors` and GGUF files with `gguf`; onnxscript
# writes its graphs with `onnx`.
INDIRECT: dict[str, tuple[str, ...]] = {
    "transformers": ("tokenizers", "safetensors", "gguf"),
    "onnxscript": ("onnx",),
}

# The packages whose files are a step's code: the builders and the runtime they run;
# and the core's pure-stdlib leaves that builders import beside the contract (the
# rules of a pin, and the one place processes start: fetch runs pip through them).
CODE_PACKAGES = ("builders", "runtime")
LEAVES = ("kiln.pins", "kiln.proc")


def builder_module(kind: str, options: Mapping[str, Any]) -> str:
    """The module whose build() runs a step: builders.fetch for the one shared step
        (builders.fetch_chunks for a file assembled from chunk wheels); a text-generation
        engine's backend module; else builders.<family>.<kind> (a vision-language model's
    decoder steps are causal_lm's; its reference and validate builders.vlm's)."""
    if kind == "fetch":  # chunks: a module of its own, whose changes re-key only them
        return "builders.fetch_chunks" if "chunks" in options else "builders.fetch"
    if kind == "import":
        return f"builders.{options['format']}"
    from kiln.schema import FAMILY  # pydantic's models: only where a step is dispatched

    family = FAMILY[options["task"]]
    if family == "vlm" and kind not in ("reference", "validate"):
        family = "causal_lm"  # a VLM's decoder is a causal LM's graph, its features merged
    if kind == "engine" and family == "causal_lm":
        return f"builders.causal_lm.backends.{options['backend']}"
    return f"builders.{family}.{kind}"


def version(dist: str) -> str:
    try:
        found = metadata.distribution(dist)
    except metadata.PackageNotFoundError:
        return "absent"
    return version_of(found)


def version_of(found: metadata.Distribution) -> str:
    """`found.version`, read from the metadata's header block alone: importlib.metadata
    parses the whole file with the email parser (a long description included), most
    of what a no-op build spent on versions. Headers end at the first blank line; the
    first Version header counts, as email.message's lookup gives it."""
    text = found.read_text("METADATA") or found.read_text("PKG-INFO") or ""
    for line in text.splitlines():
        if not line.strip():
            break
        name, colon, value = line.partition(":")
        if colon and name.strip().lower() == "version" and not line[0].isspace():
            return value.strip()
    return str(found.version)


def python() -> str:
    """The Python a key's code digests were made by (its major.minor: `ast.dump`)."""
    return ".".join(platform.python_version_tuple()[:2])


@dataclass(frozen=True)
class Toolchain:
    """Everything outside the recipe that step keys depend on: library versions, and
    the code at `root`. `versions` caches what steps asked for (two toolchains of one
    environment, as `doit diff` plans the base and the head, may share it)."""

    versions: dict[str, str] = field(default_factory=dict)
    root: Path = ROOT

    def version(self, dist: str) -> str:
        if dist not in self.versions:
            self.versions[dist] = version(dist)
        return self.versions[dist]

    def libraries(self, kind: str, options: Mapping[str, Any]) -> dict[str, str]:
        """The step's libraries (module docstring), each with its installed version."""
        module = builder_module(kind, options)
        return {dist: self.version(dist) for dist in libraries(module, self.root)}

    def code(self, kind: str, options: Mapping[str, Any]) -> str:
        """The digest of the step's builder's import closure."""
        return digest(builder_module(kind, options), self.root)

    def files(self, kind: str, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The files (relative to the root) whose change re-keys the step."""
        return closure(builder_module(kind, options), self.root)

    def material(self, kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """What outside the recipe goes into a step's key: its libraries' versions and
        its builder code's digest."""
        return {"libraries": self.libraries(kind, options), "code": self.code(kind, options)}


@cache
def current(root: Path = ROOT) -> Toolchain:
    return Toolchain(root=root)


# ---------------------------------------------------------------- libraries


@cache
def imported(module: str, root: Path = ROOT) -> frozenset[str]:
    """The top-level packages outside the standard library and this repository that
    the closure's Python files import, anywhere in them (lazy imports count; imports
    under TYPE_CHECKING never run and do not)."""
    ours = {*CODE_PACKAGES, "kiln", "tinyhub", "__future__"}
    names = {
        base.split(".")[0]
        for rel in closure(module, root)
        if rel.endswith(".py")
        for level, base, _ in _file_imports(root / rel)
        if not level and base
    }
    return frozenset(n for n in names if n not in ours and n not in sys.stdlib_module_names)


@cache
def libraries(module: str, root: Path = ROOT) -> tuple[str, ...]:
    """The distributions whose versions are in the key of a step `module` runs: those
    of the packages its closure imports, and what they load (INDIRECT), sorted. A
    package that is not installed here is named as imported (its version: absent)."""
    owners = _owners()
    todo = [dist for name in imported(module, root) for dist in owners.get(name, [name])]
    found: set[str] = set()
    while todo:
        dist = todo.pop()
        if dist not in found:
            found.add(dist)
            todo += INDIRECT.get(dist, ())
    return tuple(sorted(found))


def installed() -> tuple[str, ...]:
    """The distributions installed on sys.path, as their metadata folders are named
    (name and version): what an install, upgrade or removal changes."""
    found: list[str] = []
    for entry in sys.path:
        with contextlib.suppress(OSError):
            found += sorted(
                n for n in os.listdir(entry or ".") if n.endswith((".dist-info", ".egg-info"))
            )
    return tuple(found)


OWNERS = "toolchain.owners/1"


@cache
def _owners() -> dict[str, list[str]]:
    """importlib.metadata.packages_distributions(): top-level package -> distributions.
    It reads every installed distribution's file list (0.13 s here), so it is kept in
    the stat cache under what is installed."""
    key = key_of(installed())
    stats = _stat_cache()
    found = stats.recall(OWNERS, key)
    if isinstance(found, dict):
        return found
    owners = {k: sorted(set(v)) for k, v in metadata.packages_distributions().items()}
    stats.remember(OWNERS, key, owners)
    return owners


# ---------------------------------------------------------------- code digests

# What the cached scans and digests were made by: this module and the Python whose
# `ast` it dumps. A change to either misses every cached value of the old one.
_TAG = hashlib.sha256(Path(__file__).read_bytes() + platform.python_version().encode()).hexdigest()[
    :16
]
IMPORTS = f"toolchain.imports/{_TAG}"  # a Python file's imports, by its bytes' digest
CODE = f"toolchain.code/{_TAG}"  # a closure's digest, by its files' paths and digests


def _stat_cache() -> statcache.StatCache:
    """Code files are read through the store's stat cache (kiln.statcache): a process
    whose tree is unchanged parses no Python, it only stats. The build command saves it."""
    return statcache.shared(Paths.from_env().store)


@cache
def digest(module: str, root: Path = ROOT) -> str:
    """sha256 over the closure's files: each one's path and normalized content.

    Remembered in the stat cache under the closure's paths and their bytes' digests,
    so an unchanged closure is hashed from stats; on a miss the digest is computed
    from the bytes, and remembered only if those bytes are the ones the key names (a
    file edited meanwhile is not cached under its old digest)."""
    files = closure(module, root)
    stats = _stat_cache()
    key = key_of([[rel, stats.digest(root / rel)] for rel in files])
    found = stats.recall(CODE, key)
    if isinstance(found, str):
        return found
    h = hashlib.sha256()
    read = []
    for rel in files:
        data = (root / rel).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        read.append([rel, sha])
        content = _normalized(data, sha, rel) if rel.endswith(".py") else data
        h.update(rel.encode() + b"\0" + content + b"\0")
    if key_of(read) == key:
        stats.remember(CODE, key, h.hexdigest())
    return h.hexdigest()


@cache
def closure(module: str, root: Path = ROOT) -> tuple[str, ...]:
    """The paths, relative to `root` and sorted, of the files `module` runs and reads.
    A module missing at `root` (a base revision that predates it) contributes nothing.

    Recomputed in every process from each file's imports (cached by its bytes), so
    an edit that changes a file's imports changes the closure; data folders are
    listed afresh, so a file added to one is in it."""
    files: set[Path] = set()
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or (name.split(".")[0] not in CODE_PACKAGES and name not in LEAVES):
            continue
        seen.add(name)
        if name not in LEAVES:  # kiln/__init__.py holds a docstring and a version only
            todo += [name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)]
        path = _source(name, root)
        if path is not None:
            files |= {path, *_data(path)}
            todo += _imports(path, name)
    return tuple(sorted(p.relative_to(root).as_posix() for p in files))


def _source(module: str, root: Path) -> Path | None:
    base = root.joinpath(*module.split("."))
    for path in (base / "__init__.py", base.with_name(base.name + ".py")):
        if path.is_file():
            return path
    return None


def _data(source: Path) -> list[Path]:
    if source.name == "__init__.py":
        return [p for p in source.parent.iterdir() if p.is_file() and p.suffix != ".py"]
    folder = source.with_suffix("")
    if not folder.is_dir() or (folder / "__init__.py").exists():
        return []
    return [p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts]


@cache
def _imports(path: Path, module: str) -> tuple[str, ...]:
    """Every module name `path` (module `module`) may import, anywhere in the file."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: list[str] = []
    for level, base, aliases in _file_imports(path):
        if level:  # relative: from the package, `level - 1` packages up
            parent = package.rsplit(".", level - 1)[0] if level > 1 else package
            base = f"{parent}.{base}" if base else parent
        names += [base, *(f"{base}.{alias}" for alias in aliases)]
    return tuple(names)


_Import = tuple[int, str, tuple[str, ...]]  # level, module, the names a `from` import takes


def _file_imports(path: Path) -> list[_Import]:
    """The imports of a Python file, parsed once per content (the stat cache's)."""

    def scan(data: bytes) -> list[list[Any]]:
        return [[level, base, list(names)] for level, base, names in _scan(data, str(path))[1]]

    found = _stat_cache().derive(path, IMPORTS, scan)
    return [(level, base, tuple(names)) for level, base, names in found]


_NORMALIZED: dict[str, bytes] = {}  # a Python file's normalized content, by its bytes' sha256


def _normalized(data: bytes, sha: str, filename: str) -> bytes:
    """_scan's normalized content, once per content in this process: the closures of a
    catalog share most of their files (a cold `doit check` parsed each file once per
    closure, 398 parses for 130 files)."""
    if sha not in _NORMALIZED:
        _NORMALIZED[sha] = _scan(data, filename)[0]
    return _NORMALIZED[sha]


def _scan(source: bytes, filename: str) -> tuple[bytes, tuple[_Import, ...]]:
    """A Python file's normalized content (the AST without docstrings) and its imports;
    a file that does not parse is hashed by bytes (its build will report it)."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return source, ()
    imports: list[_Import] = []
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            imports += [(0, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imports.append((node.level, node.module or "", tuple(a.name for a in node.names)))
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            _drop_docstring(node)
    _drop_docstring(tree)
    return ast.dump(tree).encode(), tuple(imports)


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement, nested ones included (imports are statements: no expression
    needs visiting)."""
    for stmt in body:
        yield stmt
        for part in ("body", "orelse", "finalbody"):
            if part == "body" and _type_checking_only(stmt):
                continue  # never runs: a type's import cannot change an output
            yield from _statements(getattr(stmt, part, []))
        for handler in getattr(stmt, "handlers", []):
            yield from _statements(handler.body)
        for case in getattr(stmt, "cases", []):
            yield from _statements(case.body)


def _type_checking_only(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and ast.unparse(stmt.test).endswith("TYPE_CHECKING")


def _drop_docstring(
    node: ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef,
) -> None:
    first = node.body[0] if node.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        node.body = node.body[1:]
