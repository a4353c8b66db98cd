"""The core stays light: checking, planning and listing never import heavy libraries,
the runtime never imports builders, builders see the core only through the
contract's types, and underscore modules stay in their folder."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import BANNED, ROOT


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


def test_importing_the_core_imports_nothing_heavy() -> None:
    names = imported_modules(
        "-c",
        "import kiln, kiln.catalog, kiln.plan, kiln.store, kiln.evidence.manifest, kiln.evidence.gates, "
        "kiln.site, kiln.site.serve, kiln.catalog.yaml, kiln.schema, kiln.commands.schema, tasks, dodo, "
        "kiln.replay.driver, kiln.replay.chain, kiln.replay.step, kiln.replay.ray_executor",
    )
    assert "kiln.plan" in names and "tasks" in names and "kiln.replay.ray_executor" in names
    assert heavy_in(names) == set()
    # Ray is imported by the Ray executor's run() only, never by importing kiln.
    assert {n for n in names if n.split(".")[0] == "ray"} == set()


def test_doit_list_and_check_import_nothing_heavy() -> None:
    for command in ("list", "check"):
        names = imported_modules("-m", "doit", command)
        assert "kiln.catalog" in names
        assert heavy_in(names) == set(), command


def test_doit_plan_imports_nothing_heavy() -> None:
    names = imported_modules("-m", "doit", "plan", "recipe=tiny-llama")
    assert "kiln.plan" in names
    assert heavy_in(names) == set()


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_runtime_never_imports_builders() -> None:
    files = sorted((ROOT / "runtime").rglob("*.py"))
    assert files
    for path in files:
        bad = {m for m in _imports(path) if m.split(".")[0] in ("builders", "kiln", "tasks")}
        assert bad == set(), f"{path} imports {bad}"


def test_core_never_imports_heavy_modules_anywhere_in_source() -> None:
    """Not even inside functions: the core delegates to builders and runtime."""
    for path in sorted((ROOT / "kiln").rglob("*.py")):
        heavy = {m for m in _imports(path) if m.split(".")[0] in BANNED}
        assert heavy == set(), f"{path} imports {heavy}"


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


def test_builders_reach_the_core_only_through_the_contract_types() -> None:
    """builders/ see kiln only as `request` and `writer`: the one import of kiln allowed is
    the contract's types (kiln.store.api), for the type checker only."""
    files = sorted((ROOT / "builders").rglob("*.py"))
    assert files
    for path in files:
        for node, module, _, typing_only in _import_nodes(path):
            if module.split(".")[0] == "kiln":
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                assert module == "kiln.store.api" and typing_only, f"{where} imports {module}"


def _private_to(dotted: str) -> str | None:
    """The folder (as a package) that the first underscore part of `dotted` is private
    to: an `_x.py` module's folder, or the folder of the module defining a `_name`."""
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            is_module = ROOT.joinpath(*parts[:i], f"{part}.py").is_file()
            return ".".join(parts[: i if is_module else i - 1])
    return None


def test_underscore_modules_are_imported_only_from_their_own_folder() -> None:
    """An `_x.py` module is private to its folder (and the folders below it, such as
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
