"""The layout's rules, read off the code (REDESIGN section 5; issue 13, item 6).

Two kinds of evidence: what Python actually imports when a user runs a command
(`-X importtime`), and what the source says it imports (the AST, lazy imports inside
functions included, so a rule cannot be dodged by moving an import into a function).

  1. The core imports no heavy library, no builder and no runtime module; only the
     `run` command reaches runtime/, inside its function, and only commands/ reach
     tinyhub/.
  2. Inside the core, each stage imports only the ground floor and the stages to its
     left: catalog -> plan -> store -> evidence -> {site, commands} -> replay.
  3. runtime/ imports nothing from kiln, builders or tasks.
  4. builders/ import from kiln only the contract types, under TYPE_CHECKING.
  5. Only tasks.py and dodo.py import doit.
  6. An `_x.py` module is imported only from its own folder.
  7. `doit <verb>` runs a function of kiln/commands/<verb>.py (site, serve and replay:
     their stage packages are the command).
  8. Every package's __init__.py maps its modules, one line each.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BANNED, ROOT

# ---------------------------------------------------------------- what Python imports


def imported_modules(*args: str) -> set[str]:
    """Every module Python imports while running `args` (via -X importtime)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = set()
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    assert names, "importtime printed nothing; the test would prove nothing"
    return names


def heavy_in(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] in BANNED}


def ours_outside_core(names: set[str]) -> set[str]:
    return {n for n in names if n.split(".")[0] in ("builders", "runtime")}


def test_importing_the_core_imports_nothing_heavy() -> None:
    modules = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in (ROOT / "kiln").rglob("*.py")
    )
    names = imported_modules("-c", f"import {', '.join(modules)}, tasks, dodo")
    assert {"kiln.plan", "tasks", "kiln.replay.ray_executor", "kiln.site"} <= names
    assert heavy_in(names) == set()
    assert ours_outside_core(names) == set()
    # Ray is imported by the Ray executor's run() only, never by importing kiln.
    assert {n for n in names if n.split(".")[0] == "ray"} == set()


@pytest.mark.parametrize(
    "command", [("list",), ("check",), ("plan", "recipe=tiny-llama"), ("help", "build")]
)
def test_doit_commands_that_read_the_catalog_import_nothing_heavy(command: tuple[str]) -> None:
    names = imported_modules("-m", "doit", *command)
    assert "kiln.catalog" in names or command[0] in ("list", "help")
    assert heavy_in(names) == set(), command
    assert ours_outside_core(names) == set(), command


# ---------------------------------------------------------------- what the source says


@dataclass(frozen=True)
class Import:
    module: str  # the absolute module imported (for `from a import b`: a, and a.b)
    line: int
    in_function: bool
    type_checking: bool


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts if path != ROOT else ()
    return ".".join(parts).removesuffix(".__init__")


def imports(path: Path, text: str | None = None) -> list[Import]:
    """Every import in a file, with where it sits (lazy or not, TYPE_CHECKING or not)."""
    tree = ast.parse(path.read_text() if text is None else text)
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path.parent)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            lazy = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            guarded = type_checking or (
                isinstance(child, ast.If) and ast.unparse(child.test).endswith("TYPE_CHECKING")
            )
            if isinstance(child, ast.Import):
                found.extend(
                    Import(a.name, child.lineno, in_function, guarded) for a in child.names
                )
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against the package
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, *([base] if base else [])])
                found.append(Import(base, child.lineno, in_function, guarded))
                found.extend(
                    Import(f"{base}.{a.name}", child.lineno, in_function, guarded)
                    for a in child.names
                    if _is_module(f"{base}.{a.name}")
                )
            visit(child, lazy, guarded)

    visit(tree, False, False)
    return found


