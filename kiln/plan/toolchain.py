"""What a step's output depends on besides its options: library versions and our code.

Versions come from package metadata, so nothing heavy is imported. A step's code is
the static import closure of its builder module (`builder_module`, the one dispatch
rule, which kiln.store.execute runs by), read with `ast`; nothing is imported:

- every `import x` and `from x import y` in a file counts, at module level or inside
  a function (lazy imports run too; over-approximating is the safe direction), when
  x is one of CODE_PACKAGES (not inside `if TYPE_CHECKING:`: those never run, and
  runtime/__init__.py names every runner's type there); a `from` import of a
  submodule counts as that module, and importing a module enters every package above
  it (its `__init__.py`). Imports
  of kiln (the contract types a builder names under TYPE_CHECKING) are not
  followed: builders reach the core only through `request` and `writer`;
- data files: where a module the closure enters has a folder of its own name beside
  it (builders/data/audio.py and builders/data/audio/), every file under that folder;
  for a package, the files in its folder that are not Python. Data is hashed by bytes;
- Python is hashed normalized: the `ast.dump` of the file with its docstrings taken
  out, so comments, formatting and docstrings do not change a key (Python is pinned
  to 3.11 in pyproject, so the dump's format does not vary between machines).

Each file enters the digest with its path relative to the root, so moving a file
re-keys the steps that run it. Digests are cached per (module, root) in the process:
a thousand recipes share a few dozen builder modules.
"""

from __future__ import annotations

import ast
import hashlib
import platform
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from kiln.paths import ROOT
from kiln.schema import FAMILY

# Libraries whose version can change a step's output, by step kind.
LIBRARIES: dict[str, tuple[str, ...]] = {
    "fetch": (),
    "reference": ("torch", "transformers", "tokenizers", "safetensors", "peft"),
    "quantize": ("nvidia-modelopt", "torch", "transformers", "safetensors"),
    "export": ("torch", "transformers", "onnx", "safetensors", "peft"),
    "onnx": ("onnx", "onnxscript"),
    "engine": ("onnxruntime",),
    "drafter": ("torch", "transformers", "onnx", "onnxruntime", "safetensors"),
    "bundle": (),
    "validate": ("onnxruntime", "numpy", "tokenizers"),
}

# What an engine built by a backend other than onnxruntime also depends on.
BACKEND_LIBRARIES: dict[str, tuple[str, ...]] = {
    "onnxruntime": (),
    "aoti": ("torch",),
    "inductor": ("torch", "transformers", "safetensors"),
    "tensorrt": ("tensorrt",),
}

# The packages whose files are a step's code: the builders and the runtime they run.
CODE_PACKAGES = ("builders", "runtime")


def builder_module(kind: str, options: Mapping[str, Any]) -> str:
    """The module whose build() runs a step: builders.fetch for the one shared step;
    a text-generation engine's backend module; else builders.<family>.<kind>."""
    if kind == "fetch":
        return "builders.fetch"
    family = FAMILY[options["task"]]
    if kind == "engine" and family == "causal_lm":
        return f"builders.causal_lm.backends.{options['backend']}"
    return f"builders.{family}.{kind}"


def version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


@dataclass(frozen=True)
class Toolchain:
    """Everything outside the recipe that step keys depend on: library versions, and
    the code at `root`."""

    versions: dict[str, str]
    root: Path = ROOT

    def libraries(self, kind: str, backend: str | None = None) -> dict[str, str]:
        extra = BACKEND_LIBRARIES.get(backend or "", ()) if kind == "engine" else ()
        return {lib: self.versions[lib] for lib in (*LIBRARIES[kind], *extra)}

    def code(self, kind: str, options: Mapping[str, Any]) -> str:
        """The digest of the step's builder's import closure."""
        return digest(builder_module(kind, options), self.root)

    def files(self, kind: str, options: Mapping[str, Any]) -> tuple[str, ...]:
        """The files (relative to the root) whose change re-keys the step."""
        return closure(builder_module(kind, options), self.root)

    def material(self, kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """What outside the recipe goes into a step's key: its libraries' versions and
        its builder code's digest."""
        return {
            "libraries": self.libraries(kind, options.get("backend")),
            "code": self.code(kind, options),
        }

    def lock(self) -> dict[str, str]:
        """What the manifest's lock records: every library a step uses, and Python."""
        return {**self.versions, "python": ".".join(platform.python_version_tuple()[:2])}


@cache
def current(root: Path = ROOT) -> Toolchain:
    groups = (*LIBRARIES.values(), *BACKEND_LIBRARIES.values())
    libs = sorted({lib for group in groups for lib in group})
    return Toolchain(versions={lib: version(lib) for lib in libs}, root=root)


# ---------------------------------------------------------------- code digests


@cache
def digest(module: str, root: Path = ROOT) -> str:
    """sha256 over the closure's files: each one's path and normalized content."""
    h = hashlib.sha256()
    for rel in closure(module, root):
        h.update(rel.encode() + b"\0" + _content(root / rel) + b"\0")
    return h.hexdigest()


@cache
def closure(module: str, root: Path = ROOT) -> tuple[str, ...]:
    """The paths, relative to `root` and sorted, of the files `module` runs and reads.
    A module missing at `root` (a base revision that predates it) contributes nothing."""
    files: set[Path] = set()
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen or name.split(".")[0] not in CODE_PACKAGES:
            continue
        seen.add(name)
        todo += [name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)]  # packages
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
    for level, base, aliases in _scan(path)[1]:
        if level:  # relative: from the package, `level - 1` packages up
            parent = package.rsplit(".", level - 1)[0] if level > 1 else package
            base = f"{parent}.{base}" if base else parent
        names += [base, *(f"{base}.{alias}" for alias in aliases)]
    return tuple(names)


def _content(path: Path) -> bytes:
    return _scan(path)[0] if path.suffix == ".py" else path.read_bytes()


_Import = tuple[int, str, tuple[str, ...]]  # level, module, the names a `from` import takes


@cache
def _scan(path: Path) -> tuple[bytes, tuple[_Import, ...]]:
    """A Python file's normalized content (the AST without docstrings) and its imports;
    a file that does not parse is hashed by bytes (its build will report it)."""
    source = path.read_bytes()
    try:
        tree = ast.parse(source, str(path))
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
        for field in ("body", "orelse", "finalbody"):
            if field == "body" and _type_checking_only(stmt):
                continue  # never runs: a type's import cannot change an output
            yield from _statements(getattr(stmt, field, []))
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