def _is_module(dotted: str) -> bool:
    path = ROOT / Path(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def sources(folder: str) -> list[Path]:
    files = sorted((ROOT / folder).rglob("*.py"))
    assert files, f"no Python files under {folder}/: the rule would prove nothing"
    return files


def violations(folder: str, allowed: object) -> list[str]:
    out = []
    for path in sources(folder):
        for imp in imports(path):
            verdict = allowed(path, imp)  # type: ignore[operator]
            if verdict is not True:
                out.append(f"{path.relative_to(ROOT)}:{imp.line}: {imp.module} ({verdict})")
    return out


GROUND = {"kiln", "kiln.schema", "kiln.errors", "kiln.canonical", "kiln.fsio", "kiln.hostinfo"}
GROUND |= {"kiln.paths", "kiln.statcache", "kiln.pins", "kiln.proc", "kiln.headers"}
# The pure-stdlib leaves builders may import beside the contract (kiln.plan.toolchain
# LEAVES: followed into their steps' keys).
LEAVES = {"kiln.pins", "kiln.proc"}
STAGES = {"catalog": 0, "plan": 1, "store": 2, "evidence": 3, "site": 4, "commands": 4}
STAGES["replay"] = 5


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "kiln" and parts[1] in STAGES else None


def _core_rule(path: Path, imp: Import) -> bool | str:
    top = imp.module.split(".")[0]
    here = _module_name(path)
    if top in BANNED:
        return "a heavy library in the core"
    if top == "doit" or top == "tasks" or top == "builders":
        return "the core never imports doit, tasks.py or a builder"
    if top == "runtime":
        run_command = here == "kiln.commands.run" and imp.in_function
        return run_command or "only the run command reaches runtime/, inside its function"
    if top == "tinyhub":
        return _stage(here) == "commands" or "only commands/ reach tinyhub/"
    if top != "kiln" or imp.module in GROUND:
        return True
    mine, theirs = _stage(here), _stage(imp.module)
    if mine is None:  # a ground-floor module
        return "the ground floor imports only the ground floor"
    if theirs is None:
        return f"{imp.module} is neither a stage nor the ground floor"
    if theirs == mine or STAGES[theirs] < STAGES[mine]:
        return True
    return f"stage {mine} may import only stages to its left, not {theirs}"


def test_the_core_imports_only_leftwards_and_nothing_heavy() -> None:
    assert violations("kiln", _core_rule) == []


def test_the_leaves_import_only_the_standard_library_and_each_other() -> None:
    for module in LEAVES:
        path = ROOT / Path(*module.split(".")).with_suffix(".py")
        for imp in imports(path):
            top = imp.module.split(".")[0]
            ours = top in ("kiln", "builders", "runtime", "tinyhub", "tasks")
            assert imp.module in LEAVES | {"kiln"} or (
                not ours and top in sys.stdlib_module_names
            ), f"{path.relative_to(ROOT)}:{imp.line}: {imp.module}"


def test_runtime_imports_nothing_from_kiln_builders_or_tasks() -> None:
    def rule(_path: Path, imp: Import) -> bool | str:
        top = imp.module.split(".")[0]
        return top not in ("kiln", "builders", "tasks", "tinyhub", "doit") or "runtime stands alone"

    assert violations("runtime", rule) == []


def test_builders_see_the_core_only_as_the_contract_types() -> None:
    def rule(_path: Path, imp: Import) -> bool | str:
        top = imp.module.split(".")[0]
        if top in ("tasks", "doit", "tinyhub"):
            return "builders never import tasks.py, doit or tinyhub"
        if top != "kiln":
            return True
        contract = imp.module in ("kiln.store.api", "kiln.store") and imp.type_checking
        leaf = imp.module in LEAVES or imp.module == "kiln"  # `from kiln import pins`
        return contract or leaf or "only the contract types under TYPE_CHECKING, and kiln's leaves"

    assert violations("builders", rule) == []


def test_only_tasks_and_dodo_import_doit() -> None:
    files = [p for p in ROOT.rglob("*.py") if not _ignored(p)]
    importers = {
        p.relative_to(ROOT).as_posix()
        for p in files
        if any(i.module.split(".")[0] == "doit" for i in imports(p))
    }
    assert importers == {"tasks.py", "dodo.py"}


def _ignored(path: Path) -> bool:
    parts = path.relative_to(ROOT).parts
    # hidden folders are tools' (.venv, .kiln, a helper's staging copy), not the project's
    return parts[0].startswith(".") or parts[0] in ("node_modules", "_site", "build", "tests")


def _private_rule(path: Path, imp: Import) -> bool | str:
    target = ROOT / Path(*imp.module.split("."))
    private = target.name.startswith("_") and not target.name.startswith("__")
    inside = path.parent.is_relative_to(target.parent)  # its folder, or a subfolder of it
    if private and target.with_suffix(".py").is_file() and not inside:
        return "a private module, imported from outside its folder"
    return True


def test_underscore_modules_are_imported_only_from_their_own_folder() -> None:
    for folder in ("kiln", "builders", "runtime", "tinyhub"):
        assert violations(folder, _private_rule) == []


def test_the_rules_see_a_violation_when_there_is_one() -> None:
    """Each rule flags a line written to break it (so the checks above can fail)."""
    path = ROOT / "builders" / "classify" / "export.py"
    cases = {
        _private_rule: "from builders.causal_lm import _cache\n",
        _core_rule: "def f():\n    import torch\n",
    }
    for rule, text in cases.items():
        found = imports(path, text)
        assert found and any(rule(path, i) is not True for i in found), text
    core = ROOT / "kiln" / "catalog" / "__init__.py"
    for text in ("from kiln.store import Store\n", "import runtime\n", "import builders.fetch\n"):
        assert any(_core_rule(core, i) is not True for i in imports(core, text)), text
    assert all(_core_rule(core, i) is True for i in imports(core, "from kiln import paths\n"))


def _import_nodes(path: Path) -> list[tuple[ast.stmt, str, str | None, bool]]:
    """(node, module, imported name or None, under `if TYPE_CHECKING:`) per import."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and ast.unparse(block.test).endswith("TYPE_CHECKING")
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    found: list[tuple[ast.stmt, str, str | None, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, a.name, None, id(node) in typing_only) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node, node.module, a.name, id(node) in typing_only) for a in node.names]
    return found


def _private_to(dotted: str) -> str | None:
    """The folder (as a package) that the first underscore part of `dotted` is private
    to: an `_x.py` module's folder, or the folder of the module defining a `_name`."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            is_module = ROOT.joinpath(*parts[:i], f"{part}.py").is_file()
            return ".".join(parts[: i if is_module else i - 1])
    return None


def test_private_names_are_used_only_in_their_own_folder() -> None:
    """An `_x.py` module, or a `_name` in a module, is private to its folder (and the folders below it, such as
    builders/causal_lm/backends/): no other folder imports it, or a private name of
    another folder's module."""
    for top in ("builders", "runtime", "kiln"):
        for path in sorted((ROOT / top).rglob("*.py")):
            here = ".".join(path.relative_to(ROOT).parent.parts)
            for node, module, name, _ in _import_nodes(path):
                dotted = module if name is None else f"{module}.{name}"
                owner = _private_to(dotted)
                if owner is None:
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                assert f"{here}.".startswith(f"{owner}."), f"{where} imports {dotted}"


# ---------------------------------------------------------------- commands and maps

# doit's own `run` command names no task: `doit run ... prompt=` runs task `generate`.
VERB_OF_TASK = {"generate": "run"}
STAGE_COMMANDS = {"site": "kiln.site", "serve": "kiln.site.serve", "replay": "kiln.replay"}


def test_each_doit_task_runs_a_function_of_its_command_module() -> None:
    tree = ast.parse((ROOT / "tasks.py").read_text())
    tasks = [n.name.removeprefix("task_") for n in tree.body if isinstance(n, ast.FunctionDef)]
    tasks = [t for t in tasks if not t.startswith("_") and f"task_{t}" in ast.unparse(tree)]
    assert {"build", "check", "plan", "diff", "generate", "site"} <= set(tasks)
    used = {i.module for i in imports(ROOT / "tasks.py")}
    for task in tasks:
        verb = VERB_OF_TASK.get(task, task)
        module = STAGE_COMMANDS.get(verb, f"kiln.commands.{verb}")
        assert _is_module(module), f"doit {verb}: no module {module}"
        assert module in used, f"tasks.py never imports {module} for task {task}"


def test_every_package_maps_its_modules_in_its_docstring() -> None:
    missing = []
    for folder in ("kiln", "builders", "runtime"):
        for init in sorted((ROOT / folder).rglob("__init__.py")):
            doc = ast.get_docstring(ast.parse(init.read_text())) or ""
            for child in sorted(init.parent.iterdir()):
                name = child.stem if child.suffix == ".py" else child.name
                is_package = child.is_dir() and (child / "__init__.py").is_file()
                module = child.suffix == ".py" and child.name != "__init__.py"
                if (module or is_package) and name not in doc:
                    missing.append(f"{init.relative_to(ROOT)}: {name}")
    assert missing == []


def test_unit_tests_need_no_build_extra() -> None:
    """tests/unit/ runs without torch, transformers, onnx and onnxruntime: real builds
    live in tests/builds/ (and site checks of built recipes in tests/e2e/)."""
    unit = sorted((ROOT / "tests" / "unit").glob("test_*.py"))
    assert len(unit) > 10
    marked = []
    for path in unit:
        tree = ast.parse(path.read_text())
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        if "heavy" in names:  # the build-extra marker (conftest.heavy), used or applied
            marked.append(path.name)
    assert marked == []
